"""Whether a line of the source runs for a launch: the guards on the way to it in its function, the
calls that reach that function in its module, and the calls from other modules that reach a function
nothing in its own module calls (``model_hook.handle_model_specific_adjustments`` calls
``apply_deepseek_v4_defaults`` only ``if model_arch in ["DeepseekV4ForCausalLM"]``).

``Reacher(tree, snapshot, model_config, command=..., probes=...)`` evaluates once per launch;
``.reach("srt/arg_groups/deepseek_v4_hook.py:142")`` gives a :class:`Reach`: ``fired`` (a path on
which every guard holds), ``not fired`` (every path has a guard that fails for this launch) or
``unknown``. An explained write (kit.provenance.AssignmentSite) may be given: its own guards, which
explain() already evaluated with the field it writes shadowed, are used, and the calls from other
modules are added. The doctor keeps a cited site only when it is not ``not fired``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kit._pysource import Evaluator, ModuleInfo
from kit._text import short_path
from kit.model_config import load_model_config

from .explain import _Defaults, _environment, _Known, _snapshot_values
from .guards import _ancestors, _bindings, _call_paths, _caller_walk, _status, _Walk
from .result import AssignmentSite, Guard
from .sites import index_for

__all__ = ["Reach", "Reacher"]

_MAX_DEPTH = 4  # calls followed across modules


@dataclass
class Reach:
    where: str  # "srt/...py:LINE"
    status: str  # fired, unknown, not fired
    reason: str
    guards: list[Guard] = field(default_factory=list)  # the guards of the path that decides it

    @property
    def failed(self) -> list[Guard]:
        return [g for g in self.guards if g.passes is False]

    def why_not(self) -> str:
        """The failing guards, in a sentence (empty when it is not 'not fired')."""
        if self.status != "not fired":
            return ""
        parts = []
        for g in self.failed[:2]:
            at = f" ({g.where})" if g.where else f" (line {g.line})"
            parts.append(f"`{g.condition}` is false for this launch{at}")
        return "; ".join(parts) or self.reason


class Reacher:
    """Evaluates where lines of ``tree`` run for one launch (its args, config.json, command, environment)."""

    def __init__(self, tree, snapshot=None, model_config=None, *, command=None, environ=None, probes=None) -> None:
        self.tree = tree
        self.cache = index_for(tree)
        self.values = _snapshot_values(snapshot) or {}
        self.config = load_model_config(model_config)
        self.known = _Known(tree)
        self.explicit = self.known.explicit(command)
        self.environ = _environment(environ)
        self.probes = probes
        self._evaluators: dict[frozenset, Evaluator] = {}
        self._memo: dict[tuple, Reach] = {}

    def evaluator(self, shadowed=()) -> Evaluator:
        """One evaluator per set of shadowed fields (a field being explained: guards see its value at
        launch, from the command or its default, not the logged final value)."""
        key = frozenset(shadowed)
        if key not in self._evaluators:
            initial = {}
            for name in key:
                initial.update(self.known.initial(name, self.explicit))
            self._evaluators[key] = Evaluator(self.cache.modules, self.values, self.config, set(key),
                                              defaults=_Defaults(self.tree), environ=self.environ,
                                              initial=initial, probes=self.probes)
        return self._evaluators[key]

    def reach(self, where: str, *, site: AssignmentSite | None = None, shadowed=()) -> Reach:
        key = (where, id(site) if site is not None else None, frozenset(shadowed))
        if key not in self._memo:
            self._memo[key] = self._reach(where, site, tuple(shadowed))
        return self._memo[key]

    def _reach(self, where: str, site: AssignmentSite | None, shadowed: tuple) -> Reach:
        path, line = _split(where)
        module = self.cache.modules.get(path) if path else None
        if module is None or line is None:
            return Reach(where, "unknown", f"{where} is not a line of a file of this sglang tree")
        ev = self.evaluator(shadowed)
        parents = self.cache.parents(module)
        if site is not None:
            own, status = list(site.guards), site.status
            chain = _chain_at(module, site.write_line or site.line, parents)
        else:
            chain = _chain_at(module, line, parents)
            if chain is None:
                return Reach(where, "unknown", f"no statement at {where}")
            walk = _Walk(module, chain, ev, _bindings(module, chain, parents, ev, self.cache.calls))
            walk.run()
            inner = _call_paths(module, chain, parents, ev, self.cache.calls)
            own = walk.guards + walk.inner_guards
            best = _best([p + own for p in inner])
            own, status = best, _status(best, True)[0]
        if status == "not fired":
            return Reach(where, "not fired", _status(own, True)[1], own)
        outer = self._outer_paths(module, chain, ev, 0, frozenset()) if chain is not None else [[]]
        paths = [p + own for p in outer]
        best = _best(paths)
        status, reason, _ = _status(best, True)
        return Reach(where, status, reason, best)

    # ---- calls from other modules

    def _outer_paths(self, module: ModuleInfo, chain: list, ev, depth: int, seen: frozenset) -> list[list[Guard]]:
        """Guards of the calls from other modules that reach the outermost function of ``chain``, when
        nothing in its own module calls it ([[]]: no such call known, a root)."""
        func = next((n for n in chain if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if func is None or depth >= _MAX_DEPTH or (module.path, func.name) in seen:
            return [[]]
        if any(fn is not func for fn, _ in self.cache.calls(module).get(func.name, ())):
            return [[]]  # called in its own module: explain()'s call paths hold those guards
        method = any(isinstance(n, ast.ClassDef) for n in chain[: chain.index(func)])
        callers = self._method_callers(module, func.name) if method else self._callers(module, func.name)
        if method and not callers:
            return [[]]  # a method called through objects the source does not name statically
        paths = []
        for caller_module, stmt in callers:
            cparents = self.cache.parents(caller_module)
            walk = _caller_walk(caller_module, stmt, cparents, ev)
            where = f"{caller_module.path}:{stmt.lineno}"
            mine = [_as_caller(g, where) for g in walk.guards + walk.inner_guards] or [
                Guard(text=f"{where} calls {func.name}()", line=stmt.lineno, result=True, kind="caller",
                      where=where, rule="(call)")]
            inner = _call_paths(caller_module, walk.chain, cparents, ev, self.cache.calls)
            upper = self._outer_paths(caller_module, walk.chain, ev, depth + 1, seen | {(module.path, func.name)})
            for up in upper:
                for path in inner:
                    paths.append(up + path + mine)
        return paths or [[]]

    def _callers(self, module: ModuleInfo, name: str) -> list[tuple[ModuleInfo, ast.stmt]]:
        """Statements of other modules that call ``name`` imported from ``module``."""
        return self.cache.callers_elsewhere(module, name)

    def _method_callers(self, module: ModuleInfo, name: str) -> list[tuple[ModuleInfo, ast.stmt]]:
        return self.cache.method_callers_elsewhere(module, name)


def _split(where: str) -> tuple[str, int | None]:
    path, _, line = where.rpartition(":")
    path = short_path(path)
    try:
        return path, int(line.split("-")[0])
    except ValueError:
        return path, None


def _chain_at(module: ModuleInfo, line: int, parents: dict) -> list | None:
    """The ancestors (module first) of the innermost statement that spans ``line``."""
    best = None
    for node in ast.walk(module.tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno > best.lineno or (
                    node.lineno == best.lineno and (node.end_lineno or 0) < (best.end_lineno or 0)):
                best = node
    return _ancestors(best, parents) if best is not None and id(best) in parents else None


def _as_caller(guard: Guard, where: str) -> Guard:
    return Guard(text=guard.text, line=guard.line, negated=guard.negated, result=guard.result, reason=guard.reason,
                 kind="caller", notes=list(guard.notes), rule=guard.rule, where=where)


def _best(paths: list[list[Guard]]) -> list[Guard]:
    """The path that decides: one where every guard holds, else one still unknown, else the first."""
    order = {"fired": 0, "unknown": 1, "not fired": 2}
    return min(paths, key=lambda p: order[_status(p, True)[0]]) if paths else []
