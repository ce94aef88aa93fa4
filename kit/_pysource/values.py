"""What the evaluator computes with: Unknown (with its reasons), configs read by attribute,
references to functions, classes and modules of the tree, and things outside it."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kit._text import clip

from .modules import ModuleInfo

PLAIN = (str, int, float, bool, type(None), list, tuple, set, frozenset, dict)
ENUM_REPR = re.compile(r"^<[\w.]+: (.+)>$")


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


def unknown(subject: str, why: str) -> Unknown:
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
        return unknown(value.dotted, "outside the sglang source; not evaluated")
    if isinstance(value, (Cfg, Args, ModelCfg)):
        return True
    if isinstance(value, Stated):
        return unknown(value.label, value.why)
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - a foreign __bool__ is not ours to trust
        return unknown(render(value), "has no truth value here")


class OriginList(list):
    """A list read from a module-level constant, so lookups can say where it lives."""

    def __init__(self, items, name: str, where: str) -> None:
        super().__init__(items)
        self.name = name
        self.where = where
        self.original_type = tuple if isinstance(items, tuple) else list

    @property
    def label(self) -> str:
        return f"{self.name} ({self.where})"


class Partial(dict):
    """An object of the source known only in part (`cuda_graph_config` at one point of the
    resolution: its prefill backend, nothing else); other attributes are unknown, for `why`."""

    def __init__(self, data: Mapping, why: str, note: str = "") -> None:
        super().__init__(data)
        self.why = why
        self.note = note  # what the evaluator says when the object is read


class Members:
    """A set known only for some items (`_cuda_graph_config_locked`: whether ("prefill", "backend")
    is in it); membership of any other item is unknown, for `why`."""

    def __init__(self, known: Mapping, label: str, why: str) -> None:
        self.known = dict(known)  # item -> True / False / Unknown
        self.label = label
        self.why = why

    def contains(self, item):
        if item in self.known:
            return self.known[item]
        return unknown(f"{render(item)} in {self.label}", self.why)

    def __repr__(self) -> str:
        return f"<{self.label}>"


class Stated:
    """An object of the running server known only by what the caller states about it: attributes
    (``"is_draft_worker"``) and the results of zero-argument methods (``"is_eagle()"``), each value
    plain data, an evaluator value or another Stated. Anything else read from it is unknown, with
    ``why`` (what would tell). ``label`` names it in the evaluator's notes; ``lookup``, when given,
    answers names the mapping lacks (a lazily computed object such as a runner's ``__init__`` state)."""

    def __init__(self, label: str, facts: Mapping | None = None, why: str = "not stated", lookup=None) -> None:
        self.label = label
        self.facts = dict(facts or {})
        self.why = why
        self.lookup = lookup

    def get(self, name: str):
        if name in self.facts:
            return self.facts[name]
        if self.lookup is not None:
            found = self.lookup(name)
            if found is not MISSING_FACT:
                return found
        return unknown(f"{self.label}.{name}", self.why)

    def call(self, name: str):
        return self.get(name + "()")

    def __repr__(self) -> str:
        return f"<{self.label}>"


MISSING_FACT = object()


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
            why = getattr(self.data, "why", None) or "not in the file (transformers may supply a default)"
            return unknown(f"{self.label}.{name}", why)
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
    if isinstance(value, PLAIN) or isinstance(value, (Cfg, Unknown, Members, EnumMember, Stated)):
        return value
    return opaque_value(value, label)


def opaque_value(value, label: str):
    text = getattr(value, "text", None)
    match = ENUM_REPR.match(text) if isinstance(text, str) else None
    if match:
        try:
            return ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            pass
    return unknown(label, f"logged as {str(text or value)[:50]!r}, not a value the kit can compare")


@dataclass(frozen=True)
class EnumMember:
    """``X = auto()`` in an Enum: no value the source states, but equal only to itself. ``ref`` (the
    enum's ClassRef, when known) lets its methods be read: ``SpeculativeAlgorithm.EAGLE.is_eagle()``."""

    cls: str
    name: str
    ref: object = field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:
        return f"{self.cls}.{self.name}"


@dataclass
class FuncRef:
    node: ast.AST  # FunctionDef or Lambda
    module: ModuleInfo
    closure: object = None  # an Env: what a lambda or nested def closes over
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

    def __init__(self, ev, values: Mapping) -> None:  # ev: the Evaluator
        self.ev = ev
        self.values = values

    def get(self, name: str):
        ev = self.ev
        if name in ev.shadowed:
            if name in ev.initial:
                value, how = ev.initial[name]
                if isinstance(value, (Partial, Members)):
                    ev.note(how)  # a value at one point of the resolution, said in full
                else:
                    ev.note(f"{name} is {value!r} at launch ({how})")
                return wrap(value, f"server_args.{name}", ev.registry)
            return unknown(name, "is the flag being explained; the log has only its final value")
        if name in self.values:
            return wrap(self.values[name], f"server_args.{name}", ev.registry)
        return ev.default_of(name)

    def __repr__(self) -> str:
        return "<server_args>"


class ModelCfg:
    """`ModelConfig` for this model, its attributes computed from ModelConfig's own source."""

    def __init__(self, ev) -> None:  # ev: the Evaluator
        self.ev = ev

    def get(self, name: str):
        return self.ev.model_attr(name)

    def __repr__(self) -> str:
        return "<ModelConfig>"


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
    return clip(repr(value), 80)


def plain_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(value) + "]"
    return render(value)


def same(a, b) -> bool:
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return False
    if a is b:
        return True
    try:
        return type(a) is type(b) and isinstance(a, (str, int, float, bool, type(None), tuple)) and a == b
    except Exception:  # noqa: BLE001
        return False
