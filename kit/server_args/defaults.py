"""Every ServerArgs field with its declared default, read from the source of one version."""

from __future__ import annotations

import ast
import html
from dataclasses import dataclass
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
    constant_named,
    index_of,
    modules_for,
)
from kit._text import clip
from kit.errors import SymbolNotFound

from .common import AST_ERRORS, SourceLike, pandas
from .values import dotted_name

__all__ = ["FieldDefault", "FieldDefaults", "defaults", "field_default", "server_args_fields"]

@dataclass(frozen=True)
class FieldDefault:
    """The default of one ServerArgs field, as the source declares it.

    kind: "literal" (a Python literal, or an empty `default_factory=list/dict/set/tuple`),
    "expression" (computed; `value` is set when the ast alone can compute it),
    "factory" (another `default_factory`; evaluated only when trivially constant) or
    "required". `known` says whether `value` is meaningful. `origin` says whose default it
    is: the dataclass field's, or (``cli_defaults``) the flag's argparse default.
    """

    name: str
    kind: str
    value: Any = None
    text: str = ""
    known: bool = False
    annotation: str = ""
    source: str = ""
    origin: str = "dataclass"  # or "argparse": the default a server launched from a command line starts from

    def __repr__(self) -> str:
        shown = repr(self.value) if self.known else (self.text or "-")
        return f"<FieldDefault {self.name}: {self.kind} {clip(shown, 50)}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


_FIELD_CALLS = frozenset({"dataclasses.field", "field", "msgspec.field"})


_EMPTY_FACTORIES = {"list": list, "dict": dict, "set": set, "tuple": tuple}


class FieldDefaults(dict):
    """{field: FieldDefault} in field order, for one SGLang version."""

    version: str | None = None

    def to_frame(self):
        pd = pandas()
        rows = [(d.name, d.kind, d.value if d.known else pd.NA, d.text, d.source) for d in self.values()]
        return pd.DataFrame(rows, columns=["flag", "kind", "value", "text", "source"])

    def _summary(self) -> str:
        kinds = [d.kind for d in self.values()]
        counts = ", ".join(f"{kinds.count(k)} {k}" for k in ("literal", "expression", "factory", "required"))
        return f"sglang {self.version or '?'}: {len(self)} fields ({counts})"

    def __repr__(self) -> str:
        return f"<FieldDefaults {self._summary()}>"

    def _repr_html_(self) -> str:
        table = self.to_frame().to_html(index=False, max_rows=600)
        return f"<div><b>FieldDefaults</b> {html.escape(self._summary())}{table}</div>"


def defaults(tree: SourceLike) -> FieldDefaults:
    """Every ServerArgs field of this SGLang source with its declared default, in field order.

    Reads `srt/server_args.py` (the dataclass, up to 0.5.18) or, where ServerArgs is
    assembled from namespaces (0.5.19+), the classes of `_INPUT_NAMESPACES` in
    `srt/arg_groups/fields/*.py`. This is the one place defaults are computed: `why`
    (kit.provenance) takes them from here. The result is computed once per tree.
    """
    modules = modules_for(tree)
    cached = modules.scratch.get("defaults")
    index = index_of(modules) if cached is None else None
    stored = index.get("defaults") if index is not None else MISSING
    if cached is None and stored is not MISSING:  # the tree's persistent index (kit._index)
        try:
            cached = modules.scratch["defaults"] = FieldDefaults((fd["name"], FieldDefault(**fd)) for fd in stored)
            cached.version = getattr(tree, "version", None)
        except (TypeError, ValueError, KeyError):  # a file edited by hand: read the defaults again
            cached = None
    if cached is None:
        ev = Evaluator(modules)
        cached = FieldDefaults()
        cached.version = getattr(tree, "version", None)
        for module, node in server_args_fields(modules):
            fd = field_default(modules, ev, module, node)
            cached[fd.name] = fd
        modules.scratch["defaults"] = cached
        if index is not None:
            index.put("defaults", "", [{f.name: getattr(fd, f.name) for f in dataclass_fields(fd)}
                                       for fd in cached.values()])
    out = FieldDefaults(cached)
    out.version = cached.version
    return out




def server_args_fields(modules: Modules) -> list[tuple[ModuleInfo, ast.AnnAssign]]:
    """The ServerArgs field declarations of a tree, in the order the dataclass has them."""
    module = modules.module("srt/server_args.py")
    cls = module.classes.get("ServerArgs")
    if cls is None:
        raise SymbolNotFound(
            f"no class ServerArgs in srt/server_args.py of sglang {modules.version or ''}",
            hint="this layout is not known to the kit; look for `class ServerArgs` with tree.grep",
            cli_hint="this layout is not known to the kit; look for it with `sgl-kit grep TARGET 'class ServerArgs'`",
        )
    own = class_fields(modules, module, cls)
    namespaces = module.assigned("_INPUT_NAMESPACES")
    if not isinstance(namespaces, (ast.List, ast.Tuple)):
        return own
    fields: list[tuple[ModuleInfo, ast.AnnAssign]] = []
    for elt in namespaces.elts:
        found = modules.class_of(module, dotted_name(elt) or "")
        if found is not None:
            fields += class_fields(modules, *found)
    return _in_order(fields, _positional_order(modules, module)) + own


def _positional_order(modules: Modules, module: ModuleInfo) -> list[str]:
    # collect_input_fields (0.5.23 srt/arg_groups/fields/__init__.py) puts the fields named in
    # POSITIONAL_FIELD_ORDER first, then the others in namespace order.
    hit = modules.imported(module, "collect_input_fields")
    if hit is None:
        return []
    try:
        order = constant_named(modules, hit[0], "POSITIONAL_FIELD_ORDER")
    except NotConstant:
        return []
    return [n for n in order if isinstance(n, str)] if isinstance(order, (list, tuple)) else []


def _in_order(
    fields: list[tuple[ModuleInfo, ast.AnnAssign]], order: list[str]
) -> list[tuple[ModuleInfo, ast.AnnAssign]]:
    by_name = {n.target.id: (m, n) for m, n in fields}
    first = [by_name[name] for name in order if name in by_name]
    placed = {n.target.id for _, n in first}
    return first + [f for f in fields if f[1].target.id not in placed]


def field_default(modules: Modules, ev: Evaluator, module: ModuleInfo, node: ast.AnnAssign) -> FieldDefault:
    base = {
        "name": node.target.id,
        "annotation": module.segment(node.annotation) or "",
        "source": f"{module.path}:{node.lineno}",
    }
    if node.value is None:
        return FieldDefault(kind="required", **base)
    text = module.segment(node.value) or ""
    if isinstance(node.value, ast.Call) and dotted_name(node.value.func) in _FIELD_CALLS:
        return _from_field_call(modules, ev, module, node.value, text, base)
    return _plain_default(modules, ev, module, node.value, text, base)


def _plain_default(modules: Modules, ev: Evaluator, module: ModuleInfo, value: ast.expr, text: str,
                   base: dict) -> FieldDefault:
    try:
        return FieldDefault(kind="literal", value=ast.literal_eval(value), text=text, known=True, **base)
    except AST_ERRORS:
        pass
    try:
        known = constant(modules, value, module, evaluator=ev)
    except NotConstant:
        return FieldDefault(kind="expression", text=text, **base)
    return FieldDefault(kind="expression", value=known, text=text, known=True, **base)


def _from_field_call(modules: Modules, ev: Evaluator, module: ModuleInfo, call: ast.Call, text: str,
                     base: dict) -> FieldDefault:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "default" in kw:
        return _plain_default(modules, ev, module, kw["default"], text, base)
    factory = kw.get("default_factory")
    if factory is None:
        return FieldDefault(kind="required", text=text, **base)
    if isinstance(factory, ast.Name) and factory.id in _EMPTY_FACTORIES and factory.id not in module.bindings:
        # A fresh empty container per instance: as fixed as a literal.
        return FieldDefault(
            kind="literal", value=_EMPTY_FACTORIES[factory.id](), text=text, known=True, **base
        )
    if not isinstance(factory, ast.Lambda):
        return FieldDefault(kind="factory", text=text, **base)
    try:
        value = constant(modules, factory, module, evaluator=ev)
    except NotConstant:
        return FieldDefault(kind="factory", text=text, **base)
    return FieldDefault(kind="factory", value=value, text=text, known=True, **base)
