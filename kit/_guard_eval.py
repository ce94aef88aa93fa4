"""A small, safe evaluator for the conditions around a flag assignment in SGLang's source.

It never runs SGLang code: it walks the ast and computes what it can from the
server args in the log and the model's config.json. Anything that would need the
live process (a hardware probe, a file on the server, an env var) becomes
`Unknown` with a reason an engineer can act on.

Two modes share one interpreter. Guards are evaluated directly. Model-config
properties (`ModelConfig.is_multimodal`) are followed into `ModelConfig.__init__`,
run lazily: every assignment becomes a memoized thunk and an `if` becomes a gated
choice, so only what a guard asks for is ever computed. That is what lets the
kit follow `is_multimodal` through `get_hf_text_config` and `multimodal_model_archs`
without importing transformers or hard-coding a list of architectures.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kit.errors import SourceFileNotFound

__all__ = ["Unknown", "Evaluator", "Env", "Modules", "ModuleInfo", "truth", "render"]

_MAX_DEPTH = 12
_MAX_SEQ = 4096
_RET, _DONE = "<ret>", "<done>"

# Calls whose result only the live process knows; the reason says which kind.
_PROBE = re.compile(
    r"(^|\.)(is_(hip|npu|cpu|mps|xpu|cuda|musa|hpu|cuda_alike|blackwell|hopper)\w*|is_sm\d+\w*"
    r"|get_device\w*|\w*platform\w*|\w*_available)"
)
_ENV = re.compile(r"(^|\.)(envs?\.|\w*getenv|environ|get_\w*env_var)")
_FILES = re.compile(r"(check_\w*file|exists|is_?file|is_?dir|listdir|^open$|Path$|glob|load_\w+|download)")


# --------------------------------------------------------------------------- values


class Unknown:
    """A value the evaluator cannot know; `causes` are (subject, why) pairs.

    `error` marks what Python itself would raise on (comparing None with an int): unlike
    a value that is merely not known, it cannot be skipped by `and`/`or`. `truth` is set
    when only the truthiness is known: `x and False` is falsy, but it may be `x`.
    """

    __slots__ = ("causes", "error", "truth")

    def __init__(self, *causes: tuple[str, str], error: bool = False, truth: bool | None = None) -> None:
        self.causes = tuple(dict.fromkeys(causes))
        self.error = error
        self.truth = truth

    def __bool__(self) -> bool:  # a silent truth test would turn "unknown" into "no"
        raise TypeError("Unknown has no truth value; use truth()")

    def __add__(self, other: Unknown) -> Unknown:
        return Unknown(*self.causes, *other.causes, error=self.error or other.error)

    @property
    def reason(self) -> str:
        groups: dict[str, list[str]] = {}
        for subject, why in self.causes:
            groups.setdefault(why, []).append(subject)
        return "; ".join(f"{', '.join(dict.fromkeys(subs))}: {why}" for why, subs in groups.items())

    def __repr__(self) -> str:
        return f"Unknown({self.reason})"


def _unknown(subject: str, why: str) -> Unknown:
    return Unknown((subject, why))


def opaque(value: Unknown) -> Unknown:
    """The same unknown without a known truth: `(x and False).attr` is not falsy itself."""
    return value if value.truth is None else Unknown(*value.causes, error=value.error)


def has_unknown(value, depth: int = 0) -> bool:
    if isinstance(value, Unknown):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(has_unknown(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(has_unknown(v, depth + 1) for v in [*value.keys(), *value.values()])
    return False


def truth(value):
    """True / False, or the Unknown itself."""
    if isinstance(value, Unknown):
        return value if value.truth is None else value.truth
    if isinstance(value, External):
        return _unknown(value.dotted, "outside the sglang source; not evaluated")
    if isinstance(value, (Cfg, Args, ModelCfg)):
        return True
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - a foreign __bool__ is not ours to trust
        return _unknown(render(value), "has no truth value here")


class OriginList(list):
    """A list read from a module-level constant, so lookups can say where it lives."""

    def __init__(self, items, name: str, where: str) -> None:
        super().__init__(items)
        self.name = name
        self.where = where

    @property
    def label(self) -> str:
        return f"{self.name} ({self.where})"


class Cfg:
    """A config.json mapping read by attribute, as transformers' PretrainedConfig is."""

    def __init__(self, data: Mapping, label: str, registry: dict[int, Cfg]) -> None:
        self.data = data
        self.label = label
        self._registry = registry

    def has(self, name: str) -> bool:
        return name in self.data

    def get(self, name: str, *default):
        if name not in self.data:
            if default:
                return default[0]
            return _unknown(f"{self.label}.{name}", "not in the file (transformers may supply a default)")
        return wrap(self.data[name], f"{self.label}.{name}", self._registry)

    def __repr__(self) -> str:
        return f"<{self.label}>"


def wrap(value, label: str, registry: dict[int, Cfg]):
    """Nested mappings become Cfg objects, one per dict, so `is` compares like the real configs.

    Values parsed from a log that are not literals (`CudaGraphConfig(prefill=...)`,
    `<Backend.DISABLED: 'disabled'>`) are read through their keyword arguments or enum value.
    """
    kwargs = getattr(value, "kwargs", None)
    if not isinstance(value, Mapping) and isinstance(kwargs, Mapping) and getattr(value, "call", None):
        value = kwargs
    if isinstance(value, Mapping):
        key = id(value)
        if key not in registry:
            registry[key] = Cfg(value, label, registry)
        return registry[key]
    if isinstance(value, _PLAIN) or isinstance(value, (Cfg, Unknown)):
        return value
    return _opaque(value, label)


_PLAIN = (str, int, float, bool, type(None), list, tuple, set, frozenset, dict)
_ENUM_REPR = re.compile(r"^<[\w.]+: (.+)>$")


def _opaque(value, label: str):
    text = getattr(value, "text", None)
    match = _ENUM_REPR.match(text) if isinstance(text, str) else None
    if match:
        try:
            return ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            pass
    return _unknown(label, f"logged as {str(text or value)[:50]!r}, not a value the kit can compare")


@dataclass
class FuncRef:
    node: ast.AST  # FunctionDef or Lambda
    module: ModuleInfo
    closure: Env | None = None
    bound: object = None
    cls: ast.ClassDef | None = None

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")


@dataclass
class ClassRef:
    node: ast.ClassDef
    module: ModuleInfo


@dataclass
class ModuleRef:
    module: ModuleInfo


@dataclass
class External:
    """A name that resolves outside the source tree (torch, transformers, os, ...)."""

    dotted: str


class Args:
    """The server args as the log printed them; missing fields fall back to source defaults."""

    def __init__(self, ev: Evaluator, values: Mapping) -> None:
        self.ev = ev
        self.values = values

    def get(self, name: str):
        ev = self.ev
        if name in ev.shadowed:
            return _unknown(name, "is the flag being explained; the log has only its final value")
        if name in self.values:
            return wrap(self.values[name], f"server_args.{name}", ev.registry)
        return ev.default_of(name)

    def __repr__(self) -> str:
        return "<server_args>"


class ModelCfg:
    """`ModelConfig` for this model, its attributes computed from ModelConfig's own source."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev

    def get(self, name: str):
        return self.ev.model_attr(name)

    def __repr__(self) -> str:
        return "<ModelConfig>"


# --------------------------------------------------------------------------- rendering


def render(value) -> str:
    if isinstance(value, Unknown):
        return "?"
    if isinstance(value, OriginList):
        return value.name
    if isinstance(value, (FuncRef, ClassRef)):
        return getattr(value.node, "name", "<lambda>")
    if isinstance(value, External):
        return value.dotted
    if isinstance(value, ModuleRef):
        return value.module.path
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def dotted(node: ast.AST) -> str:
    """`a.b.c` for Name/Attribute chains, else the source text."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{dotted(node.func)}()"
    return ast.unparse(node)


# --------------------------------------------------------------------------- modules


@dataclass
class ModuleInfo:
    path: str  # relative to the package root, e.g. "srt/server_args.py"
    display: str  # with the package, e.g. "sglang/srt/server_args.py"
    dotted: str  # "sglang.srt.server_args"
    text: str
    tree: ast.Module
    lines: list[str] = field(repr=False, default_factory=list)
    _globals: dict | None = field(default=None, repr=False)
    _growth: dict | None = field(default=None, repr=False)

    def where(self, node_or_line) -> str:
        line = node_or_line if isinstance(node_or_line, int) else node_or_line.lineno
        return f"{self.display}:{line}"

    @property
    def bindings(self) -> dict[str, ast.AST]:
        if self._globals is None:
            self._globals, self._growth = _collect_globals(self.tree)
        return self._globals

    @property
    def growth(self) -> dict[str, list[tuple[int, str]]]:
        self.bindings  # noqa: B018 - fills _growth
        return self._growth or {}

    def cls(self, name: str) -> ast.ClassDef | None:
        node = self.bindings.get(name)
        return node if isinstance(node, ast.ClassDef) else None


def _collect_globals(tree: ast.Module) -> tuple[dict, dict]:
    """Top-level bindings (last wins; ones nested in if/try only fill gaps) and list growth."""
    top: dict[str, ast.AST] = {}
    nested: dict[str, ast.AST] = {}
    growth: dict[str, list[tuple[int, str]]] = {}
    for stmt, depth, guard in _module_statements(tree.body, 0, None):
        target = top if depth == 0 else nested
        for name, node in _bound_names(stmt):
            target[name] = node
        _note_growth(stmt, guard, growth)
    return {**nested, **top}, growth


def _module_statements(body: list[ast.stmt], depth: int, guard: ast.If | None):
    for stmt in body:
        yield stmt, depth, guard
        if isinstance(stmt, (ast.If, ast.Try)):
            inner = stmt if isinstance(stmt, ast.If) else guard
            for block in (stmt.body, stmt.orelse, getattr(stmt, "finalbody", [])):
                yield from _module_statements(block, depth + 1, inner)
            for handler in getattr(stmt, "handlers", []):
                yield from _module_statements(handler.body, depth + 1, guard)


def _bound_names(stmt: ast.stmt):
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


def _note_growth(stmt: ast.stmt, guard: ast.If | None, growth: dict) -> None:
    """Module-level `LIST.append(...)`: a list read from the source may not be the whole story."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("append", "extend", "insert")
        and isinstance(call.func.value, ast.Name)
    ):
        when = f" when `{_short(guard.test)}`" if guard is not None else ""
        growth.setdefault(call.func.value.id, []).append((call.lineno, when))


class Modules:
    """Parsed modules of one source tree, each read once (the tree may be remote)."""

    def __init__(
        self,
        read_text: Callable[[str], str],
        package: str,
        list_files: Callable[[str], list[str]] | None = None,
    ) -> None:
        self._read = read_text
        self.package = package
        self._list = list_files
        self._cache: dict[str, ModuleInfo | None] = {}
        self._fields: list[str] | None = None

    def field_files(self) -> list[str]:
        """Modules that declare ServerArgs fields outside server_args.py (sglang 0.5.2x)."""
        if self._fields is None:
            self._fields = self._list("srt/arg_groups/fields/*.py") if self._list else []
        return self._fields

    def get(self, path: str) -> ModuleInfo | None:
        if path not in self._cache:
            self._cache[path] = self._load(path)
        return self._cache[path]

    def _load(self, path: str) -> ModuleInfo | None:
        try:
            text = self._read(path)
            tree = ast.parse(text)
        except (SourceFileNotFound, SyntaxError, ValueError):
            return None
        stem = path[: -len("/__init__.py")] if path.endswith("/__init__.py") else path[: -len(".py")]
        mod_dotted = ".".join([self.package, *stem.split("/")])
        return ModuleInfo(path, f"{self.package}/{path}", mod_dotted, text, tree, text.split("\n"))

    def find(self, mod_dotted: str) -> ModuleInfo | None:
        head, _, rest = mod_dotted.partition(".")
        if head != self.package:
            return None
        base = rest.replace(".", "/")
        if not base:
            return self.get("__init__.py")
        return self.get(base + ".py") or self.get(base + "/__init__.py")

    def resolve_from(self, module: ModuleInfo, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = module.dotted.split(".")
        keep = parts if module.path.endswith("__init__.py") else parts[:-1]
        keep = keep[: len(keep) - (node.level - 1)]
        return ".".join(keep + ([node.module] if node.module else []))


# --------------------------------------------------------------------------- environments


class Thunk:
    """A memoized computation; replays the notes it produced on every read."""

    __slots__ = ("fn", "value", "notes", "state", "line")

    def __init__(self, fn: Callable[[], object], line: int | None = None) -> None:
        self.fn = fn
        self.value = None
        self.notes: list[str] = []
        self.state = 0  # 0 new, 1 running, 2 done
        self.line = line

    def force(self, ev: Evaluator):
        if self.state == 1:
            return _unknown("a value", "depends on itself (cycle)")
        if self.state == 0:
            self.state = 1
            ev.notes.append([])
            try:
                self.value = self.fn()
            finally:
                self.notes = ev.notes.pop()
                self.state = 2
        ev.note(*self.notes)
        return self.value


def const(value, line: int | None = None) -> Thunk:
    thunk = Thunk(lambda: value, line)
    thunk.value, thunk.state = value, 2
    return thunk


@dataclass
class Scope:
    module: ModuleInfo
    cls: ast.ClassDef | None = None
    self_name: str | None = None
    depth: int = 0
    follow: bool = False  # interpret calls into the tree (model-config code), not just read args


@dataclass
class Env:
    vars: dict[str, Thunk]
    scope: Scope

    def with_vars(self, **updates: Thunk) -> Env:
        return Env({**self.vars, **updates}, self.scope)


# --------------------------------------------------------------------------- evaluator


class Evaluator:
    """Evaluates guard expressions against server args and a model's config.json."""

    def __init__(
        self,
        modules: Modules,
        values: Mapping | None,
        model_config: Mapping | None,
        shadowed: set[str] = frozenset(),
    ) -> None:
        self.modules = modules
        self.registry: dict[int, Cfg] = {}
        self.args = Args(self, values or {})
        self.config = wrap(dict(model_config), "config.json", self.registry) if model_config else None
        self.model = ModelCfg(self)
        self.shadowed = set(shadowed)
        self.notes: list[list[str]] = [[]]
        self._model_state: Env | None = None
        self._defaults: dict[str, object] | None = None
        self._global_memo: dict[tuple[str, str], object] = {}

    # ---- notes

    def note(self, *texts: str) -> None:
        self.notes[-1].extend(texts)

    def collect(self, fn: Callable[[], object]) -> tuple[object, list[str]]:
        """Run fn, returning its value and the lookups it made (deduplicated, in order)."""
        self.notes.append([])
        try:
            value = fn()
        finally:
            notes = self.notes.pop()
        return value, list(dict.fromkeys(notes))

    # ---- entry points

    def lazy(self, fn: Callable[[], object], line: int | None = None) -> Thunk:
        return Thunk(fn, line)

    def initial_env(self, module: ModuleInfo, func: ast.AST, cls: ast.ClassDef | None) -> Env:
        """The function's parameters: the first one is the server args when it looks like them."""
        params = _param_names(func)
        env = Env({}, Scope(module, cls, params[0] if cls is not None and params else None))
        for i, name in enumerate(params):
            env.vars[name] = const(self._param_value(name, i, cls))
        return env

    def _param_value(self, name: str, index: int, cls: ast.ClassDef | None):
        if (
            "server_args" in name
            or (index == 0 and cls is not None and name == "self" and "Args" in cls.name)
            or (index == 0 and cls is None and name in ("args", "cfg"))
        ):
            return self.args
        return _unknown(name, "is a parameter; its value at the call is not known")

    # ---- expressions

    def ev(self, node: ast.AST, env: Env):
        method = getattr(self, "_ev_" + type(node).__name__, None)
        if method is None:
            return _unknown(_short(node), f"{type(node).__name__} is not evaluated")
        return method(node, env)

    def _ev_Constant(self, node: ast.Constant, env: Env):
        return node.value

    def _ev_Name(self, node: ast.Name, env: Env):
        if node.id in env.vars:
            return env.vars[node.id].force(self)
        return self.global_value(env.scope.module, node.id)

    def _ev_Attribute(self, node: ast.Attribute, env: Env):
        if isinstance(node.value, ast.Name):
            key = f"{node.value.id}.{node.attr}"
            if key in env.vars:
                return env.vars[key].force(self)
        return self.attr(self.ev(node.value, env), node.attr, node)

    def attr(self, obj, name: str, node: ast.AST | None = None):
        if isinstance(obj, Unknown):
            return opaque(obj)
        if isinstance(obj, (Cfg, Args, ModelCfg)):
            return obj.get(name)
        if isinstance(obj, ModuleRef):
            return self.global_value(obj.module, name)
        if isinstance(obj, ClassRef):
            return self.class_attr(obj, name)
        if isinstance(obj, External):
            return External(f"{obj.dotted}.{name}")
        if isinstance(obj, Mapping) and name in obj:  # snapshot dicts read as objects
            return wrap(obj[name], name, self.registry)
        subject = _short(node) if node is not None else name
        return _unknown(subject, f"cannot read .{name} of {type(obj).__name__} {render(obj)}")

    def _ev_Subscript(self, node: ast.Subscript, env: Env):
        obj = self.ev(node.value, env)
        key = self.ev(node.slice, env)
        for v in (obj, key):
            if isinstance(v, Unknown):
                return opaque(v)
        if isinstance(obj, Cfg) and isinstance(key, str):
            return obj.get(key)
        try:
            return obj[key]
        except (TypeError, KeyError, IndexError):
            return _unknown(_short(node), "index not available")

    def _ev_Slice(self, node: ast.Slice, env: Env):
        parts = [self.ev(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)]
        bad = [p for p in parts if isinstance(p, Unknown)]
        return bad[0] if bad else slice(*parts)

    def _ev_BoolOp(self, node: ast.BoolOp, env: Env):
        want_and = isinstance(node.op, ast.And)
        pending: Unknown | None = None
        value = None
        for sub in node.values:
            value = self.ev(sub, env)
            t = truth(value)
            if isinstance(t, Unknown) and t.error:
                return t if pending is None else pending + t
            if isinstance(t, Unknown):
                pending = t if pending is None else pending + t
            elif t is not want_and:  # `and` stops at a falsy value, `or` at a truthy one
                # After an unknown operand the value may be that operand; only the truth is sure.
                return value if pending is None else Unknown(*pending.causes, truth=t)
        return pending if pending is not None else value

    def _ev_UnaryOp(self, node: ast.UnaryOp, env: Env):
        value = self.ev(node.operand, env)
        if isinstance(node.op, ast.Not):
            t = truth(value)
            return opaque(t) if isinstance(t, Unknown) else not t
        if isinstance(value, Unknown):
            return opaque(value)
        return _arith(type(node.op).__name__, value, None, node)

    def _ev_BinOp(self, node: ast.BinOp, env: Env):
        left, right = self.ev(node.left, env), self.ev(node.right, env)
        for v in (left, right):
            if isinstance(v, Unknown) or has_unknown(v):
                return opaque(v) if isinstance(v, Unknown) else _unknown(_short(node), "holds unknown items")
        return _arith(type(node.op).__name__, left, right, node)

    def _ev_IfExp(self, node: ast.IfExp, env: Env):
        t = truth(self.ev(node.test, env))
        if isinstance(t, Unknown):
            a, b = self.ev(node.body, env), self.ev(node.orelse, env)
            return a if _same(a, b) else t
        return self.ev(node.body if t else node.orelse, env)

    def _ev_Compare(self, node: ast.Compare, env: Env):
        left = self.ev(node.left, env)
        pending: Unknown | None = None
        for op, comp in zip(node.ops, node.comparators, strict=False):
            right = self.ev(comp, env)
            result = self.compare(op, left, right, node)
            if isinstance(result, Unknown):
                pending = result if pending is None else pending + result
            elif not result:
                return False
            left = right
        return pending if pending is not None else True

    def compare(self, op: ast.cmpop, left, right, node: ast.AST):
        for v in (left, right):
            if isinstance(v, Unknown):
                return opaque(v)
            if isinstance(v, External):
                return _unknown(v.dotted, "outside the sglang source; not evaluated")
        name = type(op).__name__
        if name in ("In", "NotIn"):
            return self._membership(left, right, name == "In", node)
        if has_unknown(left) or has_unknown(right):  # `[x] == [1]` with x unknown
            return _unknown(_short(node), "compares containers holding unknown items")
        try:
            return _COMPARE[name](left, right)
        except TypeError:
            return Unknown(
                (_short(node), f"Python cannot compare {render(left)} with {render(right)}"), error=True
            )

    def _membership(self, item, container, positive: bool, node: ast.AST):
        if isinstance(container, Cfg):
            found = container.has(item) if isinstance(item, str) else False
        elif isinstance(container, (list, tuple, set, frozenset, dict, str)):
            if has_unknown(item):
                return _unknown(_short(node), "searches for an unknown value")
            try:
                found = item in container
            except TypeError:
                return _unknown(_short(node), "membership test on unhashable value")
            if not found and has_unknown(container):
                return _unknown(_short(node), f"{render(item)} is not among the known items")
        else:
            return _unknown(_short(node), f"cannot search {render(container)}")
        if isinstance(container, OriginList):
            self.note(f"{_plain(item)} is {'' if found else 'not '}in {container.label}")
        return found if positive else not found

    def _ev_List(self, node: ast.List, env: Env):
        return self._sequence(node.elts, env)

    def _ev_Tuple(self, node: ast.Tuple, env: Env):
        seq = self._sequence(node.elts, env)
        return seq if isinstance(seq, Unknown) else tuple(seq)

    def _ev_Set(self, node: ast.Set, env: Env):
        seq = self._sequence(node.elts, env)
        try:
            return seq if isinstance(seq, Unknown) else set(seq)
        except TypeError:
            return _unknown(_short(node), "set of unhashable values")

    def _sequence(self, elts: list[ast.expr], env: Env):
        out: list = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                inner = self.ev(elt.value, env)
                if not isinstance(inner, (list, tuple, set)):
                    return inner if isinstance(inner, Unknown) else _unknown(_short(elt), "cannot unpack")
                out.extend(inner)
            else:
                # An unknown element keeps its place: membership of other items stays decidable.
                out.append(self.ev(elt, env))
        return out

    def _ev_Dict(self, node: ast.Dict, env: Env):
        out = {}
        for k, v in zip(node.keys, node.values, strict=False):
            key = self.ev(k, env) if k is not None else None
            if k is None or isinstance(key, Unknown):
                return _unknown(_short(node), "dict with computed keys")
            out[key] = self.ev(v, env)
        return out

    def _ev_Lambda(self, node: ast.Lambda, env: Env):
        return FuncRef(node, env.scope.module, env, cls=env.scope.cls)

    def _ev_GeneratorExp(self, node, env: Env):
        return self._comprehension(node, env)

    _ev_ListComp = _ev_GeneratorExp
    _ev_SetComp = _ev_GeneratorExp

    def _comprehension(self, node, env: Env, sources: list | None = None):
        envs = [env]
        for gen in node.generators:
            envs = self._expand_generator(gen, envs, sources)
            if isinstance(envs, Unknown):
                return envs
        return [self.ev(node.elt, e) for e in envs]

    def _expand_generator(self, gen: ast.comprehension, envs: list[Env], sources: list | None):
        out: list[Env] = []
        for e in envs:
            items = self.ev(gen.iter, e)
            if isinstance(items, Cfg):
                items = list(items.data)
            if not isinstance(items, (list, tuple, set, dict, str)) or len(items) > _MAX_SEQ:
                return (
                    items if isinstance(items, Unknown) else _unknown(_short(gen.iter), "not iterable here")
                )
            if sources is not None and isinstance(items, OriginList):
                sources.append(items)
            for item in items:
                bound = self._bind(gen.target, item, e)
                if isinstance(bound, Unknown):
                    return bound
                keep = [truth(self.ev(cond, bound)) for cond in gen.ifs]
                if any(isinstance(k, Unknown) for k in keep):
                    return next(k for k in keep if isinstance(k, Unknown))
                if all(keep):
                    out.append(bound)
        return out

    def _bind(self, target: ast.AST, value, env: Env):
        if isinstance(target, ast.Name):
            return env.with_vars(**{target.id: const(value)})
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Unknown) or not isinstance(value, (list, tuple)):
                return _unknown(_short(target), "cannot unpack")
            if len(value) != len(target.elts):
                return _unknown(_short(target), "unpacks a different number of values")
            for sub, item in zip(target.elts, value, strict=False):
                env = self._bind(sub, item, env)
                if isinstance(env, Unknown):
                    return env
            return env
        return _unknown(_short(target), "unsupported loop target")

    def _ev_JoinedStr(self, node: ast.JoinedStr, env: Env):
        return _unknown(_short(node), "f-string not evaluated")

    # ---- calls

    def _ev_Call(self, node: ast.Call, env: Env):
        func = node.func
        if isinstance(func, ast.Name) and func.id in _BUILTINS and not self._shadowed_name(func.id, env):
            return self._builtin(func.id, node, env)
        if isinstance(func, ast.Attribute):
            owner = self.ev(func.value, env)
            return self._method_call(owner, func.attr, node, env)
        if isinstance(func, ast.Name) and func.id not in env.vars and not env.scope.follow:
            early = self._opaque_global_call(func.id, node, env)
            if early is not None:
                return early
        return self.call(self.ev(func, env), node, env)

    def _opaque_global_call(self, name: str, node: ast.Call, env: Env):
        """A module-level call with nothing from config.json in its arguments: unknown, unread."""
        args, kwargs = self._args(node, env)
        if name.endswith("_view") or "model_config" in name:
            return self._accessor(name, args or [])
        if args is None or any(isinstance(v, (Cfg, ModelCfg)) for v in [*args, *kwargs.values()]):
            return None
        return _unknown(f"{name}()", _why_call(name))

    def _shadowed_name(self, name: str, env: Env) -> bool:
        return name in env.vars or name in env.scope.module.bindings

    def _args(self, node: ast.Call, env: Env):
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                return None, None
            args.append(self.ev(a, env))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None, None
            kwargs[kw.arg] = self.ev(kw.value, env)
        return args, kwargs

    def _builtin(self, name: str, node: ast.Call, env: Env):
        if name in ("any", "all") and len(node.args) == 1:
            return self._any_all(name, node.args[0], env)
        args, kwargs = self._args(node, env)
        if args is None:
            return _unknown(_short(node), "call with *args/**kwargs")
        if name in ("hasattr", "getattr"):
            return self._getattr(name, args, node)
        if name == "isinstance" and len(node.args) == 2:
            return _isinstance(args[0], node.args[1], node)
        for v in [*args, *kwargs.values()]:
            if isinstance(v, Unknown):
                return opaque(v)
            if has_unknown(v) and name != "len":
                return _unknown(_short(node), f"{name}() over unknown items")
        if name == "callable":
            return bool(args) and isinstance(args[0], (FuncRef, ClassRef))
        if name == "bool":
            return truth(args[0]) if args else False
        try:
            return _BUILTINS[name](*args, **kwargs)
        except Exception:  # noqa: BLE001 - a wrong call is an unknown, not a crash
            return _unknown(_short(node), f"{name}() failed on these values")

    def _getattr(self, name: str, args: list, node: ast.Call):
        if len(args) < 2 or isinstance(args[1], Unknown) or not isinstance(args[1], str):
            return _unknown(_short(node), f"{name}() with a computed name")
        obj, attr = args[0], args[1]
        if isinstance(obj, Unknown):
            return opaque(obj)
        if isinstance(obj, Cfg):
            found = obj.has(attr)
            if found and name == "hasattr":
                self.note(f"{obj.label} has `{attr}`")
            if name == "hasattr":
                return found
            return obj.get(attr, *args[2:3])
        if obj is None:
            return (
                False if name == "hasattr" else (args[2] if len(args) > 2 else _unknown(attr, "read on None"))
            )
        value = self.attr(obj, attr, node)
        if name == "hasattr":
            return value if isinstance(value, Unknown) else True
        return value

    def _any_all(self, name: str, arg: ast.expr, env: Env):
        sources: list[OriginList] = []
        if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
            values = self._comprehension(arg, env, sources)
        else:
            values = self.ev(arg, env)
        if isinstance(values, Unknown):
            return values
        truths = [truth(v) for v in values]
        known = [t for t in truths if not isinstance(t, Unknown)]
        unknowns = [t for t in truths if isinstance(t, Unknown)]
        decided = (True in known) if name == "any" else (False in known)
        if decided:
            result = name == "any"
        elif unknowns:
            return sum(unknowns[1:], unknowns[0])
        else:
            result = name == "all"
        self._note_scan(arg, values, truths, sources, result, env)
        return result

    def _note_scan(self, arg, values, truths, sources, result, env: Env) -> None:
        """Say which entry of a source-defined list matched, as `x is in LIST (file:line)`."""
        if not sources or not isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
            return
        src = sources[0]
        if result:
            hit = next(i for i, t in enumerate(truths) if t is True)
            self.note(f"{_plain(src[hit])} is in {src.label}")
            return
        other = _other_side(arg, env, self)
        what = f"none of {_plain(other)}" if other is not None else "no entry"
        self.note(f"{what} is in {src.label}")

    def _method_call(self, owner, name: str, node: ast.Call, env: Env):
        if isinstance(owner, Unknown):
            why = _why_call(dotted(node.func))
            return owner if why == _WHY_DEFAULT else _unknown(f"{dotted(node.func)}()", why)
        if isinstance(owner, Args):
            return self._args_method(name, node)
        if isinstance(owner, ModelCfg):
            return self._bound_method(self._model_class(), owner, name, node, env)
        if isinstance(owner, (str, list, tuple, dict)) and name in _SAFE_METHODS.get(type(owner), ()):
            args, kwargs = self._args(node, env)
            if args is None or any(isinstance(a, Unknown) for a in [*args, *kwargs.values()]):
                return _unknown(_short(node), "arguments not known")
            try:
                return getattr(owner, name)(*args, **kwargs)
            except Exception:  # noqa: BLE001
                return _unknown(_short(node), f".{name}() failed on these values")
        if isinstance(owner, Cfg) and name == "get":
            args, _ = self._args(node, env)
            return owner.get(*args) if args and isinstance(args[0], str) else _unknown(_short(node), "get()")
        if isinstance(owner, (ModuleRef, ClassRef, External)):
            return self.call(self.attr(owner, name, node.func), node, env)
        return _unknown(f"{dotted(node.func)}()", f"method of {type(owner).__name__} not evaluated")

    def _args_method(self, name: str, node: ast.Call):
        if "model_config" in name:
            return self.model_or_unknown()
        return _unknown(f"{dotted(node.func)}()", "a ServerArgs method; not evaluated")

    def _bound_method(self, cls: ClassRef | None, owner, name: str, node: ast.Call, env: Env):
        method = _method(cls.node, name) if cls else None
        if method is None:
            return _unknown(f"{dotted(node.func)}()", "method not found in the source")
        return self.call(FuncRef(method, cls.module, bound=owner, cls=cls.node), node, env)

    def call(self, callee, node: ast.Call, env: Env):
        label = f"{dotted(node.func)}()"
        if isinstance(callee, (FuncRef, External)):
            args, _ = self._args(node, env)
            name = callee.name if isinstance(callee, FuncRef) else callee.dotted.rsplit(".", 1)[-1]
            special = self._accessor(name, args or [])
            if special is not None:
                return special
        if isinstance(callee, Unknown):
            return callee
        if isinstance(callee, FuncRef):
            return self._call_function(callee, node, env, label)
        if isinstance(callee, External):
            return _unknown(label, _why_call(callee.dotted))
        if isinstance(callee, ClassRef):
            return _unknown(label, "constructs an object; not evaluated")
        return _unknown(label, f"{render(callee)} is not callable here")

    def _call_function(self, fn: FuncRef, node: ast.Call, env: Env, label: str):
        args, kwargs = self._args(node, env)
        if args is None:
            return _unknown(label, "call with *args/**kwargs")
        if not self._may_interpret(fn, args, kwargs, env):
            return _unknown(label, _why_call(fn.name))
        if env.scope.depth >= _MAX_DEPTH:
            return _unknown(label, "calls nested too deep to follow")
        return self.invoke(fn, args, kwargs, env.scope.depth + 1, env.scope.follow)

    def _accessor(self, name: str, args: list):
        """SGLang's accessors over server args: `*_view(args)` reads them, `*model_config*` builds one."""
        if len(args) != 1 or not isinstance(args[0], Args):
            return None
        if name.endswith("_view"):
            return args[0]
        if "model_config" in name:
            return self.model_or_unknown()
        return None

    def _may_interpret(self, fn: FuncRef, args, kwargs, env: Env) -> bool:
        # Follow definitions only where the answer comes from config.json; other calls
        # (hardware, files, network) would need the live server.
        if isinstance(fn.node, ast.Lambda) or env.scope.follow:
            return True
        return any(isinstance(v, (Cfg, ModelCfg)) for v in [*args, *kwargs.values()])

    def invoke(self, fn: FuncRef, args: list, kwargs: dict, depth: int, follow: bool = True):
        follow = follow if isinstance(fn.node, ast.Lambda) else True
        scope = Scope(fn.module, fn.cls, None, depth, follow)
        base = fn.closure.vars if fn.closure is not None else {}
        env = Env(dict(base), scope)
        bound = self._bind_params(fn, args, kwargs, env)
        if isinstance(bound, Unknown):
            return bound
        if isinstance(fn.node, ast.Lambda):
            return self.ev(fn.node.body, bound)
        out = self.run_block(fn.node.body, bound)
        return self._result(out)

    def _result(self, env: Env):
        ret = env.vars.get(_RET)
        done = env.vars.get(_DONE)
        if ret is None:
            return None
        if done is None:
            return ret.force(self)
        d = truth(done.force(self))
        if isinstance(d, Unknown):
            value = ret.force(self)
            return value if value is None else d
        return ret.force(self) if d else None

    def _bind_params(self, fn: FuncRef, args: list, kwargs: dict, env: Env):
        spec = fn.node.args
        positional = [*spec.posonlyargs, *spec.args]
        if fn.bound is not None and positional:
            env.scope.self_name = positional[0].arg
            env.vars[positional[0].arg] = const(fn.bound)
            positional = positional[1:]
        defaults = dict(
            zip(
                [a.arg for a in positional][len(positional) - len(spec.defaults) :],
                spec.defaults,
                strict=False,
            )
        )
        defaults.update(
            {a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=False) if d is not None}
        )
        if len(args) > len(positional) and spec.vararg is None:
            return _unknown(f"{fn.name}()", "called with too many arguments")
        values = dict(zip([a.arg for a in positional], args, strict=False))
        values.update(kwargs)
        for a in [*positional, *spec.kwonlyargs]:
            if a.arg in values:
                env.vars[a.arg] = const(values[a.arg])
            elif a.arg in defaults:
                env.vars[a.arg] = const(self.ev(defaults[a.arg], Env({}, Scope(fn.module))))
            else:
                return _unknown(f"{fn.name}()", f"missing argument {a.arg}")
        return env

    # ---- statements (lazy)

    def run_block(self, stmts: list[ast.stmt], env: Env) -> Env:
        """The environment after `stmts`: each name maps to a thunk, gated on earlier returns."""
        for stmt in stmts:
            done = env.vars.get(_DONE)
            if done is not None and done.state == 2 and done.value is True:
                break
            after = self.step(stmt, env)
            env = after if done is None else self._gate_done(done, env, after)
        return env

    def _gate_done(self, done: Thunk, before: Env, after: Env) -> Env:
        changed = {k: t for k, t in after.vars.items() if before.vars.get(k) is not t}
        merged = dict(before.vars)
        for key, thunk in changed.items():
            old = before.vars.get(key) or self._prior(key, before)
            merged[key] = self.choose(done, old, thunk, self._logged(key, before))
        return Env(merged, after.scope)

    def choose(self, test: Thunk, if_true: Thunk, if_false: Thunk, logged: str | None = None) -> Thunk:
        """Pick a branch's value; when the test is unknown, a field the log shows wins."""

        def pick():
            t = truth(test.force(self))
            if isinstance(t, Unknown):
                a, b = if_true.force(self), if_false.force(self)
                if _same(a, b):
                    return a
                if logged is not None:
                    where = f" (line {test.line})" if test.line else ""
                    self.note(f"{logged} is set conditionally{where}, so its value from the log is used")
                    return self.args.get(logged)
                return t
            return (if_true if t else if_false).force(self)

        return Thunk(pick, if_true.line or if_false.line)

    def _prior(self, key: str, env: Env) -> Thunk:
        """The value of `key` before a branch that may set it: `self.x` reads the object itself."""
        base, _, name = key.partition(".")
        if name and base in env.vars:
            holder = env.vars[base]
            return self.lazy(lambda: self.attr(holder.force(self), name))
        return const(_default_for(key))

    def _logged(self, key: str, env: Env) -> str | None:
        """The server-args field behind `self.X` when the log has it (and it is not the flag itself)."""
        base, _, name = key.partition(".")
        holder = env.vars.get(base) if name and "." not in name else None
        if holder is None or holder.state != 2 or not isinstance(holder.value, Args):
            return None
        return name if name in self.args.values and name not in self.shadowed else None

    def step(self, stmt: ast.stmt, env: Env) -> Env:
        handler = getattr(self, "_st_" + type(stmt).__name__, None)
        return handler(stmt, env) if handler else env

    def _st_Assign(self, stmt: ast.Assign, env: Env) -> Env:
        value = self.lazy(lambda: self.ev(stmt.value, env), stmt.lineno)
        out = Env(dict(env.vars), env.scope)
        for target in stmt.targets:
            self._assign(target, value, out, stmt.lineno)
        return out

    def _st_AnnAssign(self, stmt: ast.AnnAssign, env: Env) -> Env:
        if stmt.value is None:
            return env
        value = self.lazy(lambda: self.ev(stmt.value, env), stmt.lineno)
        out = Env(dict(env.vars), env.scope)
        self._assign(stmt.target, value, out, stmt.lineno)
        return out

    def _st_AugAssign(self, stmt: ast.AugAssign, env: Env) -> Env:
        out = Env(dict(env.vars), env.scope)
        fake = ast.BinOp(left=_as_load(stmt.target), op=stmt.op, right=stmt.value)
        ast.copy_location(fake, stmt)
        self._assign(stmt.target, self.lazy(lambda: self.ev(fake, env), stmt.lineno), out, stmt.lineno)
        return out

    def _assign(self, target: ast.AST, value: Thunk, out: Env, line: int) -> None:
        key = _target_key(target, out.scope)
        if key is not None:
            if not (key.endswith(".hf_config") and _is_model_config(out.scope)):  # config.json is given
                out.vars[key] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            for i, sub in enumerate(target.elts):
                self._assign(sub, self.lazy(lambda i=i: _item(value.force(self), i), line), out, line)

    def _st_If(self, stmt: ast.If, env: Env) -> Env:
        test = self.lazy(lambda: self.ev(stmt.test, env), stmt.lineno)
        body = self.run_block(stmt.body, env)
        other = self.run_block(stmt.orelse, env)
        return self.merge(test, env, body, other)

    def merge(self, test: Thunk, env: Env, body: Env, other: Env) -> Env:
        keys = {k for k, t in body.vars.items() if env.vars.get(k) is not t}
        keys |= {k for k, t in other.vars.items() if env.vars.get(k) is not t}
        out = dict(env.vars)
        for key in keys:
            fallback = env.vars.get(key) or self._prior(key, env)
            out[key] = self.choose(
                test, body.vars.get(key, fallback), other.vars.get(key, fallback), self._logged(key, env)
            )
        return Env(out, env.scope)

    def _st_Return(self, stmt: ast.Return, env: Env) -> Env:
        value = self.lazy(lambda: self.ev(stmt.value, env) if stmt.value else None, stmt.lineno)
        return env.with_vars(**{_RET: value, _DONE: const(True)})

    def _st_Raise(self, stmt: ast.Raise, env: Env) -> Env:
        return env.with_vars(
            **{_RET: const(_unknown("raise", f"raises at line {stmt.lineno}")), _DONE: const(True)}
        )

    def _st_With(self, stmt: ast.With, env: Env) -> Env:
        return self.run_block(stmt.body, env)

    def _st_Try(self, stmt: ast.Try, env: Env) -> Env:
        # The normal path: no exception. A handler's assignments are ignored.
        return self.run_block([*stmt.body, *stmt.orelse], env)

    def _st_For(self, stmt: ast.stmt, env: Env) -> Env:
        """A `for` over a known, short sequence is unrolled (lazily); other loops poison what they set."""
        keys = {k for s in stmt.body + stmt.orelse for k in _assigned_keys(s, env.scope)}
        if isinstance(stmt, ast.For):
            keys |= set(_assigned_keys(ast.Assign(targets=[stmt.target], value=stmt.iter), env.scope))
        if any(isinstance(n, ast.Return) for s in stmt.body for n in ast.walk(s)):
            keys |= {_RET, _DONE}
        unrolled = self.lazy(lambda: self._unroll(stmt, env), stmt.lineno)

        def read(key: str):
            out = unrolled.force(self)
            if isinstance(out, Unknown):
                return out
            thunk = out.vars.get(key) or env.vars.get(key)
            return thunk.force(self) if thunk is not None else _default_for(key)

        return env.with_vars(**{k: self.lazy(lambda k=k: read(k), stmt.lineno) for k in keys})

    def _unroll(self, stmt: ast.stmt, env: Env):
        why = _unknown(f"loop at line {stmt.lineno}", "assigned inside a loop; not followed")
        if not isinstance(stmt, ast.For) or _has_jump(stmt.body):
            return why
        items = self.ev(stmt.iter, env)
        if isinstance(items, Cfg):
            items = list(items.data)
        if not isinstance(items, (list, tuple, set, dict, str)) or len(items) > _MAX_SEQ:
            return items if isinstance(items, Unknown) else why
        for item in items:
            bound = self._bind(stmt.target, item, env)
            if isinstance(bound, Unknown):
                return bound
            env = self.run_block(stmt.body, bound)
        return self.run_block(stmt.orelse, env)

    _st_While = _st_For
    _st_AsyncFor = _st_For

    def _st_FunctionDef(self, stmt: ast.FunctionDef, env: Env) -> Env:
        return env.with_vars(**{stmt.name: const(FuncRef(stmt, env.scope.module, env, cls=env.scope.cls))})

    def _st_ImportFrom(self, stmt: ast.ImportFrom, env: Env) -> Env:
        out = env.with_vars()
        for alias in stmt.names:
            if alias.name != "*":
                name = alias.asname or alias.name
                out.vars[name] = self.lazy(
                    lambda a=alias: self._imported(env.scope.module, stmt, a.name), stmt.lineno
                )
        return out

    def _st_Expr(self, stmt: ast.Expr, env: Env) -> Env:
        """`self._derive_x(...)`: run the method so the attributes it sets are visible."""
        call = stmt.value
        scope = env.scope
        mutated = _mutated_local(call, env)
        if mutated is not None:
            return env.with_vars(**{mutated: self.lazy(lambda: self._mutate(call, env), stmt.lineno)})
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == scope.self_name
            and scope.cls is not None
            and scope.depth < _MAX_DEPTH
        ):
            return env
        method = _method(scope.cls, call.func.attr)
        if method is None:
            return env
        return self._run_method(method, call, env)

    def _mutate(self, call: ast.Call, env: Env):
        """`items.append(x)` and friends on a local, as a new value; other mutations make it unknown."""
        name, method = call.func.value.id, call.func.attr
        old = env.vars[name].force(self)
        if not isinstance(old, (list, set, dict)):
            return old  # a config object: attributes set at runtime are not modelled
        args = [self.ev(a, env) for a in call.args]
        if len(args) == 1 and not isinstance(args[0], Unknown):
            if method == "append" and isinstance(old, list):
                return [*old, args[0]]
            if method == "extend" and isinstance(old, list) and isinstance(args[0], (list, tuple)):
                return [*old, *args[0]]
            if method == "add" and isinstance(old, set):
                return old | {args[0]}
        return _unknown(name, f"changed by .{method}() at line {call.lineno}")

    def _run_method(self, method: ast.FunctionDef, call: ast.Call, env: Env) -> Env:
        scope = env.scope
        inner = Env(
            {k: t for k, t in env.vars.items() if k.startswith(scope.self_name + ".")},
            Scope(scope.module, scope.cls, None, scope.depth + 1, scope.follow),
        )
        params = _param_names(method)
        if not params:
            return env
        inner.scope.self_name = params[0]
        inner.vars = {params[0] + k[len(scope.self_name) :]: t for k, t in inner.vars.items()}
        inner.vars[params[0]] = env.vars.get(scope.self_name, const(_unknown("self", "unbound")))
        for i, name in enumerate(params[1:]):
            inner.vars[name] = self._arg_thunk(call, i, name, method, env)
        out = self.run_block(method.body, inner)
        prefix = params[0] + "."
        updates = {
            scope.self_name + k[len(params[0]) :]: t
            for k, t in out.vars.items()
            if k.startswith(prefix) and inner.vars.get(k) is not t
        }
        return env.with_vars(**updates)

    def _arg_thunk(self, call: ast.Call, index: int, name: str, method: ast.FunctionDef, env: Env) -> Thunk:
        node = call.args[index] if index < len(call.args) else None
        node = node or next((kw.value for kw in call.keywords if kw.arg == name), None)
        if node is None:
            default = _param_default(method, name)
            if default is None:
                return const(_unknown(name, "parameter not passed"))
            return self.lazy(lambda: self.ev(default, Env({}, Scope(env.scope.module))))
        return self.lazy(lambda: self.ev(node, env))

    # ---- names across modules

    def global_value(self, module: ModuleInfo, name: str):
        key = (module.path, name)
        if key not in self._global_memo:
            self._global_memo[key] = _unknown(name, "depends on itself (cycle)")
            self._global_memo[key] = self._global_value(module, name)
        return self._global_memo[key]

    def _global_value(self, module: ModuleInfo, name: str):
        node = module.bindings.get(name)
        if node is None:
            star = self._from_star(module, name)
            if star is not None:
                return star
            return External(name) if name in _EXTERNAL_OK else _unknown(name, "not defined in the source")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return FuncRef(node, module)
        if isinstance(node, ast.ClassDef):
            return ClassRef(node, module)
        if isinstance(node, ast.ImportFrom):
            alias = next(a for a in node.names if (a.asname or a.name) == name)
            return self._imported(module, node, alias.name)
        if isinstance(node, ast.Import):
            return self._imported_module(node, name)
        value = self.ev(node.value, Env({}, Scope(module)))
        if isinstance(value, (list, tuple)) and not isinstance(value, OriginList):
            value = OriginList(value, name, module.where(node))
            for line, when in module.growth.get(name, ()):
                self.note(f"{name} is extended at import{when} ({module.display}:{line})")
        return value

    def _from_star(self, module: ModuleInfo, name: str):
        for stmt in module.tree.body:
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                target = self.modules.find(self.modules.resolve_from(module, stmt))
                if target is not None and (name in target.bindings):
                    return self.global_value(target, name)
        return None

    def _imported(self, module: ModuleInfo, node: ast.ImportFrom, name: str):
        source = self.modules.resolve_from(module, node)
        target = self.modules.find(source)
        if target is None:
            sub = self.modules.find(f"{source}.{name}")
            return ModuleRef(sub) if sub is not None else External(f"{source}.{name}")
        return self.global_value(target, name)

    def _imported_module(self, node: ast.Import, name: str):
        for alias in node.names:
            if (alias.asname or alias.name).split(".")[0] == name:
                target = self.modules.find(alias.name)
                return ModuleRef(target) if target is not None and alias.asname else External(name)
        return External(name)

    def class_attr(self, ref: ClassRef, name: str):
        for stmt in ref.node.body:
            for bound, node in _bound_names(stmt):
                if bound == name:
                    if isinstance(node, (ast.Assign, ast.AnnAssign)):
                        return self.ev(node.value, Env({}, Scope(ref.module, ref.node)))
                    if isinstance(node, ast.FunctionDef):
                        return FuncRef(node, ref.module, cls=ref.node)
        return _unknown(f"{ref.node.name}.{name}", "not defined in the class body")

    # ---- server-args defaults

    def default_of(self, name: str):
        if self._defaults is None:
            self._defaults = self._load_defaults()
        if name not in self._defaults:
            return _unknown(name, "not in the snapshot")
        value, where = self._defaults[name]
        if isinstance(value, Unknown):
            return _unknown(name, "not in the snapshot (its default is computed)")
        self.note(f"{name} is not in the snapshot: its default {value!r} is used ({where})")
        return value

    def _load_defaults(self) -> dict[str, tuple[object, str]]:
        """Field defaults: ServerArgs' body, or (0.5.2x) the namespaces in arg_groups/fields/."""
        out: dict[str, tuple[object, str]] = {}
        module = self.modules.get("srt/server_args.py")
        classes = [(module, module.cls("ServerArgs"))] if module and module.cls("ServerArgs") else []
        for path in self.modules.field_files():
            mod = self.modules.get(path)
            classes += [(mod, c) for c in (mod.tree.body if mod else ()) if isinstance(c, ast.ClassDef)]
        for mod, cls in classes:
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                    out.setdefault(stmt.target.id, (self._literal(stmt.value, mod), mod.where(stmt)))
        return out

    def _literal(self, node: ast.expr, module: ModuleInfo):
        if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.UnaryOp)):
            return self.ev(node, Env({}, Scope(module)))
        return _unknown(ast.unparse(node)[:40], "computed")

    # ---- ModelConfig

    def model_or_unknown(self):
        if self.config is None:
            return _unknown("the model's config.json", "not given (pass model_config=)")
        return self.model

    def _model_class(self) -> ClassRef | None:
        module = self.modules.get("srt/configs/model_config.py")
        cls = module.cls("ModelConfig") if module else None
        return ClassRef(cls, module) if cls else None

    def model_attr(self, name: str):
        if name == "hf_config":
            return self.config
        state = self._state()
        if isinstance(state, Unknown):
            return state
        thunk = state.vars.get(f"self.{name}")
        if thunk is None:
            return _unknown(f"ModelConfig.{name}", "not set in ModelConfig.__init__ as read")
        value = thunk.force(self)
        if not isinstance(value, Unknown):
            where = state.scope.module.where(thunk.line) if thunk.line else state.scope.module.display
            self.note(f"ModelConfig.{name} = {render(value)} ({where})")
        return value

    def _state(self):
        if self._model_state is None:
            ref = self._model_class()
            if ref is None:
                return _unknown("ModelConfig", "class not found in srt/configs/model_config.py")
            self._model_state = self._build_model_state(ref)
        return self._model_state

    def _build_model_state(self, ref: ClassRef) -> Env:
        init = _method(ref.node, "__init__")
        scope = Scope(ref.module, ref.node, "self", 1, True)
        env = Env({"self": const(self.model), "self.hf_config": const(self.config)}, scope)
        passed = self._from_server_args(ref)
        for name in _param_names(init)[1:]:
            if name in passed:
                env.vars[name] = passed[name]
            else:
                default = _param_default(init, name)
                value = self.ev(default, Env({}, Scope(ref.module))) if default is not None else None
                env.vars[name] = const(value if default is not None else self.args.get(name))
        return self.run_block(init.body, env)

    def _from_server_args(self, ref: ClassRef) -> dict[str, Thunk]:
        """ModelConfig's keyword arguments as `from_server_args` fills them from the server args."""
        factory = _method(ref.node, "from_server_args")
        if factory is None:
            return {}
        found = _constructor_return(factory, ref.node.name)
        if found is None:
            return {}
        index, call = found
        params = _param_names(factory)
        env = Env({params[0]: const(self.args)} if params else {}, Scope(ref.module, None, None, 1, True))
        for p in params[1:]:
            default = _param_default(factory, p)
            env.vars[p] = const(self.ev(default, Env({}, Scope(ref.module))) if default is not None else None)
        # We are computing the path that reaches `return ModelConfig(...)`: earlier exits did not happen.
        straight = [
            s for s in factory.body[:index] if not any(isinstance(n, ast.Return) for n in ast.walk(s))
        ]
        env = self.run_block(straight, env)
        return {kw.arg: self.lazy(lambda v=kw.value: self.ev(v, env)) for kw in call.keywords if kw.arg}


# --------------------------------------------------------------------------- helpers


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(value) + "]"
    return render(value)


def _same(a, b) -> bool:
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return False
    if a is b:
        return True
    try:
        return type(a) is type(b) and isinstance(a, (str, int, float, bool, type(None), tuple)) and a == b
    except Exception:  # noqa: BLE001
        return False


_WHY_DEFAULT = "not evaluated (its result is not in the log)"


def _why_call(name: str) -> str:
    if _ENV.search(name):
        return "reads an environment variable of the server process, not in the log"
    if _PROBE.search(name):
        return "hardware probe, not in the log"
    if _FILES.search(name.rsplit(".", 1)[-1]):
        return "reads files on the server, not in the log"
    return _WHY_DEFAULT


def _other_side(gen, env: Env, ev: Evaluator):
    """In `any(x in OTHER for x in LIST)`, the value of OTHER (for a readable note)."""
    elt = gen.elt
    if isinstance(elt, ast.Compare) and len(elt.ops) == 1 and isinstance(elt.ops[0], ast.In):
        names = {n.id for g in gen.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        if not any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(elt.comparators[0])):
            value = ev.ev(elt.comparators[0], env)
            return None if isinstance(value, Unknown) else value
    return None


def _arith(op: str, left, right, node: ast.AST):
    try:
        if right is None:
            return {"USub": lambda: -left, "UAdd": lambda: +left, "Invert": lambda: ~left}[op]()
        return _BINOPS[op](left, right)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return _unknown(_short(node), "arithmetic not evaluated")


_BINOPS = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mult": lambda a, b: a * b,
    "Div": lambda a, b: a / b,
    "FloorDiv": lambda a, b: a // b,
    "Mod": lambda a, b: a % b if not isinstance(a, str) else _no_format(),
    "BitOr": lambda a, b: a | b,
    "BitAnd": lambda a, b: a & b,
}


def _no_format():
    raise TypeError("string formatting is not evaluated")


_COMPARE = {
    "Eq": lambda a, b: _eq(a, b),
    "NotEq": lambda a, b: not _eq(a, b),
    "Lt": lambda a, b: a < b,
    "LtE": lambda a, b: a <= b,
    "Gt": lambda a, b: a > b,
    "GtE": lambda a, b: a >= b,
    "Is": lambda a, b: a is b,
    "IsNot": lambda a, b: a is not b,
}


def _eq(a, b) -> bool:
    if isinstance(a, (Cfg, Args, ModelCfg)) or isinstance(b, (Cfg, Args, ModelCfg)):
        return a is b
    return a == b


_BUILTINS: dict[str, Callable] = {
    "len": len,
    "any": any,
    "all": all,
    "bool": bool,
    "hasattr": hasattr,
    "getattr": getattr,
    "callable": callable,
    "isinstance": isinstance,
    "min": min,
    "max": max,
    "str": str,
    "int": int,
    "float": float,
    "list": list,
    "tuple": tuple,
    "set": set,
    "sorted": sorted,
    "abs": abs,
}

_SAFE_METHODS = {
    str: {"startswith", "endswith", "lower", "upper", "strip", "split", "replace", "casefold"},
    list: {"index", "count"},
    tuple: {"index", "count"},
    dict: {"get", "keys", "values", "items"},
}

# Names used without import that we treat as outside objects rather than typos.
_EXTERNAL_OK = {"logger", "torch", "os", "envs", "json", "math", "copy"}


def _is_model_config(scope: Scope) -> bool:
    return scope.cls is not None and scope.cls.name == "ModelConfig"


_TYPES = {
    "dict": dict,
    "list": list,
    "tuple": tuple,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "set": set,
}


def _isinstance(value, types: ast.AST, node: ast.AST):
    """isinstance against builtin types; a config is a PretrainedConfig, never a dict."""
    if isinstance(value, Unknown):
        return value
    names = [n.id if isinstance(n, ast.Name) else dotted(n) for n in getattr(types, "elts", [types])]
    if isinstance(value, Cfg):
        return any(n.endswith("Config") for n in names)
    if isinstance(value, (Args, ModelCfg, External, FuncRef, ClassRef, ModuleRef)):
        return _unknown(_short(node), "isinstance() on a runtime object")
    return any(isinstance(value, _TYPES[n]) for n in names if n in _TYPES)


def _param_names(func: ast.AST) -> list[str]:
    spec = func.args
    return [a.arg for a in [*spec.posonlyargs, *spec.args, *spec.kwonlyargs]]


def _param_default(func: ast.AST, name: str) -> ast.expr | None:
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


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


def _constructor_return(func: ast.FunctionDef, cls_name: str):
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


def _target_key(target: ast.AST, scope: Scope) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == scope.self_name
    ):
        return f"{target.value.id}.{target.attr}"
    return None


_MUTATORS = {"append", "extend", "insert", "add", "update", "pop", "remove", "clear", "discard", "setdefault"}


def _mutated_local(call, env: Env) -> str | None:
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in _MUTATORS
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in env.vars
        and call.func.value.id != env.scope.self_name
    ):
        return call.func.value.id
    return None


def _has_jump(body: list[ast.stmt]) -> bool:
    """break/continue of this loop (not of a loop nested in it)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.Lambda)):
            todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
    return False


def _assigned_keys(stmt: ast.stmt, scope: Scope):
    for node in ast.walk(stmt):
        call = node.value if isinstance(node, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in _MUTATORS
            and isinstance(call.func.value, ast.Name)
        ):
            yield call.func.value.id
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    key = _target_key(sub, scope)
                    if key is not None and isinstance(getattr(sub, "ctx", None), ast.Store):
                        yield key


def _default_for(key: str):
    if key == _DONE:
        return False
    if key == _RET:
        return None
    return _unknown(key, "not set on every path")


def _item(value, index: int):
    if isinstance(value, Unknown):
        return value
    try:
        return value[index]
    except (TypeError, IndexError, KeyError):
        return _unknown(f"item {index}", "cannot unpack")


def _as_load(target: ast.AST) -> ast.AST:
    clone = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(clone, target)
