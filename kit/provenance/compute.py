"""What a function of the source computes for numbers the evidence holds, by its own arithmetic.

``compute(tree, "resolve_max_num_reqs", params={"token_capacity": 16384}, attributes={"context_len": 4096,
"max_running_requests": 128, ...})`` finds the function (by name, in any module under ``srt/``), replaces each
attribute read named in ``attributes`` (``self.model_config.context_len``, ``get_schedule().max_running_requests``)
and each method call named in ``calls`` (``self._calculate_mamba_ratio()``) by the value given, and runs its body
with the kit's safe evaluator (kit._pysource: nothing is imported or executed). The server args of ``snapshot``
answer ``server_args.X``. What the evidence does not give stays Unknown, with why: the result is then None.

That is how the doctor reads what sglang 0.5.11 does with ``--max-running-requests 128`` (``min(128 // dp_size,
estimated)``, then the mamba state cap) and what 0.5.17 does (``min(requested_per_worker, token_capacity // 2)``):
from each release's own lines, not from a table of versions.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any

from kit._pysource import Env, Evaluator, Scope, Unknown, const, has_unknown, render, unknown
from kit.model_config import load_model_config

from .explain import _Defaults, _environment, _snapshot_values
from .sites import index_for

__all__ = ["SERVER_ARGS", "Computed", "compute"]


class _ServerArgs:
    def __repr__(self) -> str:
        return "SERVER_ARGS"


SERVER_ARGS = _ServerArgs()  # as a value in ``attributes`` or ``calls``: the server args of ``snapshot``


@dataclass
class Computed:
    """The function's return for the values given (None: not known, ``why`` says what was missing)."""

    function: str
    where: str  # "srt/...py:START-END"
    value: Any = None
    why: str = ""
    variables: dict[str, Any] = field(default_factory=dict)  # local name -> its final value (known ones)
    lines: dict[str, int] = field(default_factory=dict)  # local name -> the line of its last assignment

    @property
    def known(self) -> bool:
        return self.value is not None


def compute(tree, function: str | tuple[str, ...], *, params: dict | None = None, attributes: dict | None = None,
            calls: dict | None = None, snapshot=None, model_config=None, environ=None, probes=None,
            under: str = "srt") -> Computed | None:
    """Run ``function`` (the first of its names the tree defines) on the values given; None when the tree has no
    such function. ``params`` bind its parameters; ``attributes`` and ``calls`` replace attribute reads and method
    calls by name (a value, or ``unknown(...)`` to say it is not known); ``environ`` is the server's environment,
    for ``envs.X.get()``."""
    cache = index_for(tree)
    found = _find(tree, cache, (function,) if isinstance(function, str) else function, under)
    if found is None:
        return None
    module, node = found
    where = f"{module.path}:{node.lineno}-{node.end_lineno}"
    attributes, calls = dict(attributes or {}), dict(calls or {})
    body = [_Rewrite(attributes, calls).visit(copy.deepcopy(stmt)) for stmt in node.body]
    for stmt in body:
        ast.fix_missing_locations(stmt)
    ev = Evaluator(cache.modules, _snapshot_values(snapshot) or {}, load_model_config(model_config),
                   defaults=_Defaults(tree), environ=_environment(environ), probes=probes)
    names = {**{f"__attr_{k}": v for k, v in attributes.items()}, **{f"__call_{k}": v for k, v in calls.items()}}
    names = {k: ev.args if v is SERVER_ARGS else v for k, v in names.items()}
    env = Env({k: const(v) for k, v in names.items()}, Scope(module, None, None, 0, True))
    for i, arg in enumerate([*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]):
        if arg.arg in (params or {}):
            env.vars[arg.arg] = const(params[arg.arg])
        elif i == 0 and arg.arg in ("self", "cls"):
            env.vars[arg.arg] = const(unknown(arg.arg, "the object the method runs on is not in the evidence"))
        elif "server_args" in arg.arg:
            env.vars[arg.arg] = const(ev.args)
        else:
            env.vars[arg.arg] = const(unknown(arg.arg, "a parameter the evidence does not give"))
    out = ev.run_block(body, env)
    value = ev._result(out)  # noqa: SLF001 - the evaluator's own reading of a function's return
    variables, lines = {}, {}
    for stmt in ast.walk(node):
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    lines[t.id] = stmt.lineno
    for name in lines:
        thunk = out.vars.get(name)
        if thunk is None:
            continue
        got = thunk.force(ev)
        if _plain_number(got):
            variables[name] = got
        elif isinstance(got, tuple | list) and got and all(_plain_number(x) for x in got):
            variables[name] = tuple(got)
    result = Computed(node.name, where, variables=variables, lines=lines)
    if isinstance(value, int | float) and not isinstance(value, bool) and not has_unknown(value):
        result.value = value
    else:
        result.why = value.reason if isinstance(value, Unknown) else f"it returns {render(value)}"
    return result


def _plain_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, attributes: dict, calls: dict) -> None:
        self.attributes, self.calls = attributes, calls

    def visit_Call(self, node: ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name in self.calls and not node.args and not node.keywords:
            return ast.copy_location(ast.Name(id=f"__call_{name}", ctx=ast.Load()), node)
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute):
        if node.attr in self.attributes and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name(id=f"__attr_{node.attr}", ctx=ast.Load()), node)
        return self.generic_visit(node)


def _find(tree, cache, names: tuple[str, ...], under: str):
    """(module, def) of the first name the tree defines; ``Class.name`` finds the method of that class."""
    grep = getattr(tree, "grep", None)
    for qualname in names:
        owner, _, name = qualname.rpartition(".")
        hits = grep(rf"^[[:space:]]*def {name}\(", max_matches=200) if callable(grep) else []
        for path in dict.fromkeys(h.path for h in hits if not under or h.path.startswith(under)):
            module = cache.modules.get(path)
            scopes = [module.tree] if module is not None and not owner else [
                c for c in ast.walk(module.tree) if isinstance(c, ast.ClassDef) and c.name == owner] \
                if module is not None else []
            for scope in scopes:
                node = next((n for n in ast.walk(scope) if isinstance(n, ast.FunctionDef) and n.name == name), None)
                if node is not None:
                    return module, node
    return None
