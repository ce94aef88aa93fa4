"""Every startup check of a release, evaluated for one launch: the ``raise`` and ``assert`` statements of
``ServerArgs.__post_init__`` and what it calls, of ``check_server_args``, and (in releases that moved
resolution out of ``srt/server_args.py``) of every hook of ``srt/arg_groups/`` that the resolution
pipeline runs.

Which functions run is read from the source: starting at ``ServerArgs.__post_init__``,
``ServerArgs.resolve_once``, ``ServerArgs.check_server_args`` and any module-level
``check_server_args`` / ``run_resolution_pipeline``, every function they call by name (``self._handle_x()``,
``handle_x(server_args)``, ``run_hook(handle_x, server_args)``, imports inside the function included)
is followed, within ``srt/server_args.py`` and ``srt/arg_groups/``. Each check is then evaluated with the
safe evaluator (kit._pysource) against the launch's values:

- ``refuses``: its guards hold (a ``raise``) or its test is false (an ``assert``) for this launch;
- ``passes``: a guard fails, or the assertion holds;
- ``unchecked``: something it needs is not known (a parameter, a call the evaluator does not follow,
  the hardware, a file), said in ``needs``. Never counted as passing.

What this does not see: the guards of a call in another module (the pipeline's own ``if`` around a
hook), so a check that refuses the launch *as it ran* is the reader missing a guard, not a refusal:
``evaluate`` takes those values (``ran``) and moves such a check to ``unchecked``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kit._pysource import Evaluator, has_unknown, render, truth, unknown
from kit._text import short_path
from kit.model_config import load_model_config
from kit.server_args import cli_defaults

from .guards import explain_write
from .sites import Write, index_for

__all__ = ["StartupCheck", "StartupReport", "check_functions", "evaluate", "method_reads", "write_status"]

_SCOPE = ("srt/server_args.py", "srt/arg_groups/")
_ROOT_METHODS = ("__post_init__", "resolve_once", "check_server_args")
_ROOT_FUNCTIONS = ("check_server_args", "run_resolution_pipeline")
_ARGS_NAMES = ("self", "server_args", "args", "cfg", "view")
# functions that hand back the server args themselves, as resolution reads them (0.5.19+ arg_groups)
_VIEWS = ("resolving_view", "resolved_view")
_REDACTED = "<redacted>"


@dataclass(frozen=True)
class StartupCheck:
    """One ``raise`` or ``assert`` and what it does for the launch."""

    where: str  # "srt/arg_groups/kv_cache_hook.py:911"
    function: str
    kind: str  # "raise", "assert"
    condition: str  # the guards above it (and the assertion), as written
    message: str
    status: str  # "refuses", "passes", "unchecked"
    needs: str = ""  # for unchecked: what would decide it

    def __str__(self) -> str:
        if self.status == "unchecked":
            return f"unchecked: {self.where} (needs {self.needs}): `{self.condition}` -> {self.message[:120]}"
        return f"{self.where}: `{self.condition}` -> {self.message}"


@dataclass
class StartupReport:
    checks: list[StartupCheck] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the files read

    @property
    def refused(self) -> list[StartupCheck]:
        return [c for c in self.checks if c.status == "refuses"]

    @property
    def unchecked(self) -> list[StartupCheck]:
        return [c for c in self.checks if c.status == "unchecked"]

    @property
    def passed(self) -> list[StartupCheck]:
        return [c for c in self.checks if c.status == "passes"]

    def summary(self) -> str:
        if self.refused:
            return "refused by " + ", ".join(c.where for c in self.refused[:3])
        return f"passes the checks read ({len(self.passed)} checked, {len(self.unchecked)} unchecked)"


# --------------------------------------------------------------------------- which functions run


def check_functions(tree) -> list[tuple[object, ast.AST, str]]:
    """(module, function node, qualname) of every function the startup resolution runs, read from the
    source (see the module docstring), in the order found."""
    return [(m, f, q) for m, f, q, _ in _functions(tree)]


def _functions(tree) -> list[tuple[object, ast.AST, str, list]]:
    """check_functions with, for each function, its calls: [(caller module, caller function, statement)]
    ([] for a root)."""
    index = index_for(tree)
    modules = index.modules
    home = modules.get("srt/server_args.py")
    if home is None:
        return []
    cls = home.classes.get("ServerArgs")
    todo: list[tuple[object, ast.AST, str, ast.ClassDef | None]] = []
    if cls is not None:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in _ROOT_METHODS:
                todo.append((home, stmt, f"ServerArgs.{stmt.name}", cls))
    for path in modules.files("srt/arg_groups/*.py") + ["srt/server_args.py"]:
        module = modules.get(path)
        for name in _ROOT_FUNCTIONS:
            node = module.bindings.get(name) if module is not None else None
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                todo.append((module, node, name, None))
    todo = [(*t, None) for t in todo]
    found: dict[tuple[str, int], tuple] = {}
    roots: set[tuple[str, int]] = set()
    while todo:
        module, func, qual, owner, via = todo.pop(0)
        key = (module.path, func.lineno)
        if key in found:
            if via is not None and key not in roots:
                found[key][3].append(via)
            continue
        # a root keeps [] (it runs whoever calls it too); others collect their calls
        found[key] = (module, func, qual, [via] if via is not None else [])
        if via is None:
            roots.add(key)
        for callee in _callees(modules, module, func, owner, home, cls):
            todo.append(callee)
    return list(found.values())


def _in_scope(module) -> bool:
    return module is not None and module.path.startswith(_SCOPE)


def _callees(modules, module, func, owner, home, cls):
    local = {}
    for node in ast.walk(func):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                local[alias.asname or alias.name] = (modules.resolve_from(module, node), alias.name)
    found = []
    for stmt, node in _calls(func):
        via = (module, func, stmt)
        for target in [node.func, *node.args]:  # run_hook(handle_x, server_args): the step is an argument
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id in _ARGS_NAMES and cls is not None:
                method = next((s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                               and s.name == target.attr), None)
                if method is not None:
                    found.append((home, method, f"ServerArgs.{method.name}", cls, via))
            elif isinstance(target, ast.Name):
                hit = _function_named(modules, module, target.id, local)
                if hit is not None and _in_scope(hit[0]):
                    found.append((*hit, None, via))
    return found


def _calls(func: ast.AST):
    """(statement, call) for every call of ``func``'s own statements (a compound statement's header
    counts as its own; nested functions are left out)."""
    stack = list(getattr(func, "body", []))
    while stack:
        stmt = stack.pop(0)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        inner = []
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, (ast.stmt, ast.excepthandler)):
                inner.append(child)
            else:
                for node in ast.walk(child):
                    if isinstance(node, ast.Call):
                        yield stmt, node
        for handler in [c for c in inner if isinstance(c, ast.excepthandler)]:
            inner[inner.index(handler):inner.index(handler) + 1] = handler.body
        stack[0:0] = inner


def _function_named(modules, module, name, local, depth=0):
    if name in local:
        target = modules.find(local[name][0])
        return _top_function(modules, target, local[name][1], depth) if target is not None else None
    return _top_function(modules, module, name, depth)


def _top_function(modules, module, name, depth=0):
    node = module.bindings.get(name)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return module, node, name
    if isinstance(node, ast.ImportFrom) and depth < 6:
        target = modules.find(modules.resolve_from(module, node))
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        return _top_function(modules, target, alias.name, depth + 1) if target is not None else None
    return None


def _statements(func: ast.AST):
    """The raise/assert statements of ``func``, not of functions or classes defined inside it."""
    stack = list(getattr(func, "body", []))
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assert) or (isinstance(node, ast.Raise) and node.exc is not None):
            yield node
        stack[0:0] = [c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.excepthandler))]


# --------------------------------------------------------------------------- evaluation


def evaluator(tree, values: dict, model_config=None) -> Evaluator:
    index = index_for(tree)
    # a value the log prints as "<redacted>" (sglang hides secrets in its server_args line) is not its value
    values = {k: unknown(k, "the log prints it redacted") if v == _REDACTED else v for k, v in values.items()}
    ev = Evaluator(index.modules, values, load_model_config(model_config), defaults=cli_defaults(tree))
    for name in _VIEWS:
        ev.calls[name] = (ev.args, "a view of the server args themselves")
    ev.parameters.setdefault("view", ev.args)  # arg_groups' validators take the resolved view of the args
    return ev


def evaluate(tree, values: dict, model_config=None, *, ran: dict | None = None) -> StartupReport:
    """Every startup check of ``tree``'s release for a launch whose fields are ``values`` (field ->
    value, the launch's resolved values with the fixes applied). ``ran``: the values of the launch that
    ran (it passed every check), so a check refusing both is one whose guard this reader cannot see."""
    index = index_for(tree)
    ev = evaluator(tree, values, model_config)
    before = evaluator(tree, ran, model_config) if ran is not None else None
    report = StartupReport()
    functions = _functions(tree)
    by_key = {(m.path, f.lineno): (m, f, q, vias) for m, f, q, vias in functions}
    for module, func, qual, _vias in functions:
        if module.display not in report.files:
            report.files.append(module.display)
        parents = index.parents(module)
        for node in _statements(func):
            status, needs = _status(module, node, parents, ev)
            if status == "refuses":
                status, needs = _reached(index, by_key, (module.path, func.lineno), ev, {}, 0)
            if status == "refuses" and before is not None:
                was, _ = _status(module, node, parents, before)
                if was == "refuses":
                    status, needs = "unchecked", ("a guard outside its function: it refuses the launch as it ran "
                                                  "too, which started")
            report.checks.append(StartupCheck(
                f"{module.path}:{node.lineno}", qual, "assert" if isinstance(node, ast.Assert) else "raise",
                _condition(module, node, parents), _message(node), status, needs))
    return report


def _reached(index, by_key, key, ev, memo, depth) -> tuple[str, str]:
    """Whether the function ``key`` runs for the launch: ("refuses", "") when a chain of calls from a root
    runs (each call's guards hold), ("passes", "") when none does, else ("unchecked", what decides it)."""
    if key in memo:
        return memo[key]
    memo[key] = ("unchecked", "a call cycle")
    module, func, qual, vias = by_key[key]
    if not vias:
        memo[key] = ("refuses", "")
        return memo[key]
    if depth > 8:
        memo[key] = ("unchecked", f"whether {qual} is called (a deep chain of calls)")
        return memo[key]
    open_ = []
    for caller_module, caller, stmt in vias:
        (site,) = explain_write(caller_module, Write(stmt, "call", "", None, stmt.lineno),
                                index.parents(caller_module), ev)
        if site.status == "not fired":
            continue
        up = _reached(index, by_key, (caller_module.path, caller.lineno), ev, memo, depth + 1)
        if site.status == "fired" and up[0] == "refuses":
            memo[key] = up
            return up
        if up[0] != "passes":
            open_.append(f"whether {caller_module.path}:{stmt.lineno} calls {qual} ("
                         f"{_needs(site.status_reason) if site.status != 'fired' else up[1]})")
    memo[key] = ("unchecked", "; ".join(open_)[:300]) if open_ else ("passes", "")
    return memo[key]


def _status(module, node, parents, ev) -> tuple[str, str]:
    if isinstance(node, ast.Raise):
        (site,) = explain_write(module, Write(node, "raise", "", node.exc, node.lineno), parents, ev)
        return {"fired": ("refuses", ""), "not fired": ("passes", "")}.get(
            site.status, ("unchecked", _needs(site.status_reason)))
    values: dict = {}
    write = Write(node, "assert", "", node.test, node.lineno)
    (site,) = explain_write(module, write, parents, ev, values=values)
    if site.status == "not fired":
        return "passes", ""  # not reached for this launch
    if id(write) not in values:
        return "unchecked", _needs(site.status_reason) or "the function's values up to the assertion"
    try:
        value, _notes = values[id(write)]()
    except Exception as err:  # noqa: BLE001 - an expression the evaluator does not model is unchecked, not fatal
        return "unchecked", f"an expression the evaluator does not model ({type(err).__name__})"
    held = truth(value)
    if held is True:
        return "passes", ""
    if held is False:
        return ("refuses", "") if site.status == "fired" else ("unchecked", _needs(site.status_reason))
    return "unchecked", _needs(getattr(held, "reason", "") or (render(value) if has_unknown(value) else ""))


def _needs(reason: str) -> str:
    return (reason or "a value the source alone does not give").strip()[:300]


def _condition(module, node, parents) -> str:
    tests = []
    current = node
    while id(current) in parents:
        parent = parents[id(current)]
        if isinstance(parent, ast.If):
            inside = current in parent.body
            tests.append(ast.unparse(parent.test) if inside else f"not ({ast.unparse(parent.test)})")
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        current = parent
    tests.reverse()
    if isinstance(node, ast.Assert):
        tests.append(f"not ({ast.unparse(node.test)})")
    return " and ".join(tests) or "always"


def _message(node) -> str:
    exc = node.msg if isinstance(node, ast.Assert) else node.exc
    if isinstance(exc, ast.Call) and exc.args:
        exc = exc.args[0]
    if isinstance(exc, ast.Constant) and isinstance(exc.value, str):
        return exc.value
    if isinstance(exc, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{...}" for v in exc.values)
    return ast.unparse(exc) if exc is not None else "AssertionError"


# --------------------------------------------------------------------------- one write


def write_status(tree, where: str, values: dict, model_config=None) -> tuple[str, str]:
    """Whether the statement at ``where`` (``srt/server_args.py:2433``) runs for a launch whose fields are
    ``values``: "fired", "not fired" or "unknown", with why; the guards of its function and of the calls
    that reach it in its module."""
    path, line = short_path(where).rsplit(":", 1)
    index = index_for(tree)
    module = index.modules.get(path)
    if module is None:
        return "unknown", f"{path} is not in the source"
    parents = index.parents(module)
    stmts = [n for n in ast.walk(module.tree) if isinstance(n, ast.stmt) and n.lineno == int(line) and id(n) in parents]
    if not stmts:
        return "unknown", f"no statement at {where}"
    stmt = stmts[-1]  # the innermost
    ev = evaluator(tree, values, model_config)
    sites = explain_write(module, Write(stmt, "assign", "", getattr(stmt, "value", None), stmt.lineno), parents, ev,
                          calls=index.calls)
    statuses = {s.status for s in sites}
    status = "fired" if "fired" in statuses else "unknown" if "unknown" in statuses else "not fired"
    return status, "; ".join(dict.fromkeys(s.status_reason for s in sites if s.status == status))


def method_reads(tree, name: str) -> set[str]:
    """The fields a ServerArgs method of that name reads (``self.X``), one call deep; empty when there is
    no such method."""
    home = index_for(tree).modules.get("srt/server_args.py")
    cls = home.classes.get("ServerArgs") if home is not None else None
    method = next((s for s in (cls.body if cls is not None else []) if isinstance(s, (ast.FunctionDef,
                   ast.AsyncFunctionDef)) and s.name == name), None)
    if method is None:
        return set()
    return {n.attr for n in ast.walk(method) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"}
