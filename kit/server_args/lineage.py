"""What a flag or field name from any sglang release is in this one: a flag's lineage.

``lineage(tree, "disable_piecewise_cuda_graph")`` answers, for the tree it reads:

- ``field``: present as itself (0.5.11: a ServerArgs field and its flag);
- ``alias``: a flag that stores into another field (0.5.18: ``DeprecatedStoreConstAction``,
  dest ``cuda_graph_backend_prefill``, const ``"disabled"``, ``new_flag``
  ``--cuda-graph-backend-prefill=disabled``), followed to the nested config the field folds into
  (``cuda_graph_config.prefill.backend``);
- ``ignored``: a deprecated flag that is accepted and stores nothing (0.5.11
  ``--enable-piecewise-cuda-graph``);
- ``not yet`` / ``removed``: not in this tree, and ``kit/data/lineage.yaml`` says when it existed;
  with the field that held the same setting in this release (0.5.9: ``enable_piecewise_cuda_graph``,
  off by default), or None when the release has no such setting;
- ``unknown``: neither the tree nor the data know the name.

What one tree says is read from it: its flag table (``flags.py``: aliases, ``new_flag``, ``dest``,
``const``) and its per-phase helpers (``_set(Phase.PREFILL, "backend", ...)`` inside the function
that builds ``cuda_graph_config``: which field folds into which nested path). Only what a single
tree cannot tell (when a name appeared, was deprecated, was removed) comes from the data file,
each entry with the releases where it was checked.
"""

from __future__ import annotations

import ast
import html
from dataclasses import dataclass
from dataclasses import field as _field
from dataclasses import fields as dataclass_fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit._pysource import MISSING, ModuleInfo, NotConstant, constant, index_of, modules_for
from kit.errors import KitError

from .common import SourceLike
from .defaults import defaults
from .flags import FlagSpec, flag_table
from .values import dotted_name

__all__ = ["SAME_VALUE", "FlagLineage", "Fold", "era_in", "folds", "lineage", "lineage_data"]

LINEAGE_FILE = Path(__file__).resolve().parent.parent / "data" / "lineage.yaml"

SAME_VALUE = "<its own value>"  # Fold.value when the field's own value lands in the nested path


@dataclass(frozen=True)
class Fold:
    """A field whose value lands in a nested config: ``_set(Phase.PREFILL, "backend", ...)``."""

    field: str  # cuda_graph_backend_prefill
    path: str  # cuda_graph_config.prefill.backend
    value: Any  # what it writes there: SAME_VALUE (the field's own value) or a constant ("disabled")
    when: str  # the condition around the write
    where: str  # file:line of the write

    def __str__(self) -> str:
        what = "its value" if self.value == SAME_VALUE else repr(self.value)
        return f"{self.field} folds into {self.path} ({what} when `{self.when}`, {self.where})"


@dataclass
class FlagLineage:
    """What a name (a flag or field of any release) is in one tree; see the module docstring."""

    name: str  # as asked, without dashes: disable_piecewise_cuda_graph
    version: str | None
    status: str  # field, alias, ignored, not yet, removed, unknown
    field: str | None = None  # what to explain in this tree (a field or a nested path), if anything
    option: str | None = None  # this tree's flag for the name
    dest: str | None = None  # the field an alias stores into
    const: Any = None  # the value it stores
    new_flag: str | None = None  # what the tree says to use instead
    deprecated: bool = False
    where: str = ""  # where the tree declares the flag
    folds: list[Fold] = _field(default_factory=list)  # how `dest` reaches `field`
    setting: str = ""  # the setting in lineage.yaml (prefill_cuda_graph)
    off: Any = None  # the value of `field` that means the setting is off, when the data says
    history: list[str] = _field(default_factory=list)  # lineage.yaml's spans, with the releases checked
    note: str = ""  # one sentence: what the name is here
    instead: list[str] = _field(default_factory=list)  # this tree's flags that do what the name did

    @property
    def redirected(self) -> bool:
        """The name is not the field explained for it in this tree."""
        return self.field != self.name

    def __str__(self) -> str:
        return self.note

    def __repr__(self) -> str:
        return f"<FlagLineage {self.name} in sglang {self.version or '?'}: {self.status} -> {self.field}>"

    def _repr_html_(self) -> str:
        rows = "".join(f"<li>{html.escape(h)}</li>" for h in self.history)
        return f"<div><b>{html.escape(self.note)}</b><ul>{rows}</ul></div>"


def lineage(tree: SourceLike, name: str) -> FlagLineage:
    """What ``name`` (``--disable-piecewise-cuda-graph``, ``enable_piecewise_cuda_graph``,
    ``cuda_graph_config.prefill.backend``, from any release) is in ``tree``; see the module docstring."""
    name = name.strip().lstrip("-").replace("-", "_")
    version = getattr(tree, "version", None)
    try:
        flags, fields = flag_table(tree), defaults(tree)
    except KitError:
        flags, fields = None, {}
    data = _data_for(name)
    out = FlagLineage(name, version, "unknown")
    if data is not None:
        out.setting, out.history = data["setting"], _history(data)
    head = name.split(".")[0]
    option = "--" + head.replace("_", "-")
    spec = flags.get(option) if flags is not None and flags.has_option(option) else None
    if spec is not None and "." not in name:
        _from_flag(out, spec, tree)
    elif head in fields or (flags is not None and any(s.field == head for s in flags)):
        out.status, out.field = "field", name
        out.folds = [f for f in folds(tree) if f.field == head]
        into = f"; it folds into {out.folds[0].path} ({out.folds[0].where})" if out.folds else ""
        out.note = f"in sglang {version or '(version unknown)'} {name} is a field{into}"
    else:
        _from_data(out, data)
        if data is not None and data.get("turns_off") and out.field:
            out.instead = _off_switches(tree, flags, _era(out.setting, version))
            if out.instead:
                out.note += f"; to turn it off in this release: {' or '.join(out.instead)}"
        if out.field:
            out.note += f"; explaining {out.field}"
    era = _era(out.setting, version) if out.setting else None
    if era is not None and out.field == era.get("field"):
        out.off = era.get("off_value")
    return out


def _from_flag(out: FlagLineage, spec: FlagSpec, tree: SourceLike) -> None:
    out.option, out.where, out.deprecated, out.new_flag = spec.name, spec.source, spec.deprecated, spec.new_flag
    version = out.version or "(version unknown)"
    said = f" (deprecated; sglang says use {spec.new_flag})" if spec.deprecated and spec.new_flag else (
        " (deprecated)" if spec.deprecated else "")
    if spec.kind == "ignore":
        out.status = "ignored"
        era = _era(out.setting, out.version) if out.setting else None
        out.field = era.get("field") if era else None
        then = (f"; the setting is {out.field} in this release, explaining it" if out.field
                else "")
        reason = spec.help.split(". ")[0].rstrip(".")
        out.note = f"in sglang {version} {spec.name} is accepted and does nothing{said}: {reason}{then}"
        return
    if spec.field == out.name:
        out.status, out.field = "field", out.name
        out.folds = [f for f in folds(tree) if f.field == out.name]
        into = f"; it folds into {out.folds[0].path} ({out.folds[0].where})" if out.folds else ""
        out.note = f"in sglang {version} {spec.name} sets the field {spec.field}{said}{into}"
        return
    out.status, out.dest = "alias", spec.field
    out.const = spec.const if spec.kind in ("store_const", "store_true", "store_false") else None
    out.folds = [f for f in folds(tree) if f.field == spec.field]
    target = next((f.path for f in out.folds if f.value == SAME_VALUE), None)
    out.field = target or spec.field
    stores = f"stores {spec.const!r} into {spec.field}" if out.const is not None else f"stores into {spec.field}"
    kind = "a deprecated alias" if spec.deprecated else "an alias"
    of = f" of {spec.new_flag}" if spec.new_flag else f" of --{spec.field.replace('_', '-')}"
    via = f", which folds into {target}" if target else ""
    out.note = (f"in sglang {version} {spec.name} is {kind}{of} ({spec.source}: it {stores}{via}); "
                f"explaining {out.field}")


def _off_switches(tree: SourceLike, flags, era: dict | None) -> list[str]:
    """This tree's flags that turn the setting off: the era's field itself, or what folds into it."""
    if era is None or flags is None or not era.get("field"):
        return []
    target, off = era["field"], era.get("off_value")
    if "." not in target:
        spec = next((s for s in flags if s.field == target), None)
        if spec is None:
            return []
        if spec.kind == "store_true" and off is True:
            return [spec.name]
        return [f"leaving out {spec.name} ({target} is {off!r} by default)"] if off is False else []
    out = []
    for fold in folds(tree):
        spec = next((s for s in flags if s.field == fold.field and not s.deprecated), None)
        if fold.path != target or spec is None:
            continue
        if fold.value == off and spec.kind == "store_true":
            out.append(spec.name)
        elif fold.value == SAME_VALUE and (spec.choices is None or off in spec.choices):
            out.append(f"{spec.name} {off}")
    return list(dict.fromkeys(out))


def _from_data(out: FlagLineage, data: dict | None) -> None:
    version = out.version or "(version unknown)"
    if data is None:
        out.note = f"sglang {version} has no field or flag {out.name}, and the kit knows no other release's"
        return
    era = _era(out.setting, out.version)
    spans = [h for h in data["history"] if h.get("is") != "absent"]
    placed = _place(out.version, spans)
    out.field = era.get("field") if era else None
    what = data["settings"]["what"]
    if placed is None:
        out.status = "unknown"
        out.note = (f"sglang {version} has no {out.name}; the kit cannot place this version among the releases "
                    f"that had it ({'; '.join(out.history)})")
        return
    out.status = placed
    seen = "; ".join(f"{_KIND_WORDS.get(h['is'], h['is'])}{' of ' + h['of'] if h.get('of') else ''} in "
                     f"{h['versions']}" for h in spans)
    if out.field:
        now = f"{what} is {out.field} in this release ({era['note']})"
    elif era is not None:
        now = f"this release has no such setting: {era['note']}"
    else:
        now = "the kit does not know what held this setting in this release"
    word = "does not exist yet" if placed == "not yet" else "was removed"
    out.note = f"in sglang {version} {out.name} {word} ({seen}); {now}"


_KIND_WORDS = {"field": "a field", "alias": "a deprecated alias", "ignored": "a deprecated flag that does nothing"}


def _place(version: str | None, spans: list[dict]) -> str | None:
    """'not yet' when the version comes before every span the name existed in, 'removed' after them."""
    from kit._versions import in_range, parse

    v = parse(version)
    if v is None or not spans:
        return None
    inside = [in_range(version, h["versions"]) for h in spans]
    if any(inside):
        return None  # the data says it exists here, the tree says not: do not guess
    first = _lower_bound(spans[0]["versions"])
    return "not yet" if first is not None and v < first else "removed"


def _lower_bound(spec: str):
    from packaging.version import Version

    for part in spec.split(","):
        part = part.strip()
        if part.startswith(">="):
            return Version(part[2:])
    return None


def _history(data: dict) -> list[str]:
    out = []
    for h in data["history"]:
        what = {"field": "a field", "alias": f"a deprecated alias of {h.get('of', '?')}",
                "ignored": "a deprecated flag that does nothing", "absent": "absent"}.get(h.get("is"), h.get("is"))
        out.append(f"{h['versions']}: {what} (checked in {', '.join(str(c) for c in h.get('checked', []))})")
    return out


def _era(setting: str, version: str | None) -> dict | None:
    return era_in(lineage_data()["settings"][setting]["eras"], version) if setting else None


def era_in(eras: list[dict], version: str | None) -> dict | None:
    """The era of a setting's lineage (kit/data/lineage.yaml) whose range holds ``version``; None when none
    does, or when ``version`` is not a version (a branch, "main")."""
    from kit._versions import in_range

    return next((e for e in eras if in_range(version, e["versions"])), None)


def _data_for(name: str) -> dict | None:
    settings = lineage_data()["settings"]
    for key in (name, name.split(".")[0]):
        for setting, body in settings.items():
            if key in (body.get("names") or {}):
                return {"setting": setting, "settings": body, **body["names"][key]}
    return None


@lru_cache(maxsize=1)
def lineage_data() -> dict:
    """kit/data/lineage.yaml, read once."""
    from kit._data import load_yaml

    return load_yaml(LINEAGE_FILE)


# --------------------------------------------------------------------------- folds


def folds(tree: SourceLike) -> list[Fold]:
    """Every field that lands in a nested config through a per-phase helper, in this tree.

    The pattern (0.5.14 ``ServerArgs._parse_cuda_graph_config``, 0.5.23
    ``arg_groups/cuda_graph_hook.parse_cuda_graph_config``): a nested
    ``def _set(phase, key, value): setattr(getattr(config, phase), key, value)``, the local
    ``config`` assigned to a field (``self.cuda_graph_config = config`` or
    ``declare_resolution(..., cuda_graph_config=config)``), and calls
    ``_set(Phase.PREFILL, "backend", self.cuda_graph_backend_prefill)`` under an ``if``.
    """
    modules = modules_for(tree)
    cached = modules.scratch.get("lineage_folds")
    index = index_of(modules) if cached is None else None
    stored = index.get("folds") if index is not None else MISSING
    if cached is None and stored is not MISSING:
        try:
            cached = modules.scratch["lineage_folds"] = [Fold(**fold) for fold in stored]
        except (TypeError, ValueError):  # a file edited by hand: find the folds again
            cached = None
    if cached is None:
        cached = []
        try:
            fields = set(defaults(tree))
        except KitError:
            fields = set()
        for path in _helper_files(tree, modules):
            module = modules.get(path)
            if module is not None:
                cached += _folds_in(modules, module, fields)
        modules.scratch["lineage_folds"] = cached
        if index is not None:
            index.put("folds", "", [{f.name: getattr(fold, f.name) for f in dataclass_fields(fold)} for fold in cached])
    return list(cached)


def _helper_files(tree, modules) -> list[str]:
    grep = getattr(tree, "grep", None)
    if callable(grep):
        return sorted({m.path for m in grep("setattr(getattr(", fixed=True, max_matches=10_000)
                       if m.path.startswith("srt/")})
    return [p for p in modules.files("**/*.py") if p.startswith("srt/") and "setattr(getattr(" in modules.text(p)]


def _folds_in(modules, module: ModuleInfo, fields: set[str]) -> list[Fold]:
    out = []
    funcs = [n for n in ast.walk(module.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for func in funcs:
        for helper, local in _setters(func):
            base = _assigned_field(func, local)
            if base is not None:
                out += _helper_calls(modules, module, func, helper, base, fields)
    return out


def _setters(func: ast.AST):
    """(helper name, local) for nested ``def h(p, k, v): setattr(getattr(local, p), k, v)``."""
    for inner in func.body if hasattr(func, "body") else []:
        if not isinstance(inner, ast.FunctionDef):
            continue
        params = [a.arg for a in inner.args.args]
        for call in ast.walk(inner):
            if not (isinstance(call, ast.Call) and dotted_name(call.func) == "setattr" and len(call.args) == 3):
                continue
            obj, key, value = call.args
            if (isinstance(obj, ast.Call) and dotted_name(obj.func) == "getattr" and len(obj.args) == 2
                    and isinstance(obj.args[0], ast.Name) and _names(obj.args[1], key, value) <= set(params)):
                yield inner.name, obj.args[0].id


def _names(*nodes: ast.AST) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _assigned_field(func: ast.AST, local: str) -> str | None:
    """F in ``x.F = local`` or ``f(..., F=local)`` inside ``func``."""
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
                and isinstance(node.value, ast.Name) and node.value.id == local):
            return node.targets[0].attr
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id == local:
                    return kw.arg
    return None


def _helper_calls(modules, module: ModuleInfo, func: ast.AST, helper: str, base: str,
                  fields: set[str]) -> list[Fold]:
    parents = {id(c): p for p in ast.walk(func) for c in ast.iter_child_nodes(p)}
    out = []
    for call in ast.walk(func):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == helper
                and len(call.args) == 3):
            continue
        try:
            phase, key = (constant(modules, a, module) for a in call.args[:2])
        except NotConstant:
            continue
        if not (isinstance(phase, str) and isinstance(key, str)):
            continue
        test = _enclosing_test(call, parents)
        value_node = call.args[2]
        if isinstance(value_node, ast.Attribute) and value_node.attr in fields:
            name, value = value_node.attr, SAME_VALUE
        else:
            tested = [n for n in ast.walk(test) if isinstance(n, ast.Attribute) and n.attr in fields] if (
                test is not None) else []
            if len(tested) != 1:
                continue
            try:
                value = constant(modules, value_node, module)
            except NotConstant:
                continue
            name = tested[0].attr
        out.append(Fold(name, f"{base}.{phase}.{key}", value, ast.unparse(test) if test is not None else "always",
                        f"{module.path}:{call.lineno}"))
    return out


def _enclosing_test(node: ast.AST, parents: dict) -> ast.expr | None:
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, ast.If) and any(node is s for s in parent.body):
            return parent.test
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For)):
            return None
        node = parent
    return None
