"""The guards on the way to a write: enclosing ifs, early returns, rules tables, and which held."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

from kit._pysource import Env, Evaluator, ModuleInfo, Unknown, const, param_names, truth
from kit._text import clip

from .result import AssignmentSite, Guard
from .sites import Write, first_line

_NUMBERED = re.compile(r"^\d+[a-z]?[.)]\s")


_SNIPPET_CONTEXT = 2


_MAX_LABEL = 120


@dataclass
class _Table:
    """A rules table walked by `for name, predicate in rules: if predicate(): ...`."""

    loop: ast.For
    rules: list[ast.Tuple]
    pred_index: int
    label_index: int | None
    stops: bool  # the loop ends at the first match
    env: Env | None


def explain_write(module: ModuleInfo, write: Write, parents: dict, ev: Evaluator | None, calls=None,
                  values: dict | None = None):
    """The sites of one write, each with its guards; ``calls`` (module -> {callee: [(caller, stmt)]})
    adds the guards of the calls that reach the write's function. ``values``, when given, receives
    ``id(write)`` -> a function computing the written value (and its notes) where it is written."""
    chain = _ancestors(write.stmt, parents)
    walk = _Walk(module, chain, ev, _bindings(module, chain, parents, ev, calls))
    walk.run()
    if values is not None and ev is not None and walk.env is not None and write.value is not None:
        env = walk.env
        values[id(write)] = lambda: ev.collect(lambda: ev.ev(write.value, env))
    paths = _call_paths(module, chain, parents, ev, calls) if calls is not None else [[]]
    value_text = ast.unparse(write.value) if write.value is not None else ""
    base = dict(
        file=module.display,
        function=_qualname(chain),
        value_text=value_text,
        kind=write.kind,
        target=write.target,
    )
    if walk.table is None:
        rule, rule_line = _label_for_chain(module, chain, write.stmt)
        site = AssignmentSite(line=write.line, guards=walk.guards, rule=rule, rule_line=rule_line, **base)
        return [_finish(_via_best_path(site, paths, ev), module, ev)]
    return [_finish(_via_best_path(site, paths, ev), module, ev) for site in _table_sites(module, walk, write, base)]


# --------------------------------------------------------------------------- call paths


def call_orders(module: ModuleInfo, write: Write, parents: dict, calls) -> list[tuple[str, tuple[int, ...]]]:
    """Where a write runs in its module's order of calls, one (root, key) per call path: the function
    the path starts from, and the lines of each call on the way then the write's own line. Two
    writes with the same root run in the order of their keys."""
    chain = _ancestors(write.stmt, parents)
    own = _qualname(chain)
    out = []
    for path in _call_paths(module, chain, parents, None, calls):
        wheres = list(dict.fromkeys(g.where for g in path if g.kind == "caller" and g.where))
        root = wheres[0].rsplit(":", 1)[0] if wheres else own
        lines = tuple(int(w.rsplit(":", 1)[1]) for w in wheres)
        out.append((root, (*lines, write.line)))
    return out or [(own, (write.line,))]

_MAX_CALL_DEPTH = 6


def _call_paths(module: ModuleInfo, chain: list[ast.AST], parents: dict, ev: Evaluator | None, calls,
                depth: int = 0, seen: frozenset = frozenset()) -> list[list[Guard]]:
    """Guards of every call path that reaches the function holding ``chain``'s statement.

    A write runs only if its function is called, so the guards around each call count too:
    ``if envs.SGLANG_USE_MODELSCOPE.get(): self._handle_modelscope_paths()``. A function
    that nothing in its module calls (``__post_init__``, a hook a registry runs) is where a
    path starts: [[]].
    """
    start = next((i for i, n in enumerate(chain) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if start is None or depth >= _MAX_CALL_DEPTH:
        return [[]]
    func = chain[start]
    sites = [(fn, stmt) for fn, stmt in calls(module).get(func.name, ()) if id(fn) not in seen and fn is not func]
    if not sites:
        return [[]]
    paths = []
    for _caller, stmt in sites:
        walk = _caller_walk(module, stmt, parents, ev)
        caller_chain = walk.chain
        where = _qualname(caller_chain)
        mine = [replace(g, kind="caller", where=f"{where}:{stmt.lineno}") for g in walk.guards + walk.inner_guards]
        mine = mine or [Guard(text=f"{where} calls {func.name}()", line=stmt.lineno, result=True,
                              kind="caller", where=f"{where}:{stmt.lineno}", rule="(call)")]
        for upper in _call_paths(module, caller_chain, parents, ev, calls, depth + 1, seen | {id(func)}):
            paths.append(upper + mine)
    return paths or [[]]


def _bindings(module: ModuleInfo, chain: list[ast.AST], parents: dict, ev: Evaluator | None, calls):
    """The parameters of the function holding ``chain``'s statement, bound to the arguments of its one
    call in the module (``self.adjust_mem_fraction_for_vlm(model_config)``), evaluated where it is called.

    None when there is no evaluator, no call, or several calls (they may pass different values).
    """
    start = next((i for i, n in enumerate(chain) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if ev is None or calls is None or start is None:
        return None
    func = chain[start]
    # Once per function and evaluator: every write in it shares the bindings (memoized thunks, which
    # replay their notes), so the walks of its writes start from one environment (_Walk.run).
    memo = _memo(ev, "bindings")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    found = _bind(module, func, parents, ev, calls)
    memo[id(func)] = (func, found)
    return found


def _bind(module: ModuleInfo, func: ast.AST, parents: dict, ev: Evaluator, calls):
    sites = [(fn, stmt) for fn, stmt in calls(module).get(func.name, ()) if fn is not func]
    if not sites:  # a hook another module calls once: `handle_gpu_memory_settings(server_args, gpu_mem)` (0.5.19)
        index = getattr(ev.modules, "scratch", {}).get("provenance")
        owner = parents.get(id(func))
        found = [] if index is None else index.callers_elsewhere(module, func.name) if owner is module.tree else \
            index.method_callers_elsewhere(module, func.name) if isinstance(owner, ast.ClassDef) else []
        # a method handed to a runner (`record_foreign_defaults(..., algo.handle_server_args)`) binds nothing here
        found = [(m, st) for m, st in found if any(isinstance(n, ast.Call) and _called_name(n) == func.name
                                                   for n in ast.walk(st))]
        if len(found) == 1:
            module, stmt = found[0]
            parents = index.parents(module)
            return _bind_at(module, func, stmt, parents, ev)
        return None
    if len(sites) != 1:
        return None
    return _bind_at(module, func, sites[0][1], parents, ev)


def _bind_at(module: ModuleInfo, func: ast.AST, stmt: ast.stmt, parents: dict, ev: Evaluator):
    """The parameters of ``func`` bound to the arguments of its call in ``stmt`` (of ``module``)."""
    call = next((n for n in ast.walk(stmt) if isinstance(n, ast.Call) and _called_name(n) == func.name), None)
    if call is None or any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    caller = _caller_walk(module, stmt, parents, ev)
    if caller.env is None:
        return None
    params = param_names(func)
    env = caller.env
    out = {}
    if isinstance(call.func, ast.Attribute) and params and params[0] in ("self", "cls"):
        if params[0] == "self" and not (isinstance(call.func.value, ast.Name) and call.func.value.id == "self"):
            # `algo.handle_server_args(server_args)`: self is the object it is called on, there
            out["self"] = ev.lazy(lambda node=call.func.value: ev.ev(node, env), call.lineno)
        params = params[1:]
    out.update({name: ev.lazy(lambda node=node: ev.ev(node, env), node.lineno) for name, node in zip(
        params, call.args, strict=False)})
    out.update({k.arg: ev.lazy(lambda node=k.value: ev.ev(node, env), k.value.lineno) for k in call.keywords
                if k.arg in params})
    return out


def _caller_walk(module: ModuleInfo, stmt: ast.stmt, parents: dict, ev: Evaluator | None) -> _Walk:
    """The walk down to a calling statement, done once per evaluator: every write reached through
    the same call (22 sites under one ``self._handle_x()``) shares it. The environment is persistent
    (each step makes a new Env of memoized thunks), so sharing it changes no value."""
    memo = _memo(ev, "caller_walks")  # {id(stmt): (stmt, walk)}
    hit = memo.get(id(stmt))
    if hit is not None and hit[0] is stmt:
        return hit[1]
    chain = _ancestors(stmt, parents)
    # the calling function's own parameters, bound where it is called in turn (`self` of a method another
    # module calls on an object: spec_info's `self.is_eagle()`); not while that binding is being made (a cycle)
    index = getattr(getattr(ev, "modules", None), "scratch", {}).get("provenance") if ev is not None else None
    busy = _memo(ev, "binding")
    func = next((n for n in chain if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    bindings = None
    if index is not None and func is not None and id(func) not in busy:
        busy[id(func)] = True
        try:
            bindings = _bindings(module, chain, parents, ev, index.calls)
        finally:
            busy.pop(id(func), None)
    walk = _Walk(module, chain, ev, bindings)
    walk.run()
    memo[id(stmt)] = (stmt, walk)
    return walk


def _memo(ev: Evaluator | None, name: str) -> dict:
    """A cache of the walks' work that lives as long as the evaluator (its ``scratch``)."""
    scratch = getattr(ev, "scratch", None)
    return scratch.setdefault(name, {}) if isinstance(scratch, dict) else {}


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def _via_best_path(site: AssignmentSite, paths: list[list[Guard]], ev: Evaluator | None) -> AssignmentSite:
    """The site with the guards of the call path that decides it: one where every guard holds if
    there is one, else one still unknown, else the first (every path fails somewhere)."""
    if paths == [[]]:
        return site
    ranked = sorted(paths, key=lambda p: {"fired": 0, "unknown": 1}.get(_status(p + site.guards, ev is not None)[0], 2))
    site.guards = ranked[0] + site.guards
    return site


def _table_sites(module: ModuleInfo, walk: _Walk, write: Write, base: dict):
    table = walk.table
    earlier: list[Guard] = []
    floor = table.loop.lineno - 1 if not table.rules else table.rules[0].lineno - 1
    for entry in table.rules:
        label, label_line = _rule_label(module, entry, table.label_index, floor)
        floor = entry.end_lineno or entry.lineno
        pred = entry.elts[table.pred_index]
        rule_guard = _rule_guard(walk, pred, table.env)
        guards = [*walk.guards, *earlier, rule_guard, *walk.inner_guards]
        base_kind = {**base, "kind": "rules table"}
        yield AssignmentSite(
            line=entry.lineno,
            guards=guards,
            rule=label,
            rule_line=label_line,
            write_line=write.line,
            **base_kind,
        )
        if table.stops:
            earlier = [*earlier, _as_earlier(rule_guard, label)]


def _rule_guard(walk: _Walk, pred: ast.expr, env: Env | None) -> Guard:
    body = pred.body if isinstance(pred, ast.Lambda) else ast.Call(func=pred, args=[], keywords=[])
    if not isinstance(pred, ast.Lambda):
        ast.copy_location(body, pred)
    return walk.guard(body, env, kind="rule")


def _as_earlier(guard: Guard, label: str) -> Guard:
    return Guard(
        text=guard.text,
        line=guard.line,
        negated=True,
        result=guard.result,
        reason=f"earlier rule {label!r}" + (f": {guard.reason}" if guard.reason else ""),
        kind="earlier rule",
        notes=list(guard.notes),
        rule=label,
    )


def _ancestors(node: ast.AST, parents: dict) -> list[ast.AST]:
    chain = [node]
    while id(chain[-1]) in parents:
        chain.append(parents[id(chain[-1])])
    return chain[::-1]  # module first, the statement last


def _qualname(chain: list[ast.AST]) -> str:
    names: list[str] = []
    for node in chain:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.extend([node.name, "<locals>"])
    if names and names[-1] == "<locals>":
        names.pop()
    return ".".join(names) or "<module>"


class _Walk:
    """Walks from the outermost function down to a statement, collecting evaluated guards."""

    def __init__(self, module: ModuleInfo, chain: list[ast.AST], ev: Evaluator | None, bindings=None) -> None:
        self.module = module
        self.bindings = bindings or {}  # parameter -> thunk, from the one call site
        self.chain = chain
        self.ev = ev
        self.guards: list[Guard] = []
        self.inner_guards: list[Guard] = []
        self.table: _Table | None = None
        self.env: Env | None = None

    def run(self) -> None:
        start = self._outer_function()
        if start is None:
            return
        func, cls = self.chain[start], _enclosing_class(self.chain[:start])
        self.env = self._start_env(func, cls) if self.ev else None
        for parent, child in zip(self.chain[start:], self.chain[start + 1 :], strict=False):
            self._enter(parent, child)

    def _start_env(self, func: ast.AST, cls: ast.ClassDef | None) -> Env:
        """The function's environment on entry, one per function, bindings and evaluator: the walks
        to its writes share it, so each statement before them is stepped once (``_enter``)."""
        memo = _memo(self.ev, "start_envs")
        key = (id(func), id(self.bindings) if self.bindings else None)
        hit = memo.get(key)
        if hit is not None and hit[0] is func and hit[1] is (self.bindings or None):
            return hit[2]
        env = self.ev.initial_env(self.module, func, cls)
        env.vars.update(self.bindings)
        memo[key] = (func, self.bindings or None, env)
        return env

    def _outer_function(self) -> int | None:
        for i, node in enumerate(self.chain):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return i
        return None

    @property
    def _sink(self) -> list[Guard]:
        return self.inner_guards if self.table is not None else self.guards

    def _enter(self, parent: ast.AST, child: ast.AST) -> None:
        block = _block_of(parent, child)
        # The test of an `if` runs before its body: decide it before stepping the body's earlier statements.
        self._entry_guard(parent, child, block)
        if block is not None:
            for sibling in block[: _index(block, child)]:
                self._pass(sibling)

    def _pass(self, stmt: ast.stmt) -> None:
        """Step over a statement before the write: its early-return guards, then its effect. The
        environments are persistent, so one step from one environment is shared by every walk
        that takes it (22 writes in one function step its first statements once)."""
        memo = _memo(self.ev, "steps") if self.env is not None else {}
        key = (id(stmt), id(self.env))
        hit = memo.get(key)
        if hit is not None and hit[0] is stmt and hit[1] is self.env:
            guards, after = hit[2], hit[3]
        else:
            before = self.env
            guards = self._exit_guards(stmt)
            self._step(stmt)
            after = self.env
            if before is not None:
                memo[key] = (stmt, before, guards, after)
        self._sink.extend(guards)
        self.env = after

    def _step(self, stmt: ast.stmt) -> None:
        if self.ev is not None and self.env is not None:
            self.env = self.ev.step(stmt, self.env)

    def _entry_guard(self, parent: ast.AST, child: ast.AST, block) -> None:
        if isinstance(parent, ast.If) and block is not None:
            if (
                self.table is not None
                and self.table.loop is not None
                and _calls_predicate(parent, self.table)
            ):
                return
            negated = block is parent.orelse
            self._sink.append(
                self.guard(parent.test, self.env, negated=negated, kind="else" if negated else "if")
            )
        elif isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and block is parent.body:
            self._enter_loop(parent)
        elif isinstance(parent, ast.ExceptHandler):
            kind = ast.unparse(parent.type) if parent.type is not None else "any exception"
            self._sink.append(
                self._opaque(f"except {kind}", parent.lineno, "runs only when the try block raises", "except")
            )
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and block is not None:
            self._enter_nested_function(child)

    def _enter_loop(self, loop: ast.AST) -> None:
        table = _rules_table(loop, self.chain, self.env)
        if table is not None and self.table is None:
            self.table = table
            self._bind_loop_target(loop)
            return
        head = (
            f"for {ast.unparse(loop.target)} in {ast.unparse(loop.iter)}"
            if hasattr(loop, "target")
            else (f"while {ast.unparse(loop.test)}")
        )
        self._sink.append(
            self._opaque(head, loop.lineno, "inside a loop: runs once per item, if any", "loop")
        )
        self._bind_loop_target(loop)

    def _bind_loop_target(self, loop: ast.AST) -> None:
        if self.env is None or not hasattr(loop, "target"):
            return
        why = Unknown((ast.unparse(loop.target), "a loop variable"))
        names = [n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)]
        self.env = self.env.with_vars(**{n: const(why) for n in names})

    def _enter_nested_function(self, func: ast.AST) -> None:
        # Guards around a `def` only gate the definition; what matters is where it is called.
        self.guards, self.inner_guards = [], []
        self.table = None
        self.guards.append(self._opaque(f"{func.name}() is called", func.lineno, "a nested function", "call"))
        if self.env is not None:
            why = Unknown((func.name, "a parameter of a nested function"))
            params = [a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]]
            self.env = self.env.with_vars(**{p: const(why) for p in params})

    def _exit_guards(self, stmt: ast.stmt) -> list[Guard]:
        """`if X: ...; return` before the site means the site needs `not X`."""
        if not isinstance(stmt, ast.If):
            return []
        body_exits, else_exits = _terminates(stmt.body), _terminates(stmt.orelse)
        if body_exits and not else_exits:
            out = [self.guard(stmt.test, self.env, negated=True, kind="early return")]
            if len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If):
                out.extend(self._exit_guards(stmt.orelse[0]))
            return out
        if else_exits and not body_exits:
            return [self.guard(stmt.test, self.env, negated=False, kind="early return")]
        return []

    def guard(self, test: ast.expr, env: Env | None, negated: bool = False, kind: str = "if") -> Guard:
        guard = Guard(text=ast.unparse(test), line=test.lineno, negated=negated, kind=kind)
        if self.ev is None or env is None:
            guard.reason = "not evaluated: no server args given"
            return guard
        value, notes = self.ev.collect(lambda: self.ev.ev(test, env))
        result = truth(value)
        if isinstance(result, Unknown):
            guard.reason = result.reason
        else:
            guard.result = result
            guard.notes = notes
            guard.reason = "; ".join(notes)
        return guard

    def _opaque(self, text: str, line: int, reason: str, kind: str) -> Guard:
        return Guard(text=text, line=line, result=None, reason=reason, kind=kind)


def _enclosing_class(chain: list[ast.AST]) -> ast.ClassDef | None:
    for node in reversed(chain):
        if isinstance(node, ast.ClassDef):
            return node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
    return None


def _block_of(parent: ast.AST, child: ast.AST):
    for name in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and any(c is child for c in block):
            return block
    return None


def _index(block: list, child: ast.AST) -> int:
    return next(i for i, c in enumerate(block) if c is child)


def _terminates(block: list[ast.stmt]) -> bool:
    if not block:
        return False
    last = block[-1]
    if isinstance(last, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(last, ast.If):
        return _terminates(last.body) and _terminates(last.orelse)
    return False


def _rules_table(loop: ast.AST, chain: list[ast.AST], env: Env | None) -> _Table | None:
    """Recognise `for name, pred in rules: if pred(): <write>` with `rules = [(..., lambda: ...), ...]`."""
    if not isinstance(loop, ast.For) or not isinstance(loop.iter, ast.Name):
        return None
    if not isinstance(loop.target, ast.Tuple) or not all(isinstance(e, ast.Name) for e in loop.target.elts):
        return None
    names = [e.id for e in loop.target.elts]
    check = _predicate_if(loop, chain, names)
    if check is None:
        return None
    if_stmt, pred_name = check
    rules = _rules_list(loop, chain, loop.iter.id, len(names))
    if rules is None:
        return None
    pred_index = names.index(pred_name)
    label_index = next((i for i in range(len(names)) if i != pred_index), None)
    return _Table(loop, rules, pred_index, label_index, _terminates(if_stmt.body), env)


def _predicate_if(loop: ast.For, chain: list[ast.AST], names: list[str]):
    after = chain[_index(chain, loop) + 1 :]
    for node in after:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Call)
            and isinstance(node.test.func, ast.Name)
            and node.test.func.id in names
            and not node.test.args
        ):
            return node, node.test.func.id
    return None


def _rules_list(loop: ast.For, chain: list[ast.AST], name: str, width: int) -> list[ast.Tuple] | None:
    func = next(
        n
        for n in reversed(chain[: _index(chain, loop)])
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    found = None
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and node.lineno < loop.lineno
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            found = node.value
    if found is None:
        return None
    rules = [e for e in found.elts if isinstance(e, ast.Tuple) and len(e.elts) == width]
    return rules if len(rules) == len(found.elts) else None


def _calls_predicate(if_stmt: ast.If, table: _Table) -> bool:
    test = if_stmt.test
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and if_stmt.lineno > table.loop.lineno
        and (test.func.id == ast.unparse(table.loop.target.elts[table.pred_index]))
    )


def _label_for_chain(module: ModuleInfo, chain: list[ast.AST], stmt: ast.stmt) -> tuple[str, int | None]:
    """The comment that names the rule: above the innermost guarding `if`, else above the write."""
    func_at = next(
        (i for i, n in enumerate(chain) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), 0
    )
    inner = chain[func_at:]
    for node in [stmt, *(n for n in reversed(inner[:-1]) if isinstance(n, ast.If))]:
        found = _comment_above(module, node, inner)
        if found[0]:
            return found
    return "", None


def _rule_label(
    module: ModuleInfo, entry: ast.Tuple, label_index: int | None, floor: int
) -> tuple[str, int | None]:
    """The rule's name string, else the comment between the previous entry and this one."""
    if label_index is not None:
        node = entry.elts[label_index]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value, node.lineno
    return _comment_block(module.lines, entry.lineno - 1, floor=max(floor, entry.lineno - 12))


def _comment_above(module: ModuleInfo, node: ast.AST, chain: list[ast.AST]) -> tuple[str, int | None]:
    parent = next((p for p in reversed(chain) if _block_of(p, node) is not None), None)
    floor = 0
    if parent is not None:
        block = _block_of(parent, node)
        before = block[: _index(block, node)]
        compound = [
            s
            for s in before
            if not isinstance(s, (ast.Expr, ast.Assign, ast.Import, ast.ImportFrom, ast.AnnAssign))
        ]
        floor = compound[-1].end_lineno if compound else getattr(parent, "lineno", 0)
        floor = max(floor, node.lineno - 8)
    return _comment_block(module.lines, first_line(node) - 1, floor)



def _comment_block(lines: list[str], above: int, floor: int) -> tuple[str, int | None]:
    """The nearest block of `#` lines in (floor, above]; 1-based line numbers."""
    block: list[tuple[int, str]] = []
    line = above
    while line > floor:
        text = lines[line - 1].strip()
        if text.startswith("#"):
            block.append((line, text.lstrip("#").strip()))
        elif block:
            break
        line -= 1
    if not block:
        return "", None
    block.reverse()
    numbered = [i for i, (_, t) in enumerate(block) if _NUMBERED.match(t)]
    chosen = block[numbered[-1] :] if numbered else block
    label = " ".join(t for _, t in chosen if t)
    return clip(label, _MAX_LABEL), chosen[0][0]


def _finish(site: AssignmentSite, module: ModuleInfo, ev: Evaluator | None) -> AssignmentSite:
    site.status, site.status_reason, site.evidence = _status(site.guards, ev is not None)
    site.snippet = _snippet(module, site)
    return site


def _status(guards: list[Guard], evaluated: bool) -> tuple[str, str, list[str]]:
    if not evaluated:
        return "unknown", "not evaluated: no server args given (pass snapshot=)", []
    failed = [g for g in guards if g.passes is False]
    if failed:
        first = list(failed[0].notes)
        detail = f" ({'; '.join(first)})" if first else ""
        # Every condition that fails says why, not only the first (a caller's, which may hide the rule's own).
        evidence = list(dict.fromkeys(n for g in failed for n in g.notes))
        return "not fired", _why_not(failed[0]) + detail, evidence
    open_ = [g for g in guards if g.passes is None]
    if open_:
        reasons = [f"line {g.line}: {g.reason}" for g in open_]
        return "unknown", "; ".join(dict.fromkeys(reasons)), list(dict.fromkeys(reasons))
    evidence = list(dict.fromkeys(n for g in guards for n in g.notes))
    if not guards:
        return "fired", "unconditional in its function", []
    return "fired", "every guard holds" + (": " + "; ".join(evidence) if evidence else ""), evidence


def _why_not(guard: Guard) -> str:
    if guard.kind == "early return":
        return f"returns early at line {guard.line}: {guard.text} is {guard.result}"
    if guard.kind == "earlier rule":
        return f"an earlier rule {guard.rule!r} matched first and the loop stopped"
    return f"line {guard.line}: {guard.text} is {guard.result}"


def _snippet(module: ModuleInfo, site: AssignmentSite) -> str:
    lines = [
        site.line,
        site.write_line or site.line,
        *(g.line for g in site.guards if g.kind in ("if", "rule")),
    ]
    if site.rule_line:
        lines.append(site.rule_line)
    start = max(1, min(lines) - _SNIPPET_CONTEXT)
    end = min(len(module.lines), max(lines) + 1)
    if end - start > 30:
        start = max(1, site.line - 12)
        end = min(len(module.lines), (site.write_line or site.line) + 2)
    marks = {site.line, site.write_line}
    return "\n".join(
        f"{'>' if n in marks else ' '}{n:6d}  {module.lines[n - 1]}" for n in range(start, end + 1)
    )
