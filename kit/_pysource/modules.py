"""Parsed modules of one source tree: each file read and parsed once, names and imports resolved.

A tree is anything with ``read_text(path)`` (a kit.source.SourceTree, local or remote, or
a directory reader); ``files(pattern)`` and ``grep(...)`` are used when it has them.
:func:`modules_for` keeps one :class:`Modules` per tree object, so the flag table, the
defaults and every ``why`` on that tree share one parse of each file.
"""

from __future__ import annotations

import ast
import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from kit._text import clip
from kit.errors import KitError, SourceFileNotFound

from .index import MISSING, index_of
from .skeleton import deferred_defs, skeleton

__all__ = ["ModuleInfo", "Modules", "bound_names", "constructor_return", "dotted", "freeze_parsed", "method_named",
           "modules_for", "param_default", "param_names", "parse", "short"]

# A parsed sglang file is tens of thousands of AST nodes that live as long as their tree and are
# never cyclic garbage, yet Python's cyclic collector walks every one of them on each full
# collection: in a warm `sgl-kit why` that was 0.2 s of 0.4 s of CPU. Parsing pauses the
# collector; a process that calls freeze_parsed() (the CLI, which lives for one command) also
# moves what it holds after each parse into the collector's permanent generation (gc.freeze).
_FREEZE = False


def freeze_parsed(on: bool = True) -> None:
    """After each parse, gc.freeze() what the process holds, so the cyclic collector stops walking
    parsed trees. For a short-lived process only: frozen objects are never collected as cycles."""
    global _FREEZE
    _FREEZE = on


def parse(text: str) -> ast.Module:
    """ast.parse with the cyclic collector paused (it finds nothing to free in a tree being built)."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return ast.parse(text)
    finally:
        if _FREEZE:
            gc.freeze()
        if paused:
            gc.enable()


@dataclass
class ModuleInfo:
    """One parsed file, its top-level bindings, and where a node of it is."""

    path: str  # relative to the package root, e.g. "srt/server_args.py"
    display: str  # with the package, e.g. "sglang/srt/server_args.py"
    dotted: str  # "sglang.srt.server_args"
    text: str
    tree: ast.Module
    lines: list[str] = field(repr=False, default_factory=list)
    _globals: dict | None = field(default=None, repr=False)
    _growth: dict | None = field(default=None, repr=False)
    _classes: dict | None = field(default=None, repr=False)

    def where(self, node_or_line) -> str:
        line = node_or_line if isinstance(node_or_line, int) else node_or_line.lineno
        return f"{self.display}:{line}"

    @property
    def bindings(self) -> dict[str, ast.AST]:
        if self._globals is None:
            self._globals, self._growth = collect_globals(self.tree)
        return self._globals

    @property
    def growth(self) -> dict[str, list[tuple[int, str]]]:
        self.bindings  # noqa: B018 - fills _growth
        return self._growth or {}

    def cls(self, name: str) -> ast.ClassDef | None:
        node = self.bindings.get(name)
        return node if isinstance(node, ast.ClassDef) else None

    @property
    def classes(self) -> dict[str, ast.ClassDef]:
        """Every ``class`` statement at the top (or in a top-level if/try), by name, even when the
        name is later rebound (0.5.23 replaces ``ServerArgs`` with a msgspec struct built from it)."""
        if self._classes is None:
            self._classes = {stmt.name: stmt for stmt, _, _ in module_statements(self.tree.body, 0, None)
                             if isinstance(stmt, ast.ClassDef)}
        return self._classes

    def assigned(self, name: str) -> ast.expr | None:
        """The expression a top-level ``NAME = ...`` binds, if NAME is bound that way."""
        node = self.bindings.get(name)
        return node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None

    def segment(self, node: ast.AST | None) -> str | None:
        """The source text of a node, exactly as written."""
        if node is None:
            return None
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return self.lines[first].encode()[node.col_offset : node.end_col_offset].decode()
        head = self.lines[first].encode()[node.col_offset :].decode()
        tail = self.lines[last].encode()[: node.end_col_offset].decode()
        return "\n".join([head, *self.lines[first + 1 : last], tail])


def collect_globals(tree: ast.Module) -> tuple[dict, dict]:
    """Top-level bindings (last wins; ones nested in if/try only fill gaps) and list growth."""
    top: dict[str, ast.AST] = {}
    nested: dict[str, ast.AST] = {}
    growth: dict[str, list[tuple[int, str]]] = {}
    for stmt, depth, guard in module_statements(tree.body, 0, None):
        target = top if depth == 0 else nested
        for name, node in bound_names(stmt):
            target[name] = node
        note_growth(stmt, guard, growth)
    return {**nested, **top}, growth


def module_statements(body: list[ast.stmt], depth: int, guard: ast.If | None):
    for stmt in body:
        yield stmt, depth, guard
        if isinstance(stmt, (ast.If, ast.Try)):
            inner = stmt if isinstance(stmt, ast.If) else guard
            for block in (stmt.body, stmt.orelse, getattr(stmt, "finalbody", [])):
                yield from module_statements(block, depth + 1, inner)
            for handler in getattr(stmt, "handlers", []):
                yield from module_statements(handler.body, depth + 1, guard)


def bound_names(stmt: ast.stmt):
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name, stmt
    elif isinstance(stmt, ast.Assign):
        for tgt in stmt.targets:
            if isinstance(tgt, ast.Name):
                yield tgt.id, stmt
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
        yield stmt.target.id, stmt
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for alias in stmt.names:
            if alias.name != "*":
                yield (alias.asname or alias.name).split(".")[0], stmt


def note_growth(stmt: ast.stmt, guard: ast.If | None, growth: dict) -> None:
    """Module-level `LIST.append(...)`: a list read from the source may not be the whole story."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("append", "extend", "insert")
        and isinstance(call.func.value, ast.Name)
    ):
        when = f" when `{short(guard.test)}`" if guard is not None else ""
        growth.setdefault(call.func.value.id, []).append((call.lineno, when))


class Modules:
    """Parsed modules of one source tree, each read once (the tree may be remote)."""

    def __init__(
        self,
        read_text: Callable[[str], str],
        package: str,
        list_files: Callable[[str], list[str]] | None = None,
        version: str | None = None,
    ) -> None:
        self._read = read_text
        self.package = package
        self.version = version
        self._list = list_files
        self._cache: dict[str, ModuleInfo | None] = {}
        self._texts: dict[str, str] = {}
        self.scratch: dict[str, object] = {}  # per-tree caches of the layers above (provenance, defaults)
        self.tree: Callable[[], object] = lambda: None  # the tree these modules were read from

    def text(self, path: str) -> str:
        """A file's text, read from the tree once."""
        if path not in self._texts:
            self._texts[path] = self._read(path)
        return self._texts[path]

    def files(self, pattern: str) -> list[str]:
        return self._list(pattern) if self._list else []

    def get(self, path: str) -> ModuleInfo | None:
        if path not in self._cache:
            self._cache[path] = self._load(path)
        return self._cache[path]

    def module(self, path: str) -> ModuleInfo:
        """A module that must exist; SourceFileNotFound names the version when it does not."""
        found = self.get(path)
        if found is None:
            raise SourceFileNotFound(
                f"{path} is not in the {self.package} {self.version or ''} source tree",
                hint=f"is this the package directory of {self.package} (…/site-packages/{self.package})?",
            )
        return found

    def _load(self, path: str) -> ModuleInfo | None:
        try:
            text = self.text(path)
            tree = self._parse(path, text)
        except (KitError, OSError, SyntaxError, ValueError):
            return None
        stem = path[: -len("/__init__.py")] if path.endswith("/__init__.py") else path[: -len(".py")]
        mod_dotted = ".".join([self.package, *stem.split("/")])
        return ModuleInfo(path, f"{self.package}/{path}", mod_dotted, text, tree, text.split("\n"))

    def _parse(self, path: str, text: str) -> ast.Module:
        """The module's tree: whole, or, when the persistent index knows where its functions are, a
        skeleton whose functions are parsed when first looked into (see kit._pysource.skeleton)."""
        index = index_of(self)
        stored = index.get("skeleton", path) if index is not None else MISSING
        if stored is not MISSING:
            made = skeleton(text, stored, parse)
            if made is not None:
                return made
        tree = parse(text)
        if index is not None:
            index.put("skeleton", path, deferred_defs(tree, text))
        return tree

    def find(self, mod_dotted: str) -> ModuleInfo | None:
        head, _, rest = mod_dotted.partition(".")
        if head != self.package:
            return None
        base = rest.replace(".", "/")
        if not base:
            return self.get("__init__.py")
        return self.get(base + ".py") or self.get(base + "/__init__.py")

    def imported(self, module: ModuleInfo, name: str) -> tuple[ModuleInfo, str] | None:
        """The module inside the tree that ``from X import name`` takes ``name`` from, and its name there."""
        node = module.bindings.get(name)
        if not isinstance(node, ast.ImportFrom):
            return None
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        target = self.find(self.resolve_from(module, node))
        return (target, alias.name) if target is not None else None

    def class_of(self, module: ModuleInfo, name: str, depth: int = 0) -> tuple[ModuleInfo, ast.ClassDef] | None:
        """The class a plain name refers to in ``module``, following imports inside the tree."""
        if not name or "." in name:
            return None
        cls = module.classes.get(name)
        if cls is not None:
            return module, cls
        hit = self.imported(module, name)
        if hit is not None and depth < 8:
            return self.class_of(hit[0], hit[1], depth + 1)
        return None

    def resolve_from(self, module: ModuleInfo, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = module.dotted.split(".")
        keep = parts if module.path.endswith("__init__.py") else parts[:-1]
        keep = keep[: len(keep) - (node.level - 1)]
        return ".".join(keep + ([node.module] if node.module else []))


_TREES: dict[int, Modules] = {}


def modules_for(tree) -> Modules:
    """The one Modules of a tree object (a SourceTree or anything with ``read_text``), made on first use.

    It lives as long as the tree, and holds it only weakly: a fresh tree object reads its
    files again. ``modules.tree()`` gives the tree back.
    """
    key = id(tree)
    cached = _TREES.get(key)
    if cached is not None and cached.tree() is tree:
        return cached
    try:
        ref = weakref.ref(tree)
    except TypeError:  # not weak-referenceable: kept for the life of the process
        ref = lambda: tree  # noqa: E731
    has_files = callable(getattr(tree, "files", None))
    made = Modules(lambda path: ref().read_text(path), getattr(tree, "package", None) or "sglang",
                   (lambda pattern: ref().files(pattern)) if has_files else None, getattr(tree, "version", None))
    made.tree = ref
    _TREES[key] = made
    try:
        weakref.finalize(tree, _TREES.pop, key, None)
    except TypeError:
        pass
    return made


def dotted(node: ast.AST) -> str:
    """`a.b.c` for Name/Attribute chains, else the source text."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{dotted(node.func)}()"
    return ast.unparse(node)


def short(node: ast.AST) -> str:
    return clip(ast.unparse(node), 60)


def param_names(func: ast.AST) -> list[str]:
    spec = func.args
    return [a.arg for a in [*spec.posonlyargs, *spec.args, *spec.kwonlyargs]]


def param_default(func: ast.AST, name: str) -> ast.expr | None:
    spec = func.args
    positional = [*spec.posonlyargs, *spec.args]
    tail = positional[len(positional) - len(spec.defaults) :]
    for arg, default in [
        *zip(tail, spec.defaults, strict=False),
        *zip(spec.kwonlyargs, spec.kw_defaults, strict=False),
    ]:
        if arg.arg == name:
            return default
    return None


def method_named(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


def constructor_return(func: ast.FunctionDef, cls_name: str):
    """(top-level statement index, call) of `return ClassName(...)` / `return cls(...)`."""
    for index, stmt in enumerate(func.body):
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id in (cls_name, "cls")
            ):
                return index, node.value
    return None
