"""The flag table of one sglang version: `add_argument` calls and `Arg(...)` annotations, read with ast."""

from __future__ import annotations

import ast
import html
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from kit._pysource import (
    MISSING,
    Evaluator,
    ModuleInfo,
    Modules,
    NotConstant,
    class_fields,
    constant,
    index_of,
    modules_for,
)
from kit.errors import ParseError, SymbolNotFound

from .common import SourceLike, pandas
from .defaults import FieldDefaults, defaults, field_default, server_args_fields
from .values import dotted_name

__all__ = ["FlagSpec", "FlagTable", "cli_defaults", "flag_table"]

_NO_VALUE_KINDS = {
    "store_true": True,
    "store_false": False,
    "store_const": None,
    "append_const": None,
    "count": None,
    "help": None,
    "version": None,
}


_ARGPARSE_BASES = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_ExtendAction": "extend",
    "BooleanOptionalAction": "boolean_optional",
}


@dataclass(frozen=True)
class FlagSpec:
    """One command-line flag, as an `add_argument` call (or a field annotation) declares it.

    `dest` is argparse's attribute; `field` is the ServerArgs field the value ends up in,
    which differs where `from_cli_args` copies it over (0.5.11: `--tp-size` is stored as
    `tensor_parallel_size`, then `args.tp_size = args.tensor_parallel_size`).
    kind: what parsing it does, following argparse: store, store_true, store_false,
    store_const, boolean_optional, append, extend, count, or ignore (a deprecated flag
    whose action stores nothing). `type`, `default` and `action` are the source text;
    `default_value` is what argparse puts in the namespace when the flag is not given
    (`default_known` says whether the source alone can tell). A deprecated alias (0.5.18
    `--disable-piecewise-cuda-graph`: `DeprecatedStoreConstAction`, dest
    `cuda_graph_backend_prefill`, const "disabled") has `deprecated` and its `new_flag`.
    """

    option_strings: tuple[str, ...]
    dest: str
    field: str = ""
    kind: str = "store"
    action: str | None = None
    nargs: int | str | None = None
    type: str | None = None
    choices: tuple | None = None
    default: str | None = None
    const: Any = None
    required: bool = False
    help: str = ""
    source: str = ""
    default_value: Any = None
    default_known: bool = False
    new_flag: str | None = None  # what a deprecated flag says to use instead (`new_flag=` of sglang's actions)
    deprecated: bool = False  # a Deprecated*Action, a `new_flag=`, or help that starts "Deprecated"

    @property
    def name(self) -> str:
        longs = [o for o in self.option_strings if o.startswith("--")]
        return (longs or list(self.option_strings))[0]

    @property
    def arity(self) -> tuple[int, float]:
        """How many values it takes: (fewest, most)."""
        n = self.nargs
        if n is None:
            return (1, 1)
        if isinstance(n, int):
            return (n, n)
        return {"?": (0, 1), "*": (0, math.inf), "+": (1, math.inf)}.get(n, (0, math.inf))

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", self.dest)

    def __repr__(self) -> str:
        what = (
            self.kind
            + (f" {self.type}" if self.type else "")
            + (f" nargs={self.nargs}" if self.nargs not in (None, 0) else "")
        )
        into = self.field if self.field == self.dest else f"{self.dest} -> {self.field}"
        return f"<FlagSpec {'/'.join(self.option_strings)} -> {into} ({what})>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code> <small>{html.escape(self.source)}</small>"


@dataclass(eq=False)
class FlagTable:
    """The flags of one SGLang version, with argparse's lookup rules (exact, then unique prefix)."""

    flags: list[FlagSpec]
    version: str | None = None
    tree: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._by_option: dict[str, FlagSpec] = {}
        for spec in self.flags:
            for opt in spec.option_strings:
                self._by_option.setdefault(opt, spec)

    def __getitem__(self, key: str) -> FlagSpec:
        """A flag by option string (`--tp-size`), ServerArgs field (`tp_size`) or argparse dest."""
        if key in self._by_option:
            return self._by_option[key]
        for attr in ("field", "dest"):
            for spec in self.flags:
                if getattr(spec, attr) == key:
                    return spec
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[FlagSpec]:
        return iter(self.flags)

    def __len__(self) -> int:
        return len(self.flags)

    @property
    def options(self) -> list[str]:
        return list(self._by_option)

    def has_option(self, option: str) -> bool:
        return option in self._by_option

    def match(self, token: str) -> tuple[FlagSpec, str, str | None] | None:
        """(flag, option string, value after '=') for a command-line token, as argparse reads it.

        Unique prefixes match (`--tp` is `--tp-size` in 0.5.11); a prefix of several
        option strings raises ParseError, as argparse would exit.
        """
        if token in self._by_option:
            return self._by_option[token], token, None
        head, eq, value = token.partition("=")
        if eq and head in self._by_option:
            return self._by_option[head], head, value
        if not token.startswith("--"):
            return None
        hits = [o for o in self._by_option if o.startswith(head)]
        if len(hits) > 1:
            raise ParseError(f"ambiguous option {head}: could match {', '.join(hits[:8])}", position=None)
        return (self._by_option[hits[0]], hits[0], value if eq else None) if hits else None

    def to_frame(self):
        pd = pandas()
        rows = [
            (
                s.name,
                ", ".join(s.option_strings),
                s.field,
                s.dest,
                s.kind,
                s.nargs,
                s.type,
                s.choices,
                s.default,
                s.source,
            )
            for s in self.flags
        ]
        columns = [
            "flag",
            "options",
            "field",
            "dest",
            "kind",
            "nargs",
            "type",
            "choices",
            "default",
            "source",
        ]
        return pd.DataFrame(rows, columns=columns)

    def __repr__(self) -> str:
        return f"<FlagTable sglang {self.version or '?'}: {len(self.flags)} flags, {len(self._by_option)} option strings>"

    def _repr_html_(self) -> str:
        return (
            f"<div><b>{html.escape(repr(self))}</b>{self.to_frame().to_html(index=False, max_rows=600)}</div>"
        )


class _Reader:
    """The tree's modules and one evaluator, for the values in flag declarations."""

    def __init__(self, modules: Modules) -> None:
        self.modules = modules
        self.ev = Evaluator(modules)

    def value(self, node: ast.AST, module: ModuleInfo) -> Any:
        return constant(self.modules, node, module, evaluator=self.ev)


def flag_table(tree: SourceLike) -> FlagTable:
    """The flags `ServerArgs.add_cli_args` registers in this SGLang source, read with ast.

    Follows both layouts: explicit `parser.add_argument(...)` calls (0.5.11), and fields
    annotated `A[T, Arg(...)]` that `add_cli_args_from_dataclass` turns into flags (0.5.19+).
    """
    modules = modules_for(tree)
    cached = modules.scratch.get("flag_specs")  # the specs only: a FlagTable holds the tree itself
    if cached is None:
        cached = modules.scratch["flag_specs"] = _stored_flags(modules)
    return FlagTable(list(cached), version=getattr(tree, "version", None), tree=tree)


def _stored_flags(modules: Modules) -> list[FlagSpec]:
    """The specs from the tree's persistent index (kit._index), read and stored there once."""
    index = index_of(modules)
    stored = index.get("flags") if index is not None else MISSING
    if stored is not MISSING:
        try:
            return [FlagSpec(**spec) for spec in stored]
        except (TypeError, ValueError):  # a file edited by hand: read the flags again
            pass
    specs = _read_flags(modules)
    if index is not None:
        index.put("flags", "", [{f.name: getattr(spec, f.name) for f in dataclass_fields(spec)} for spec in specs])
    return specs


def _read_flags(modules: Modules) -> list[FlagSpec]:
    ev = _Reader(modules)
    mod = ev.modules.module("srt/server_args.py")
    method = _method(mod, "ServerArgs", "add_cli_args")
    flags: list[FlagSpec] = []
    calls = sorted(
        (n for n in ast.walk(method) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
    )
    for call in calls:
        name = (dotted_name(call.func) or "").rsplit(".", 1)[-1]
        if name == "add_argument":
            spec = _flag_from_call(ev, mod, call)
            flags += [spec] if spec is not None else []
        elif name == "add_cli_args_from_dataclass":
            flags += _flags_from_fields(ev, mod, call)
    renames = _cli_renames(mod)
    return [replace(f, field=renames[f.dest]) if f.dest in renames else f for f in flags]


def _cli_renames(mod: ModuleInfo) -> dict[str, str]:
    """{dest: field} for the `args.FIELD = args.DEST` copies in ServerArgs.from_cli_args."""
    try:
        method = _method(mod, "ServerArgs", "from_cli_args")
    except SymbolNotFound:
        return {}
    renames = {}
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = dotted_name(node.targets[0]), dotted_name(node.value)
            if target and value and target.count(".") == 1 and value.count(".") == 1:
                renames[value.split(".")[1]] = target.split(".")[1]
    return renames


def _method(mod: ModuleInfo, cls_name: str, name: str) -> ast.FunctionDef:
    cls = mod.classes.get(cls_name)
    for stmt in cls.body if cls else ():
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return stmt
    raise SymbolNotFound(
        f"no {cls_name}.{name} in {mod.path}",
        hint="this SGLang layout is not known to the kit; find where flags are added with tree.grep('add_argument')",
        cli_hint="this SGLang layout is not known to the kit; find where flags are added with "
                 "`sgl-kit grep TARGET add_argument`",
    )


def _flag_from_call(ev: _Reader, mod: ModuleInfo, call: ast.Call) -> FlagSpec | None:
    if not call.args or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args):
        return None
    opts = tuple(a.value for a in call.args)
    if not all(o.startswith("-") for o in opts):
        return None  # a positional argument; ServerArgs has none
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    kind, nargs, const = _action(ev, mod, kw)
    dest = _const(kw.get("dest")) or _derive_dest(opts)
    if kind == "boolean_optional":
        opts += tuple("--no-" + o[2:] for o in opts if o.startswith("--"))
    new_flag = _known(ev, mod, kw.get("new_flag"))
    help_text = _help(ev, mod, kw.get("help"))
    return FlagSpec(
        option_strings=opts,
        dest=dest,
        kind=kind,
        action=mod.segment(kw.get("action")),
        nargs=nargs,
        type=mod.segment(kw.get("type")),
        choices=_choices(ev, mod, kw.get("choices")),
        default=mod.segment(kw.get("default")),
        const=const,
        required=_const(kw.get("required")) is True,
        help=help_text,
        source=f"{mod.path}:{call.lineno}",
        new_flag=new_flag if isinstance(new_flag, str) else None,
        deprecated=_deprecated(kw.get("action"), new_flag, help_text),
        **_argparse_default(ev, mod, kw, kind),
    )


def _deprecated(action: ast.expr | None, new_flag: Any, help_text: str) -> bool:
    name = (dotted_name(action) or "").rsplit(".", 1)[-1] if action is not None else ""
    head = help_text.lstrip("( ").lower()
    return name.startswith("Deprecated") or isinstance(new_flag, str) or head.startswith("deprecated")


def _action_class(ev: _Reader, mod: ModuleInfo, node: ast.expr | None):
    if node is None or isinstance(node, ast.Constant):
        return None
    dotted = dotted_name(node) or ""
    return None if dotted.startswith("argparse.") else ev.modules.class_of(mod, dotted)


# What argparse stores for a flag that is not given and has no `default=`.
_IMPLICIT_DEFAULTS = {"store_true": False, "store_false": True}


def _argparse_default(ev: _Reader, mod: ModuleInfo, kw: dict[str, ast.expr], kind: str) -> dict[str, Any]:
    node = kw.get("default")
    if node is None:
        found = _action_class(ev, mod, kw.get("action"))
        if found is not None and "default" in _init_defaults(found[1]):
            # A custom Action's own `default=` in its __init__ (0.5.23 DeprecatedStoreTrueAction: False).
            mod, node = found[0], _init_defaults(found[1])["default"]
        else:
            return {"default_value": _IMPLICIT_DEFAULTS.get(kind), "default_known": True}
    try:
        value = ev.value(node, mod)
    except NotConstant:
        return {"default_value": None, "default_known": False}
    # argparse runs a string default through `type=`, as it would a value typed on the command line.
    convert = {"int": int, "float": float}.get(mod.segment(kw.get("type")) or "")
    if convert is not None and isinstance(value, str):
        try:
            value = convert(value)
        except ValueError:
            return {"default_value": None, "default_known": False}
    return {"default_value": value, "default_known": True}


def _const(node: ast.AST | None) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _derive_dest(opts: tuple[str, ...]) -> str:
    # argparse: the first long option string, else the first one, without dashes.
    longs = [o for o in opts if len(o) > 1 and o[1] == "-"]
    return (longs or list(opts))[0].lstrip("-").replace("-", "_")


def _known(ev: _Reader, mod: ModuleInfo, node: ast.AST | None, default: Any = None) -> Any:
    if node is None:
        return default
    try:
        return ev.value(node, mod)
    except NotConstant:
        return default


def _choices(ev: _Reader, mod: ModuleInfo, node: ast.AST | None) -> tuple | None:
    value = _known(ev, mod, node)
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return tuple(sorted(value, key=repr)) if isinstance(value, (set, frozenset)) else tuple(value)
    return None


def _help(ev: _Reader, mod: ModuleInfo, node: ast.AST | None) -> str:
    value = _known(ev, mod, node)
    return value if isinstance(value, str) else (mod.segment(node) or "")


def _action(ev: _Reader, mod: ModuleInfo, kw: dict[str, ast.expr]) -> tuple[str, int | str | None, Any]:
    """(kind, nargs, const) of an add_argument call."""
    node = kw.get("action")
    nargs = _known(ev, mod, kw.get("nargs"))
    const = _known(ev, mod, kw.get("const"))
    if node is None:
        return "store", nargs, const
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _builtin_action(node.value, nargs, const)
    dotted = dotted_name(node) or ""
    base = _ARGPARSE_BASES.get(dotted.rsplit(".", 1)[-1])
    if dotted.startswith("argparse.") and base:
        return _builtin_action(base, nargs, const)
    found = ev.modules.class_of(mod, dotted)
    if found is None:
        return "store", nargs, const
    return _custom_action(ev, mod, kw, *found)


def _builtin_action(kind: str, nargs: Any, const: Any) -> tuple[str, int | str | None, Any]:
    if kind == "boolean_optional":
        return kind, 0, None
    if kind in _NO_VALUE_KINDS:
        fixed = _NO_VALUE_KINDS[kind]
        return kind, 0, fixed if fixed is not None else const
    return kind, nargs, const


def _custom_action(ev: _Reader, mod: ModuleInfo, kw: dict, cls_mod: ModuleInfo, cls: ast.ClassDef) -> tuple:
    """What an `argparse.Action` subclass does, read from its __init__ defaults and __call__."""
    for base in cls.bases:
        kind = _ARGPARSE_BASES.get((dotted_name(base) or "").rsplit(".", 1)[-1])
        if kind and kind != "store":
            return _builtin_action(kind, _known(ev, mod, kw.get("nargs")), _known(ev, mod, kw.get("const")))
    params = _init_defaults(cls)

    def param(name: str) -> Any:
        if name in kw:
            return _known(ev, mod, kw[name])
        return _known(ev, cls_mod, params.get(name))

    stored = _stored_value(cls)
    if stored is None:
        return "ignore", param("nargs"), None
    if isinstance(stored, ast.Constant):
        return "store_const", param("nargs"), stored.value
    if isinstance(stored, ast.Attribute) and dotted_name(stored.value) == "self":
        return "store_const", param("nargs"), param(stored.attr)
    return "store", param("nargs"), None


def _init_defaults(cls: ast.ClassDef) -> dict[str, ast.expr]:
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            a = stmt.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=False) if d is not None]
            return {arg.arg: d for arg, d in pairs}
    return {}


def _stored_value(cls: ast.ClassDef) -> ast.expr | None:
    """X in `setattr(namespace, self.dest, X)` inside __call__; None if it stores nothing."""
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__call__":
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Call)
                    and dotted_name(node.func) == "setattr"
                    and len(node.args) == 3
                    and dotted_name(node.args[1]) == "self.dest"
                ):
                    return node.args[2]
    return None


def _flags_from_fields(ev: _Reader, mod: ModuleInfo, call: ast.Call) -> list[FlagSpec]:
    # Mirrors add_cli_args_from_dataclass (0.5.23 srt/arg_groups/arg_utils.py): each field
    # annotated A[T, "help"] or A[T, Arg(...)] becomes a flag unless Arg(no_cli=True).
    target = dotted_name(call.args[1]) if len(call.args) > 1 else None
    if target == "ServerArgs":
        fields = server_args_fields(ev.modules)
    else:
        found = ev.modules.class_of(mod, target or "")
        fields = class_fields(ev.modules, *found) if found else []
    only = _known(ev, mod, next((k.value for k in call.keywords if k.arg == "fields"), None))
    specs = [_field_flag(ev, m, node) for m, node in fields if only is None or node.target.id in only]
    return [s for s in specs if s is not None]


def _field_flag(ev: _Reader, mod: ModuleInfo, node: ast.AnnAssign) -> FlagSpec | None:
    inner, meta = _annotated(node.annotation)
    if meta is None:
        return None
    arg = {k.arg: k.value for k in meta.keywords if k.arg} if isinstance(meta, ast.Call) else {"help": meta}
    if _known(ev, mod, arg.get("no_cli")) is True:
        return None
    name = node.target.id
    cli = _known(ev, mod, arg.get("cli_name")) or "--" + name.replace("_", "-")
    opts = (cli, *(_known(ev, mod, arg.get("aliases")) or ()))
    kind, nargs, type_text, choices = _field_shape(ev, mod, inner, arg)
    if kind == "boolean_optional":
        opts += tuple("--no-" + o[2:] for o in opts if o.startswith("--"))
    has_default = node.value is not None
    required = _known(ev, mod, arg.get("required"))
    return FlagSpec(
        option_strings=tuple(opts),
        dest=name,
        kind=kind,
        action=mod.segment(arg.get("action")),
        nargs=nargs,
        type=type_text,
        choices=choices,
        default=mod.segment(node.value) if has_default else None,
        **_field_argparse_default(ev, mod, node),
        const=_known(ev, mod, arg.get("const"), True if kind == "store_true" else None),
        required=required is True or (required is None and not has_default and kind == "store"),
        help=_help(ev, mod, arg.get("help")),
        source=f"{mod.path}:{node.lineno}",
    )


def _field_argparse_default(ev: _Reader, mod: ModuleInfo, node: ast.AnnAssign) -> dict[str, Any]:
    # add_cli_args_from_dataclass passes the field's default to add_argument (0.5.23 arg_utils.py).
    fd = field_default(ev.modules, ev.ev, mod, node)
    return {"default_value": fd.value if fd.known else None, "default_known": fd.known}


def _annotated(ann: ast.expr) -> tuple[ast.expr, ast.expr | None]:
    """(T, metadata) of `A[T, "help"]`, `A[T, Arg(...)]` or `Annotated[...]`."""
    if not (
        isinstance(ann, ast.Subscript) and (dotted_name(ann.value) or "").rsplit(".", 1)[-1] in ("A", "Annotated")
    ):
        return ann, None
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    for meta in parts[1:]:
        if isinstance(meta, ast.Call) and (dotted_name(meta.func) or "").rsplit(".", 1)[-1] == "Arg":
            return parts[0], meta
        if isinstance(meta, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not isinstance(
            _const(meta), (int, float)
        ):
            return parts[0], meta
    return parts[0], None


def _field_shape(
    ev: _Reader, mod: ModuleInfo, tp: ast.expr, arg: dict
) -> tuple[str, Any, str | None, tuple | None]:
    """(kind, nargs, type, choices) the way add_cli_args_from_dataclass derives them from T."""
    explicit_choices = _choices(ev, mod, arg.get("choices"))
    type_parser = mod.segment(arg.get("type_parser"))
    nargs = _known(ev, mod, arg.get("nargs"))
    if arg.get("action") is not None:
        kind, a_nargs, _ = _action(
            ev, mod, {"action": arg["action"], **({"nargs": arg["nargs"]} if "nargs" in arg else {})}
        )
        return kind, a_nargs, type_parser, explicit_choices
    tp = _unwrap_optional(tp)
    head = (dotted_name(tp.value) or "").rsplit(".", 1)[-1] if isinstance(tp, ast.Subscript) else dotted_name(tp)
    if head == "Literal":
        values = _known(ev, mod, tp.slice)
        values = values if isinstance(values, tuple) else (values,)
        return (
            "store",
            nargs,
            type_parser or _type_name(type(values[0]).__name__ if values else "str"),
            explicit_choices or values,
        )
    if head in ("list", "List") and type_parser is None:
        elem = tp.slice if isinstance(tp, ast.Subscript) else None
        return (
            "store",
            nargs or "+",
            _type_name(dotted_name(elem) if elem is not None else "str"),
            explicit_choices,
        )
    if head == "bool":
        return "store_true", 0, None, None
    return "store", nargs, type_parser or _type_name(head), explicit_choices


def _unwrap_optional(tp: ast.expr) -> ast.expr:
    if isinstance(tp, ast.Subscript) and (dotted_name(tp.value) or "").rsplit(".", 1)[-1] in (
        "Optional",
        "Union",
    ):
        parts = tp.slice.elts if isinstance(tp.slice, ast.Tuple) else [tp.slice]
        rest = [p for p in parts if not _is_none(p)]
        return rest[0] if len(rest) == 1 else tp
    if isinstance(tp, ast.BinOp) and isinstance(tp.op, ast.BitOr):
        sides = [s for s in (tp.left, tp.right) if not _is_none(s)]
        return sides[0] if len(sides) == 1 else tp
    return tp


def _is_none(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value is None) or dotted_name(node) == "None"


def _type_name(name: str | None) -> str:
    # _infer_type_func maps str/int/float to themselves and anything else to str.
    return name if name in ("str", "int", "float") else "str"


def cli_defaults(tree: SourceLike) -> FieldDefaults:
    """The defaults a server launched from the command line starts from, field by field.

    ``ServerArgs.from_cli_args`` fills every field from the argparse namespace, so a field
    that has a flag starts from that flag's argparse default, which can differ from the
    dataclass default (0.5.11: ``--kt-method`` has ``default="AMXINT4"``, the field
    ``kt_method`` defaults to None). Fields without a flag keep the dataclass default.
    Each entry's ``origin`` says which applied.
    """
    modules = modules_for(tree)
    cached = modules.scratch.get("cli_defaults")
    if cached is None:
        cached = FieldDefaults()
        cached.version = getattr(tree, "version", None)
        first: dict[str, object] = {}
        for spec in flag_table(tree):
            first.setdefault(spec.field, spec)  # argparse keeps the first default given for a dest
        for name, fd in defaults(tree).items():
            spec = first.get(name)
            if spec is None or not spec.default_known:
                # No flag, or an argparse default the source alone cannot compute
                # (0.5.23 `default=_declared_default(name)`, which reads the field's own default).
                cached[name] = fd
                continue
            cached[name] = replace(fd, kind="literal", value=spec.default_value, known=True,
                                   text=spec.default or "", source=spec.source, origin="argparse")
        modules.scratch["cli_defaults"] = cached
    out = FieldDefaults(cached)
    out.version = cached.version
    return out
