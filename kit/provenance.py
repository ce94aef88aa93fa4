"""Why a server flag has its value: the code that assigns it, its guards, and which fired.

`explain(tree, "disable_piecewise_cuda_graph", snapshot, model_config)` finds every
assignment to the flag in the SGLang source on the box (by ast, never by line
number), walks up to the conditions that guard each one (early returns included),
and evaluates those conditions against the server args from the log and the
model's config.json. Model-config properties such as `is_multimodal` are followed
into `ModelConfig`'s own source, so the answer names the list and line that made
the decision.

It knows three layouts, because SGLang moved this logic twice:
- chains of numbered `if` rules in a `ServerArgs` method (0.5.10-0.5.12);
- rules tables of `(name, lambda)` pairs walked by a loop (later 0.5.1x);
- hook modules that call `declare_resolution(server_args, ..., field=...)` (0.5.2x).
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import textwrap
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit._guard_eval import Env, Evaluator, ModuleInfo, Modules, Unknown, const, truth
from kit.errors import ModelConfigError

__all__ = ["AssignmentSite", "FlagExplanation", "Guard", "explain"]

_STATUS_ORDER = {"fired": 0, "unknown": 1, "not fired": 2}
_WRITER_CALL = re.compile(r"(declare|override|resolution|replace)", re.I)
_NUMBERED = re.compile(r"^\d+[a-z]?[.)]\s")
_SNIPPET_CONTEXT = 2
_MAX_LABEL = 120


# --------------------------------------------------------------------------- results


@dataclass
class Guard:
    """One condition on the way to an assignment.

    `result` is the truth of `text` as written (None: unknown); `negated` means the
    assignment runs only when `text` is false (an early return, an `else`, an
    earlier rule that did not match).
    """

    text: str
    line: int
    negated: bool = False
    result: bool | None = None
    reason: str = ""
    kind: str = "if"  # if, else, early return, rule, earlier rule, loop, except, call
    notes: list[str] = field(default_factory=list)  # lookups that decided `result`
    rule: str = ""  # for an earlier rule of a table: its name

    def __repr__(self) -> str:
        mark = {True: "holds", False: "fails", None: "unknown"}[self.passes]
        return f"<Guard {self.condition} (line {self.line}) {mark}>"

    @property
    def passes(self) -> bool | None:
        return None if self.result is None else self.result != self.negated

    @property
    def condition(self) -> str:
        """The condition the assignment needs, e.g. `not self.enforce_piecewise_cuda_graph`."""
        if not self.negated:
            return self.text
        if self.text.startswith("not ") and _is_atom(self.text[4:]):
            return self.text[4:]
        return f"not {self.text}" if _is_atom(self.text) else f"not ({self.text})"


@dataclass
class AssignmentSite:
    file: str  # with the package: "sglang/srt/server_args.py"
    line: int  # the assignment, or for a rules table the rule's entry
    function: str  # qualname, e.g. "ServerArgs._handle_piecewise_cuda_graph"
    value_text: str
    guards: list[Guard] = field(default_factory=list)
    rule: str = ""
    rule_line: int | None = None
    status: str = "unknown"
    status_reason: str = ""
    evidence: list[str] = field(default_factory=list)  # what was looked up to decide
    kind: str = "assign"  # assign, setattr, keyword, setter call, rules table
    target: str = ""  # the dotted field written; shorter than the flag for whole-object writes
    write_line: int | None = None  # where the value is written, when `line` is a rule entry
    snippet: str = field(default="", repr=False)

    def __repr__(self) -> str:
        rule = f" {self.rule!r}" if self.rule else ""
        return f"<AssignmentSite {self.status} {self.where} {self.function}{rule} = {self.value_text}>"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def fired(self) -> bool:
        return self.status == "fired"


@dataclass
class FlagExplanation:
    flag: str
    version: str | None
    sites: list[AssignmentSite] = field(default_factory=list)
    observed: str | None = None  # the flag's value in the snapshot, as text
    evaluated: bool = False  # False when no snapshot was given
    hint: str = ""

    @property
    def fired(self) -> list[AssignmentSite]:
        return [s for s in self.sites if s.fired]

    def ordered(self) -> list[AssignmentSite]:
        """Fired first, then unknown, then not fired; source order within each."""
        return sorted(self.sites, key=lambda s: (_STATUS_ORDER.get(s.status, 3), s.file, s.line))

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in _STATUS_ORDER}
        for s in self.sites:
            out[s.status] = out.get(s.status, 0) + 1
        return out

    @property
    def headline(self) -> str:
        c = self.counts()
        version = f"sglang {self.version}" if self.version else "sglang (version unknown)"
        seen = f"; value in the log: {self.observed}" if self.observed is not None else ""
        return (
            f"{self.flag} in {version}: {len(self.sites)} assignment sites, "
            f"{c['fired']} fired, {c['unknown']} unknown, {c['not fired']} not fired{seen}"
        )

    def __repr__(self) -> str:
        fired = ", ".join(f"{s.where} {s.rule or s.function}".strip() for s in self.fired[:3])
        more = f" [{fired}]" if fired else ""
        return f"<FlagExplanation {self.flag} sglang {self.version}: {len(self.sites)} sites, {len(self.fired)} fired{more}>"

    def to_text(self, width: int = 110) -> str:
        return _render_text(self, width)

    def to_dict(self) -> dict:
        out = asdict(self)
        for site, data in zip(self.sites, out["sites"], strict=True):
            for guard, g in zip(site.guards, data["guards"], strict=True):
                g["condition"] = guard.condition
                g["passes"] = guard.passes
        out["fired"] = [s.where for s in self.fired]
        return out

    def _repr_html_(self) -> str:
        return _render_html(self)


# --------------------------------------------------------------------------- entry point


def explain(
    tree, flag: str, snapshot=None, model_config=None, *, under: str | None = "srt"
) -> FlagExplanation:
    """Every assignment to `flag` in `tree`, with its guards, evaluated when a snapshot is given.

    `flag` is a ServerArgs field (`disable_piecewise_cuda_graph`, `--disable-piecewise-cuda-graph`)
    or a dotted path into one (`cuda_graph_config.prefill.backend`). `snapshot` is a
    ServerArgsSnapshot or a dict of field values; `model_config` a path to config.json or a dict.
    `under` limits the search to the server runtime (`srt/`); None searches benchmarks and tools too.
    """
    flag = normalize_flag(flag)
    parts = flag.split(".")
    cache = _cache_for(tree)
    values = _snapshot_values(snapshot)
    config = _load_model_config(model_config)
    # The flag itself is shadowed: the log holds its final value, not the one a guard saw.
    ev = Evaluator(cache.modules, values, config, {parts[0]}) if values is not None else None
    sites = _find_sites(cache, parts, ev, under)
    return FlagExplanation(
        flag=flag,
        version=getattr(tree, "version", None),
        sites=sites,
        observed=_observed(values, parts),
        evaluated=ev is not None,
        hint=_hint(flag, sites),
    )


def _find_sites(cache: _TreeCache, parts: list[str], ev: Evaluator | None, under: str | None):
    sites: list[AssignmentSite] = []
    for path in cache.candidates(parts):
        if under and not path.startswith(under.rstrip("/") + "/"):
            continue
        module = cache.modules.get(path)
        if module is not None:
            sites.extend(_sites_in(module, parts, ev, cache))
    return sorted(sites, key=lambda s: (s.file, s.line))


def normalize_flag(flag: str) -> str:
    """`--disable-piecewise-cuda-graph` and `disable_piecewise_cuda_graph` name the same field."""
    if not isinstance(flag, str) or not flag.strip().lstrip("-"):
        raise ValueError(f"not a flag name: {flag!r}")
    return flag.strip().lstrip("-").replace("-", "_")


def _snapshot_values(snapshot) -> dict | None:
    if snapshot is None:
        return None
    if isinstance(snapshot, Mapping):
        return dict(snapshot)
    for attr in ("fields", "values"):
        values = getattr(snapshot, attr, None)
        if isinstance(values, Mapping):
            return dict(values)
    raise TypeError(f"snapshot must be a ServerArgsSnapshot or a dict, not {type(snapshot).__name__}")


def _load_model_config(model_config) -> dict | None:
    if model_config is None:
        return None
    if isinstance(model_config, Mapping):
        return dict(model_config)
    path = Path(os.fspath(model_config))
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ModelConfigError(
            f"cannot read the model config {path}: {err.strerror or err}",
            hint="pass the model's config.json (copy it from the server) or a dict",
        ) from err
    except json.JSONDecodeError as err:
        raise ModelConfigError(
            f"{path} is not valid JSON: {err}", hint="is this the model's config.json?"
        ) from err
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path} holds a {type(data).__name__}, not a JSON object")
    return data


def _observed(values: dict | None, parts: list[str]) -> str | None:
    """The flag's logged value, following nested configs (`CudaGraphConfig(prefill=...)`)."""
    node = values
    for part in parts:
        kwargs = getattr(node, "kwargs", None)
        node = kwargs if not isinstance(node, Mapping) and isinstance(kwargs, Mapping) else node
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    text = getattr(node, "text", None)
    return text if isinstance(text, str) else repr(node)


def _hint(flag: str, sites: list[AssignmentSite]) -> str:
    if sites:
        return ""
    return (
        f"nothing in this tree assigns {flag}; check the name for this version "
        f"(tree.grep({flag.split('.')[-1]!r}) shows where it is read)"
    )


# --------------------------------------------------------------------------- per-tree cache


class _TreeCache:
    """Files read from one tree, parsed once; a warm explain() does no I/O at all."""

    def __init__(self, tree) -> None:
        try:  # a weak reference, so the cache goes when the tree does
            self._ref = weakref.ref(tree)
        except TypeError:
            self._ref = lambda: tree
        self.package = getattr(tree, "package", None) or "sglang"
        self.texts: dict[str, str] = {}
        self.modules = Modules(self.text, self.package, self._files)
        self._candidates: dict[str, list[str]] = {}
        self._parents: dict[str, dict[int, ast.AST]] = {}
        self._setters: dict[str, dict[str, tuple[int | None, int, int]]] = {}

    @property
    def tree(self):
        return self._ref()

    def text(self, path: str) -> str:
        if path not in self.texts:
            self.texts[path] = self.tree.read_text(path)
        return self.texts[path]

    def _files(self, pattern: str) -> list[str]:
        files = getattr(self.tree, "files", None)
        return files(pattern) if callable(files) else []

    def candidates(self, parts: list[str]) -> list[str]:
        """Files that mention the field and hold text that could write it (most only read it)."""
        key = ".".join(parts)
        if key not in self._candidates:
            self._candidates[key] = [p for p in self._search(parts) if not _is_test_path(p)]
        return self._candidates[key]

    def _search(self, parts: list[str]) -> list[str]:
        grep = getattr(self.tree, "grep", None)
        if callable(grep):
            hits = _grep_files(grep(_write_ere(parts), max_matches=100_000))
            if len(parts) > 1:  # the ERE also matches the last part alone (`backend =`)
                hits &= _grep_files(grep(parts[0], fixed=True, max_matches=100_000))
            return sorted(hits)
        rx = _write_pattern(parts)
        return [p for p in self.tree.files("**/*.py") if parts[0] in self.text(p) and rx.search(self.text(p))]

    def parents(self, module: ModuleInfo) -> dict[int, ast.AST]:
        if module.path not in self._parents:
            self._parents[module.path] = {
                id(child): node for node in ast.walk(module.tree) for child in ast.iter_child_nodes(node)
            }
        return self._parents[module.path]

    def setters(self, module: ModuleInfo) -> dict[str, tuple[int | None, int, int]]:
        if module.path not in self._setters:
            found = _find_setters(module, self.parents(module)) if "setattr(" in module.text else {}
            self._setters[module.path] = found
        return self._setters[module.path]


_CACHES: dict[int, _TreeCache] = {}


def _cache_for(tree) -> _TreeCache:
    key = id(tree)
    cache = _CACHES.get(key)
    if cache is None or cache.tree is not tree:
        cache = _TreeCache(tree)
        _CACHES[key] = cache
        try:
            weakref.finalize(tree, _CACHES.pop, key, None)
        except TypeError:  # not weak-referenceable: the cache lives as long as the process
            pass
    return cache


def _grep_files(found) -> set[str]:
    files = getattr(found, "files", None)
    return set(files) if files is not None else {m.path for m in found}


def _is_test_path(path: str) -> bool:
    parts = path.split("/")
    return any(p in ("test", "tests") for p in parts[:-1]) or parts[-1].startswith("test_")


# --------------------------------------------------------------------------- finding writes


@dataclass
class _Write:
    stmt: ast.stmt
    kind: str
    target: str
    value: ast.expr | None
    line: int


def _sites_in(module: ModuleInfo, parts: list[str], ev: Evaluator | None, cache: _TreeCache):
    lines = _write_lines(module, parts)
    if not lines:
        return []
    writes = list(_writes_in(module, parts, cache.setters(module), lines))
    if not writes:
        return []
    parents = cache.parents(module)
    sites: list[AssignmentSite] = []
    for write in writes:
        sites.extend(_explain_write(module, write, parents, ev))
    return sites


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


def _write_lines(module: ModuleInfo, parts: list[str]) -> set[int]:
    rx = _write_pattern(parts)
    return {i for i, line in enumerate(module.lines, 1) if rx.search(line)}


def _writes_in(module: ModuleInfo, parts: list[str], setters: dict, lines: set[int]):
    for stmt in _statements(module.tree.body):
        end = _header_end(stmt)
        if any(n in lines for n in range(stmt.lineno, end + 1)):
            yield from _writes_in_stmt(stmt, parts, setters)


def _statements(body: list[ast.stmt]):
    for stmt in body:
        yield stmt
        for name in ("body", "orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if isinstance(block, list):
                yield from _statements(block)
        for handler in getattr(stmt, "handlers", ()):
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", ()):
            yield from _statements(case.body)


def _header_end(stmt: ast.stmt) -> int:
    """Last line of a statement's own text: for `if`/`def`/`for`, the line before its body."""
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body:
        return max(stmt.lineno, _first_line(body[0]) - 1)
    return stmt.end_lineno or stmt.lineno


def _writes_in_stmt(stmt: ast.stmt, parts: list[str], setters: dict):
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in _flatten_targets(targets):
            written = _match_chain(_attr_chain(target), parts)
            if written:
                yield _Write(stmt, "assign", written, stmt.value, stmt.lineno)
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
                    yield _Write(stmt, "keyword", narrowed[0], narrowed[1], kw.value.lineno)


def _setattr_write(stmt: ast.stmt, call: ast.Call, parts: list[str]):
    name = call.args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return
    written = _match_chain([*_attr_chain(call.args[0], allow_calls=True), name.value], parts)
    if written:
        yield _Write(stmt, "setattr", written, call.args[2], call.lineno)


def _setter_write(stmt: ast.stmt, call: ast.Call, parts: list[str], spec: tuple[int | None, int, int]):
    obj_i, name_i, value_i = spec
    if max(i for i in spec if i is not None) >= len(call.args):
        return
    name = call.args[name_i]
    if not (isinstance(name, ast.Constant) and name.value == parts[-1]):
        return
    if len(parts) > 1 and (obj_i is None or not _mentions(call.args[obj_i], parts[-2])):
        return
    yield _Write(stmt, "setter call", ".".join(parts), call.args[value_i], call.lineno)


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


# --------------------------------------------------------------------------- guards


@dataclass
class _Table:
    """A rules table walked by `for name, predicate in rules: if predicate(): ...`."""

    loop: ast.For
    rules: list[ast.Tuple]
    pred_index: int
    label_index: int | None
    stops: bool  # the loop ends at the first match
    env: Env | None


def _explain_write(module: ModuleInfo, write: _Write, parents: dict, ev: Evaluator | None):
    chain = _ancestors(write.stmt, parents)
    walk = _Walk(module, chain, ev)
    walk.run()
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
        return [_finish(site, module, ev)]
    return [_finish(site, module, ev) for site in _table_sites(module, walk, write, base)]


def _table_sites(module: ModuleInfo, walk: _Walk, write: _Write, base: dict):
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

    def __init__(self, module: ModuleInfo, chain: list[ast.AST], ev: Evaluator | None) -> None:
        self.module = module
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
        self.env = self.ev.initial_env(self.module, func, cls) if self.ev else None
        for parent, child in zip(self.chain[start:], self.chain[start + 1 :], strict=False):
            self._enter(parent, child)

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
        if block is not None:
            for sibling in block[: _index(block, child)]:
                self._sink.extend(self._exit_guards(sibling))
                self._step(sibling)
        self._entry_guard(parent, child, block)

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


# --------------------------------------------------------------------------- labels


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
    return _comment_block(module.lines, _first_line(node) - 1, floor)


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", None)
    return min([node.lineno, *[d.lineno for d in decorators or []]])


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
    return (label if len(label) <= _MAX_LABEL else label[: _MAX_LABEL - 3] + "..."), chosen[0][0]


# --------------------------------------------------------------------------- status


def _finish(site: AssignmentSite, module: ModuleInfo, ev: Evaluator | None) -> AssignmentSite:
    site.status, site.status_reason, site.evidence = _status(site.guards, ev is not None)
    site.snippet = _snippet(module, site)
    return site


def _status(guards: list[Guard], evaluated: bool) -> tuple[str, str, list[str]]:
    if not evaluated:
        return "unknown", "not evaluated: no server args given (pass snapshot=)", []
    failed = [g for g in guards if g.passes is False]
    if failed:
        evidence = list(failed[0].notes)
        detail = f" ({'; '.join(evidence)})" if evidence else ""
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


# --------------------------------------------------------------------------- rendering


def _mark(guard: Guard) -> str:
    return {True: "ok", False: "NO", None: "?"}[guard.passes]


def _render_text(exp: FlagExplanation, width: int) -> str:
    out = [exp.headline]
    if exp.hint:
        out.append(exp.hint)
    if not exp.evaluated:
        out.append("guards not evaluated: pass snapshot= (the server args from the log) and model_config=")
    rows = [
        (s.status, f"{_short_file(s.file)}:{s.line}", s.function, s.rule or "-", s.value_text)
        for s in exp.ordered()
    ]
    heads = ("STATUS", "WHERE", "FUNCTION", "RULE", "VALUE")
    widths = [
        max(len(h), *(len(_clip(r[i], 48)) for r in rows)) if rows else len(h) for i, h in enumerate(heads)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out.append(fmt.format(*heads).rstrip())
    for site, row in zip(exp.ordered(), rows, strict=True):
        out.append(fmt.format(*(_clip(c, 48) for c in row)).rstrip())
        out.extend(_site_detail(site, width))
    return "\n".join(out)


def _site_detail(site: AssignmentSite, width: int) -> list[str]:
    pad = "    "
    guards = " and ".join(
        f"{_paren(g.condition)} [{_mark(g)}]" for g in site.guards if g.kind != "earlier rule"
    )
    earlier = sum(1 for g in site.guards if g.kind == "earlier rule")
    if earlier:
        guards += f" (after {earlier} earlier rules)"
    lines = [pad + _clip("if " + guards, width - len(pad))] if guards else []
    if site.fired:
        lines += [_wrap(f"- {note}", width, pad, pad + "  ") for note in site.evidence]
    elif site.status_reason:
        lines.append(_wrap(f"why: {site.status_reason}", width, pad, pad + "     "))
    return lines


def _wrap(text: str, width: int, first: str, rest: str) -> str:
    return textwrap.fill(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)


def _short_file(path: str) -> str:
    return path.split("/", 1)[1] if path.startswith("sglang/") else path


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _render_html(exp: FlagExplanation) -> str:
    e = html.escape
    head = f"<p><b>{e(exp.headline)}</b></p>" + (f"<p>{e(exp.hint)}</p>" if exp.hint else "")
    rows = []
    for s in exp.ordered():
        guards = "<br>".join(
            f"<code>{e(g.condition)}</code> [{_mark(g)}] <small>{e(g.reason)}</small>" for g in s.guards
        )
        colour = {"fired": "#d4f7d4", "not fired": "#f2f2f2"}.get(s.status, "#fff3cd")
        rows.append(
            f"<tr style='background:{colour}'><td>{e(s.status)}</td>"
            f"<td><code>{e(s.where)}</code><details><summary>source</summary>"
            f"<pre>{e(s.snippet)}</pre></details></td>"
            f"<td><code>{e(s.function)}</code></td><td>{e(s.rule or '-')}</td>"
            f"<td><code>{e(s.value_text)}</code></td><td>{guards}<br><i>{e(s.status_reason)}</i></td></tr>"
        )
    table = (
        "<table><tr><th>status</th><th>where</th><th>function</th><th>rule</th>"
        "<th>value</th><th>guards</th></tr>" + "".join(rows) + "</table>"
    )
    return f"<div>{head}{table}</div>"


def _paren(text: str) -> str:
    return f"({text})" if " or " in text or " and " in text or " if " in text else text


def _is_atom(text: str) -> bool:
    return re.fullmatch(r"[\w.()\[\]'\"]+", text) is not None
