"""One generic rule: the performance settings sglang changed on its own for this launch.

It reads the launch as its release resolves it (``Evidence.resolution``, kit.doctor.resolve) and, for a
log or ``/server_info`` read with the launch command beside it, the values the server reported against
the values asked. Which fields bear on speed is data, ``kit/data/perf_fields.yaml`` (each field's help
text read from the release's flag table). Fields that a specific rule already reported are left to it:
this rule runs after the others (``after="findings"``) and skips what they cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kit._text import clip, short_path
from kit.errors import KitError

from .case import Case
from .resolve import _same  # one comparison of a resolved value with an asked one
from .rulebase import ALL_VERSIONS, Rule, not_estimated, rule

__all__ = ["PerfField", "perf_fields", "sglang_changed"]


@dataclass(frozen=True)
class PerfField:
    field: str  # the field in this release
    name: str  # as kit/data/perf_fields.yaml names it
    category: str
    effect: str
    help: str = ""  # the flag's help text in this release's server_args.py
    option: str = ""  # this release's flag for it


@lru_cache(maxsize=1)
def _data() -> dict:
    from kit._data import DATA, load_yaml

    return load_yaml(DATA / "perf_fields.yaml")


def perf_fields(tree=None) -> dict[str, PerfField]:
    """{field of this release: PerfField}; without a tree, the names as the data file has them."""
    data = _data()
    flags = None
    if tree is not None:
        from kit.server_args import flag_table, lineage

        try:
            flags = flag_table(tree)
        except KitError:
            flags = None
    out: dict[str, PerfField] = {}
    for name, entry in (data.get("fields") or {}).items():
        field = name
        if tree is not None:
            try:
                found = lineage(tree, name)
            except KitError:
                found = None
            if found is not None and found.status in ("removed", "not yet", "unknown") and not found.field:
                continue
            field = (found.field if found is not None and found.field else name)
        spec = next((s for s in flags if s.field == field), None) if flags is not None else None
        out.setdefault(field, PerfField(field, name, entry["category"], entry["effect"],
                                        (spec.help or "").strip() if spec is not None else "",
                                        spec.name if spec is not None else ""))
    return out


def _rank(category: str) -> int:
    order = _data().get("categories") or []
    return order.index(category) if category in order else len(order)


@dataclass
class _Item:
    perf: PerfField
    asked: object
    asked_known: bool
    value: object
    default: object
    site: str = ""
    rule: str = ""
    guard: str = ""
    decided: bool = True
    needs: str = ""


def sglang_changed(case: Case) -> list[_Item]:
    """The performance fields sglang set other than asked (or, not asked, other than their default), ranked
    by category; then the ones it may set, with the input that would decide it."""
    ev = case.ev
    res = getattr(ev, "resolution", None)
    if ev.tree is None or (res is None and ev.explicit is None):
        return []
    memo = case.__dict__.setdefault("_sglang_changed", None)
    if memo is not None:
        return memo
    perf = perf_fields(ev.tree)
    items: list[_Item] = []
    seen: set[str] = set()
    for c in (res.changes if res is not None else []):
        top = c.field.split(".")[0]
        p = perf.get(c.field) or perf.get(top)
        if p is None or c.field in seen:
            continue
        last = res.change(c.field)
        if last is not c:
            continue
        seen.add(c.field)
        value = case.value(c.field) if c.decided else c.resolved
        if c.decided and _same(value, c.asked if c.was_asked else c.default):
            continue
        items.append(_Item(p, c.asked, c.was_asked, value, c.default, c.site, c.rule, c.guard, c.decided, c.needs))
    if res is not None and res.how == "read" or (res is not None and res.kept and ev.explicit):
        items += _read_against_asked(case, perf, seen)
    items.sort(key=lambda i: (not i.decided, _rank(i.perf.category), i.perf.field))
    case.__dict__["_sglang_changed"] = items
    return items


def _read_against_asked(case: Case, perf: dict, seen: set) -> list[_Item]:
    """A server_args line or /server_info beside the launch: fields it reports other than asked."""
    ev = case.ev
    out = []
    for name, asked in (ev.explicit or {}).items():
        p = perf.get(name)
        if p is None or name in seen or not case.has(name) or _same(case.value(name), asked):
            continue
        fired = case.resolved_by(name)
        site = fired[-1] if fired else None
        out.append(_Item(p, asked, True, case.value(name), case.cli_defaults.get(name),
                         short_path(site.where) if site else "", site.rule if site else "",
                         " and ".join(g.condition for g in site.guards) if site else ""))
        seen.add(name)
    return out


def _open(case: Case) -> list[_Item]:
    return [i for i in sglang_changed(case) if i.perf.field not in case.covered
            and i.perf.field.split(".")[0] not in case.covered]


def _keeps(case: Case, item: _Item) -> str:
    """The flag that keeps the asked value (kit.provenance.escapes), if the release has one. Only for a value the
    launch asked for: a default sglang replaced has no asked value to keep, and each escape costs a provenance read."""
    if not item.asked_known:
        return ""
    exp = case.explain(item.perf.field)
    if exp is None:
        return ""
    from kit.provenance import escapes

    try:
        found = escapes(case.ev.tree, exp, sites=[s for s in exp.fired if s.where.endswith(item.site)])
    except KitError:
        return ""
    return "; ".join(str(e) for e in found)


def _line(case: Case, item: _Item) -> str:
    p = item.perf
    was = (f"the launch asked {item.asked!r}" if item.asked_known else
           f"not asked (default {item.default!r})")
    where = f" at {item.site}" if item.site else ""
    if not item.decided:  # the condition and each unread input are in `sgl-kit why FIELD`: here, what decides it
        rule_ = f" ({clip(item.rule, 90)})" if item.rule else ""
        needs = clip((item.needs or "more evidence").split(": line ")[0], 160)
        return f"[{p.category}] {p.field}: {was}; sglang may set it to {item.value}{where}{rule_}; undecided, needs {needs}"
    why = "; ".join(x for x in (item.rule, f"when {item.guard}" if item.guard else "") if x)
    why = f" ({why})" if why else ""
    keep = _keeps(case, item)
    help_ = f"; its help: \"{clip(p.help, 140)}\"" if p.help else ""
    return (f"[{p.category}] {p.field} = {item.value!r}: {was}; sglang set it{where}{why}; effect: {p.effect}"
            f"{help_}" + (f"; the flag that keeps it: {keep}" if keep else ""))


def _when(case: Case) -> list[str] | None:
    items = _open(case)
    if not any(i.decided for i in items):
        return None
    res = case.ev.resolution
    how = ({"static": "its own code, read statically", "dry-run": "a dry-run of its own code"}.get(res.how, res.how)
           if res is not None else "the server's reported values against the launch")
    head = f"sglang {case.ev.version or ''} resolved the launch by {how}".replace("  ", " ")
    return [head] + [_line(case, i) for i in items]


def _sites(case: Case) -> list[str]:
    return [i.site for i in _open(case) if i.decided and i.site]


def _fix(case: Case):
    advice = []
    for i in _open(case):
        if i.decided and i.asked_known:
            advice.append(f"{i.perf.field}: the launch asked {i.asked!r}; sglang's rule at {i.site} overrides it"
                          + (f"; {_keeps(case, i)} keeps it" if _keeps(case, i) else "; no flag keeps it in this "
                             "release: change what the rule's condition reads"))
    advice.append("check each change against the launch's intent; `sgl-kit why FIELD --sglang VERSION --command "
                  "FILE` shows the rule and its guards")
    return [], advice, []


sglang_changed_rule = rule(Rule(
    "sglang-changed-settings", "sglang changed performance settings of this launch", ALL_VERSIONS,
    ("command", "source", "args"),
    when=_when,
    impact=lambda case: not_estimated("a setting sglang changes is not modelled by itself; the rules that model "
                                      "one report it on their own", "decode tok/s",
                                      "a benchmark of the launch with the setting kept as asked (sgl-kit bench)"),
    fix=_fix, sites=_sites, affects=("decode step", "scheduling", "prefill/extend"),
    covers=lambda case: {i.perf.field for i in _open(case) if i.decided}, after="findings", context=True,
    uses=("version", "model_config", "hardware", "environ", "notices", "capacity", "decode")))
