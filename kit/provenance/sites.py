"""Finding the writes to a field: files that mention it, then the statements that assign it."""

from __future__ import annotations

import ast
import re
import weakref
from bisect import bisect_left
from dataclasses import dataclass

from kit._pysource import MISSING, ModuleInfo, Modules, index_of, is_deferred, modules_for

_WRITER_CALL = re.compile(r"(declare|override|resolution|replace)", re.I)


class TreeIndex:
    """What provenance learns about one tree, on top of its parsed modules: a warm explain() does no I/O."""

    def __init__(self, modules: Modules) -> None:
        # Weak: the index lives in modules.scratch, and a cycle would outlive the tree by a gc pass.
        self._modules = weakref.ref(modules)
        self._candidates: dict[str, list[str]] = {}
        self._parents: dict[str, dict[int, ast.AST]] = {}
        self._full_parents: dict[str, dict[int, ast.AST]] = {}
        self._setters: dict[str, dict[str, tuple[int | None, int, int]]] = {}
        self._calls: dict[str, dict[str, list]] = {}
        self._elsewhere: dict[tuple[str, str], list] = {}

    @property
    def modules(self) -> Modules:
        return self._modules()

    @property
    def tree(self):
        return self.modules.tree()

    def candidates(self, parts: list[str]) -> list[str]:
        """Files that mention the field and hold text that could write it (most only read it)."""
        key = ".".join(parts)
        if key not in self._candidates:
            self._candidates[key] = self.stored("candidates", key, lambda: [
                p for p in self._search(parts) if not _is_test_path(p)], _is_paths)
        return self._candidates[key]

    def stored(self, section: str, key: str, compute, check=lambda found: True):
        """A fact of the tree from its persistent index (kit._index), computed and stored once;
        a stored value that fails ``check`` (a hand-edited file) is computed again."""
        index = index_of(self.modules)
        found = index.get(section, key) if index is not None else MISSING
        if found is MISSING or not _passes(check, found):
            found = compute()
            if index is not None:
                index.put(section, key, found)
        return found

    def _search(self, parts: list[str]) -> list[str]:
        grep = getattr(self.tree, "grep", None)
        if callable(grep):
            hits = _grep_files(grep(_write_ere(parts), max_matches=100_000))
            if len(parts) > 1:  # the ERE also matches the last part alone (`backend =`)
                hits &= _grep_files(grep(parts[0], fixed=True, max_matches=100_000))
            return sorted(hits)
        rx = _write_pattern(parts)
        text = self.modules.text
        return [p for p in self.modules.files("**/*.py") if parts[0] in text(p) and rx.search(text(p))]

    def parents(self, module: ModuleInfo) -> dict[int, ast.AST]:
        """{id(statement): its parent} (a statement, an except handler, a match case or the module):
        the chains guards are read along. Statements only; a Call's parents are in ``_all_parents``."""
        if module.path not in self._parents:
            self._parents[module.path] = _StatementParents(module.tree)
        return self._parents[module.path]

    def calls(self, module: ModuleInfo) -> dict[str, list[tuple[ast.AST, ast.stmt]]]:
        if module.path not in self._calls:
            found = None
            if index_of(self.modules) is not None:  # as positions in the index, found again in this parse
                found = _calls_at(module, self.stored("calls", module.path, lambda: _call_positions(
                    calls_in(module, self._all_parents(module)))))
            self._calls[module.path] = found if found is not None else calls_in(module, self._all_parents(module))
        return self._calls[module.path]

    def callers_elsewhere(self, module: ModuleInfo, name: str) -> list[tuple[ModuleInfo, ast.stmt]]:
        """Statements of other modules of ``srt/`` that call ``name`` imported from ``module`` (or run it:
        :data:`RUNNERS`), found by a grep of the tree; [] when the tree cannot be searched."""
        def calls_in(other: ModuleInfo) -> list[ast.stmt]:
            local = _imported_as(other, module.dotted, name)
            return [stmt for _fn, stmt in self.calls(other).get(local, ())] if local is not None else []

        return self._elsewhere_memo((module.path, name), module, name, calls_in)

    def method_callers_elsewhere(self, module: ModuleInfo, name: str) -> list[tuple[ModuleInfo, ast.stmt]]:
        """Statements of other modules that call a method ``name`` on an object (``algo.handle_server_args(
        server_args)``, where ``algo`` is the enum member sglang dispatches on), or hand it to a runner. The
        object's class is not known statically, so only a name called in a few places
        (:data:`MAX_METHOD_CALLERS`) is followed; [] otherwise."""
        if name.startswith("__"):
            return []

        def calls_in(other: ModuleInfo) -> list[ast.stmt]:
            return [stmt for _fn, stmt in self.calls(other).get(name, ())
                    if any(_calls_method(c, name) for c in ast.walk(stmt))]

        found = self._elsewhere_memo((module.path, "." + name), module, f".{name}", calls_in)
        return found if len(found) <= MAX_METHOD_CALLERS else []

    def _elsewhere_memo(self, key, module: ModuleInfo, text: str, calls_in) -> list[tuple[ModuleInfo, ast.stmt]]:
        """The statements ``calls_in`` picks in each other module of ``srt/`` whose text holds ``text``."""
        if key in self._elsewhere:
            return self._elsewhere[key]
        grep = getattr(self.tree, "grep", None)
        try:
            hits = grep(text, fixed=True, max_matches=500) if callable(grep) else []
        except Exception:  # noqa: BLE001 - a grep that fails leaves the callers unknown, never a crash
            hits = []
        out: list[tuple[ModuleInfo, ast.stmt]] = []
        for rel in dict.fromkeys(h.path for h in hits):
            if rel == module.path or not rel.startswith("srt/") or _is_test_path(rel):
                continue
            other = self.modules.get(rel)
            if other is not None:
                out.extend((other, stmt) for stmt in calls_in(other))
        self._elsewhere[key] = out
        return out

    def setters(self, module: ModuleInfo) -> dict[str, tuple[int | None, int, int]]:
        if module.path not in self._setters:
            self._setters[module.path] = self.stored("setters", module.path, lambda: (
                _find_setters(module, self._all_parents(module)) if "setattr(" in module.text else {}), _is_setters)
        return self._setters[module.path]

    def _all_parents(self, module: ModuleInfo) -> dict[int, ast.AST]:
        """Every node's parent, expressions included: what finding calls and setters needs, once per module."""
        if module.path not in self._full_parents:
            self._full_parents[module.path] = {
                id(child): node for node in ast.walk(module.tree) for child in ast.iter_child_nodes(node)}
        return self._full_parents[module.path]


def _passes(check, found) -> bool:
    try:
        return bool(check(found))
    except (TypeError, ValueError, KeyError, AttributeError):
        return False


def _is_paths(found) -> bool:
    return isinstance(found, list) and all(isinstance(p, str) for p in found)


def _is_setters(found) -> bool:
    return isinstance(found, dict) and all(
        isinstance(name, str) and isinstance(spec, tuple) and len(spec) == 3
        and all(i is None or type(i) is int for i in spec) for name, spec in found.items())


class _StatementParents(dict):
    """{id(statement): its parent} for every statement, handler and case: what ``ast.walk`` would give
    them, for a tenth of the cost (statements never sit inside expressions). A function not parsed yet
    (kit._pysource.skeleton) is not looked into: its statements are added once it has been parsed and
    one of them is asked after (a statement of it can only be known by reading its body)."""

    def __init__(self, tree: ast.Module) -> None:
        super().__init__()
        self._deferred: list[ast.AST] = []
        self._fill(tree)

    def _fill(self, root: ast.AST) -> None:
        todo: list[ast.AST] = [root]
        while todo:
            node = todo.pop()
            for name in ("body", "orelse", "finalbody", "handlers", "cases"):
                block = getattr(node, name, None)
                if isinstance(block, list):
                    for child in block:
                        self[id(child)] = node
                        (self._deferred if is_deferred(child) else todo).append(child)

    def _more(self) -> bool:
        """Add the statements of the deferred functions parsed since; whether there were any."""
        parsed = [node for node in self._deferred if not is_deferred(node)]
        if not parsed:
            return False
        self._deferred = [node for node in self._deferred if is_deferred(node)]
        for node in parsed:
            self._fill(node)
        return True

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or (self._more() and dict.__contains__(self, key))

    def __missing__(self, key):
        if self._more() and dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        raise KeyError(key)


def _where(node: ast.AST) -> list:
    return [type(node).__name__, getattr(node, "lineno", -1), getattr(node, "col_offset", -1)]


def _call_positions(calls: dict[str, list[tuple[ast.AST, ast.AST]]]) -> dict[str, list[list]]:
    """calls_in() as plain data: each (function, statement) by node type, line and column."""
    return {name: [[*_where(fn), *_where(stmt)] for fn, stmt in pairs] for name, pairs in calls.items()}


def _calls_at(module: ModuleInfo, stored):
    """_call_positions() back to the nodes of this parse, a called name at a time (a function no
    question reaches stays unparsed); None when the stored value is not such positions."""
    if not isinstance(stored, dict) or not all(isinstance(k, str) and isinstance(v, list) for k, v in stored.items()):
        return None
    return _CallsAt(module, stored)


class _CallsAt:
    """``calls_in()`` of a module as ``.get(name, default)``, each name's nodes found from their stored
    positions when first asked; a position that names no node in this parse falls back to reading the
    module's calls again, once, for every name."""

    def __init__(self, module: ModuleInfo, stored: dict[str, list]) -> None:
        self._module, self._stored, self._found = module, stored, {}
        self._whole: dict | None = None

    def get(self, name: str, default=None):
        if name not in self._stored:
            return default
        if name not in self._found:
            self._found[name] = self._resolve(name)
        return self._found[name]

    def _resolve(self, name: str) -> list:
        if self._whole is None:
            try:
                found = []
                for fn_type, fn_line, fn_col, kind, line, col in self._stored[name]:
                    fn = _node_at(self._module.tree.body, fn_type, fn_line, fn_col)
                    stmt = _node_at(self._module.tree.body, kind, line, col) or _outside_body(fn, kind, line, col)
                    if fn is None or stmt is None:
                        break
                    found.append((fn, stmt))
                else:
                    return found
            except (TypeError, ValueError):
                pass
            self._whole = calls_in(self._module, {
                id(child): node for node in ast.walk(self._module.tree) for child in ast.iter_child_nodes(node)})
        return self._whole.get(name, [])


def _node_at(body: list[ast.AST], kind: str, line: int, col: int) -> ast.stmt | None:
    """The statement of this type that starts at (line, col), found by going down the statements
    whose lines hold that line (so only the functions on the way are parsed)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if not isinstance(node, ast.stmt) and not isinstance(node, (ast.excepthandler, ast.match_case)):
            continue
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is not None and end is not None and not start <= line <= end:
            continue
        if isinstance(node, ast.stmt) and type(node).__name__ == kind and start == line and node.col_offset == col:
            return node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, block, None)
            if isinstance(inner, list):
                todo.extend(inner)
    return None


def _outside_body(fn: ast.AST | None, kind: str, line: int, col: int) -> ast.AST | None:
    """A node of a call made in a function's header (a decorator, a default), which is no statement."""
    if fn is None:
        return None
    if kind == "arguments":
        return fn.args
    for part in [*fn.decorator_list, fn.args, *([fn.returns] if fn.returns is not None else [])]:
        for node in ast.walk(part):
            if type(node).__name__ == kind and getattr(node, "lineno", -1) == line and getattr(node, "col_offset", -1) == col:
                return node
    return None


def index_for(tree) -> TreeIndex:
    """The TreeIndex of a tree, kept with its parsed modules for as long as the tree lives."""
    modules = modules_for(tree)
    index = modules.scratch.get("provenance")
    if index is None:
        index = modules.scratch["provenance"] = TreeIndex(modules)
    return index


def _grep_files(found) -> set[str]:
    files = getattr(found, "files", None)
    return set(files) if files is not None else {m.path for m in found}


def _is_test_path(path: str) -> bool:
    parts = path.split("/")
    return any(p in ("test", "tests") for p in parts[:-1]) or parts[-1].startswith("test_")


@dataclass
class Write:
    stmt: ast.stmt
    kind: str
    target: str
    value: ast.expr | None
    line: int


def _write_alternatives(parts: list[str], space: str, not_eq: str) -> list[str]:
    """Text that could write the field: `head =`, `head=` (a keyword), `a.b =`, or `"last"` (setattr)."""
    alts = [rf"\b{re.escape(parts[0])}{space}={not_eq}"]
    if len(parts) > 1:
        alts.append(rf"\b{re.escape(parts[-2])}\.{re.escape(parts[-1])}{space}={not_eq}")
    alts.append(rf"['\"]{re.escape(parts[-1])}['\"]")
    return alts


def _write_pattern(parts: list[str]) -> re.Pattern:
    return re.compile("|".join(_write_alternatives(parts, r"\s*", "(?!=)")))


def _write_ere(parts: list[str]) -> str:
    """The same for `grep -E` on the host, which has no lookahead."""
    return "|".join(_write_alternatives(parts, "[[:space:]]*", "([^=]|$)"))


def write_lines(module: ModuleInfo, parts: list[str]) -> set[int]:
    rx = _write_pattern(parts)
    return {i for i, line in enumerate(module.lines, 1) if rx.search(line)}


def writes_in(module: ModuleInfo, parts: list[str], setters: dict, lines: set[int]):
    marked = sorted(lines)

    def any_marked(first: int, last: int) -> bool:
        at = bisect_left(marked, first)
        return at < len(marked) and marked[at] <= last

    passes = _pass_statements(module) if len(parts) == 1 else {}
    for stmt in _statements(module.tree.body, any_marked):
        if any_marked(stmt.lineno, _header_end(stmt)):
            yield from _writes_in_stmt(stmt, parts, setters)
            if id(stmt) in passes:
                yield from _pass_writes(stmt, parts[0])


# A resolution pass of 0.5.19 and later: a function registered with this decorator returns the fields it
# decides as a dict (``return {"sampling_backend": "flashinfer"}``, srt/arg_groups/overrides.py), and
# ``run_post_process_pass`` declares them.
PASS_DECORATOR = "register_post_process"
_PASS_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pass_statements(module: ModuleInfo) -> dict[int, ast.stmt]:
    """{id(stmt): stmt} of the ``return`` and ``name["field"] = ...`` statements of the module's
    resolution passes (their nested functions excluded)."""
    tree = module.tree
    if PASS_DECORATOR not in module.text:
        return {}
    try:
        return _PASS_MEMO[tree]
    except (KeyError, TypeError):
        pass
    found: dict[int, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                _decorator_name(d) == PASS_DECORATOR for d in node.decorator_list):
            todo = list(node.body)
            while todo:
                stmt = todo.pop()
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                    continue
                if isinstance(stmt, ast.Return | ast.Assign):
                    found[id(stmt)] = stmt
                todo.extend(c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt | ast.excepthandler))
    try:
        _PASS_MEMO[tree] = found
    except TypeError:
        pass
    return found


def _decorator_name(node: ast.expr) -> str | None:
    node = node.func if isinstance(node, ast.Call) else node
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _pass_writes(stmt: ast.stmt, name: str):
    """A pass's decision on ``name``: a key of the dict it returns, or ``out["name"] = value``."""
    if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Dict):
        for key, value in zip(stmt.value.keys, stmt.value.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == name:
                yield Write(stmt, "returned", name, value, key.lineno)
    elif isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                    and target.slice.value == name:
                yield Write(stmt, "returned", name, stmt.value, stmt.lineno)


def _statements(body: list[ast.stmt], any_marked):
    """The statements of a block and of the blocks in it, but not those of a statement none of whose
    lines is marked: nothing there can write the field (and a function not read stays unparsed)."""
    for stmt in body:
        if not any_marked(stmt.lineno, stmt.end_lineno or stmt.lineno):
            continue
        yield stmt
        for name in ("body", "orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if isinstance(block, list):
                yield from _statements(block, any_marked)
        for handler in getattr(stmt, "handlers", ()):
            yield from _statements(handler.body, any_marked)
        for case in getattr(stmt, "cases", ()):
            yield from _statements(case.body, any_marked)


def _header_end(stmt: ast.stmt) -> int:
    """Last line of a statement's own text: for `if`/`def`/`for`, the line before its body."""
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body:
        return max(stmt.lineno, first_line(body[0]) - 1)
    return stmt.end_lineno or stmt.lineno


def _writes_in_stmt(stmt: ast.stmt, parts: list[str], setters: dict):
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in _flatten_targets(targets):
            written = _match_chain(_attr_chain(target), parts)
            if written:
                yield Write(stmt, "assign", written, stmt.value, stmt.lineno)
    for call in _own_calls(stmt):
        yield from _writes_in_call(stmt, call, parts, setters)


def _flatten_targets(targets):
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flatten_targets(t.elts)
        else:
            yield t


def _own_calls(stmt: ast.stmt):
    """Calls in this statement's own expressions, not in the statements nested in it."""
    todo = [c for c in ast.iter_child_nodes(stmt) if not isinstance(c, (ast.stmt, ast.excepthandler))]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _writes_in_call(stmt: ast.stmt, call: ast.Call, parts: list[str], setters: dict):
    name = _call_name(call)
    if name in ("setattr", "__setattr__") and len(call.args) >= 3:
        yield from _setattr_write(stmt, call, parts)
    elif name in setters:
        yield from _setter_write(stmt, call, parts, setters[name])
    if _WRITER_CALL.search(name or ""):
        for kw in call.keywords:
            if kw.arg == parts[0]:
                narrowed = _narrow(kw.value, parts)
                if narrowed is not None:
                    yield Write(stmt, "keyword", narrowed[0], narrowed[1], kw.value.lineno)


def _setattr_write(stmt: ast.stmt, call: ast.Call, parts: list[str]):
    name = call.args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return
    written = _match_chain([*_attr_chain(call.args[0], allow_calls=True), name.value], parts)
    if written:
        yield Write(stmt, "setattr", written, call.args[2], call.lineno)


def _setter_write(stmt: ast.stmt, call: ast.Call, parts: list[str], spec: tuple[int | None, int, int]):
    obj_i, name_i, value_i = spec
    if max(i for i in spec if i is not None) >= len(call.args):
        return
    name = call.args[name_i]
    if not (isinstance(name, ast.Constant) and name.value == parts[-1]):
        return
    if len(parts) > 1 and (obj_i is None or not _mentions(call.args[obj_i], parts[-2])):
        return
    yield Write(stmt, "setter call", ".".join(parts), call.args[value_i], call.lineno)


def _find_setters(module: ModuleInfo, parents: dict) -> dict[str, tuple[int | None, int, int]]:
    """Helpers like `_set(phase, key, value)` whose body is `setattr(..., key, value)`."""
    out = {}
    calls = (n for n in ast.walk(module.tree) if isinstance(n, ast.Call) and _call_name(n) == "setattr")
    for call in calls:
        fn = _enclosing_function(call, parents)
        if fn is None or len(call.args) != 3:
            continue
        params = [a.arg for a in fn.args.args]
        names = [a.id if isinstance(a, ast.Name) else None for a in call.args[1:]]
        if all(n in params for n in names):
            used = {n.id for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)} & set(params)
            obj = params.index(sorted(used)[0]) if used else None
            out[fn.name] = (obj, params.index(names[0]), params.index(names[1]))
    return out


def _enclosing_function(node: ast.AST, parents: dict):
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _attr_chain(node: ast.AST, allow_calls: bool = False) -> list[str]:
    """Attribute names after the base: `self.a.b` -> [a, b]; `getattr(x, "a")` counts with allow_calls."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif (
            allow_calls
            and isinstance(node, ast.Call)
            and _call_name(node) == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            names.append(str(node.args[1].value))
            node = node.args[0]
        else:
            return names[::-1]


def _match_chain(names: list[str], parts: list[str]) -> str | None:
    """The dotted field a write to `<base>.names` sets, if it is the flag or contains it."""
    if not names:
        return None
    n = len(parts)
    if names[-n:] == parts:
        return ".".join(parts)
    if n > 1 and len(names) >= 2 and parts[-len(names) :] == names:
        return ".".join(parts)  # `config.prefill.backend = ...` on a local alias of the field
    if n > 1 and names[-1] == parts[0] and len(names) <= 1:
        return parts[0]  # the whole object is replaced
    return None


def _narrow(value: ast.expr, parts: list[str]) -> tuple[str, ast.expr] | None:
    """For `field=with_phase(cfg.field, Phase.PREFILL, backend=X)`: the sub-field it sets and X."""
    if len(parts) == 1:
        return parts[0], value
    if isinstance(value, ast.Call) and value.keywords:
        kw = next((k for k in value.keywords if k.arg == parts[-1]), None)
        if kw is None:
            return None  # it changes other sub-fields
        if all(any(_mentions(a, p) for a in value.args) for p in parts[1:-1]):
            return ".".join(parts), kw.value
        return None
    return parts[0], value


def _mentions(node: ast.AST, word: str) -> bool:
    return word.lower() in ast.unparse(node).lower()


def first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", None)
    return min([node.lineno, *[d.lineno for d in decorators or []]])


def calls_in(module: ModuleInfo, parents: dict) -> dict[str, list[tuple[ast.AST, ast.stmt]]]:
    """{name: [(calling function, calling statement)]} for ``name(...)`` and ``self.name(...)`` calls."""
    found: dict[str, list] = {}
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            name = func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            name = func.attr  # self.m(), cls.m(), server_args.m()
        else:
            continue
        stmt, fn = _statement_and_function(node, parents)
        if stmt is not None and fn is not None:
            found.setdefault(name, []).append((fn, stmt))
            if name in RUNNERS:  # run_hook(handle_x, server_args): handle_x is called here
                for arg in node.args:
                    if isinstance(arg, ast.Name | ast.Attribute):  # a function, or a bound method (obj.m)
                        found.setdefault(arg.id if isinstance(arg, ast.Name) else arg.attr, []).append((fn, stmt))
    return found


# sglang's calls that run a function given as an argument: the resolution pipeline of 0.5.19 and later
# runs each hook with ``run_hook(fn, server_args)``, each pass with ``run_post_process_pass(server_args, fn)``,
# and code whose writes it records with ``declare_direct_writes(server_args, source, fn)`` or
# ``record_foreign_defaults(server_args, source, fn)`` (srt/arg_groups/pipeline.py, resolution_hooks.py,
# overrides.py, speculative_hook.py).
RUNNERS = ("run_hook", "run_post_process_pass", "declare_direct_writes", "record_foreign_defaults")


def _statement_and_function(node: ast.AST, parents: dict):
    stmt = None
    while id(node) in parents:
        parent = parents[id(node)]
        if stmt is None and isinstance(node, ast.stmt):
            stmt = node
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return stmt or node, parent
        node = parent
    return None, None


def _imported_as(module: ModuleInfo, dotted: str, name: str) -> str | None:
    """The local name ``name`` from module ``dotted`` has in ``module`` (any import in it), or None."""
    package = module.dotted.rsplit(".", 1)[0]
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        if node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            source = f"{base}.{source}" if source else base
        if source != dotted:
            continue
        for alias in node.names:
            if alias.name == name:
                return alias.asname or alias.name
    return None


MAX_METHOD_CALLERS = 3


def _calls_method(node: ast.AST, name: str) -> bool:
    """``obj.name(...)``, or ``obj.name`` handed to a runner that calls it (0.5.19: ``declare_direct_writes(
    server_args, "...", algo.handle_server_args)``); not ``self.name``, a method of the caller's own class."""
    if not isinstance(node, ast.Call):
        return False
    targets = [node.func, *(a for a in node.args if isinstance(a, ast.Attribute))]
    return any(isinstance(t, ast.Attribute) and t.attr == name
               and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")) for t in targets)
