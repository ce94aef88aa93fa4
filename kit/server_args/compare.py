"""classify and diff: which values a server runs by default, by flag, or because SGLang decided."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import MISSING, pandas
from .defaults import FieldDefault
from .snapshot import ServerArgsSnapshot
from .values import NonLiteral, same_value


def _fields_of(x: ServerArgsSnapshot | Mapping[str, Any]) -> Mapping[str, Any]:
    return x.fields if isinstance(x, ServerArgsSnapshot) else x


CLASSIFY_COLUMNS = ("flag", "default", "default_from", "cli", "effective", "origin")


def classify(
    snapshot: ServerArgsSnapshot | Mapping[str, Any],
    explicit: Mapping[str, Any],
    defaults: Mapping[str, FieldDefault | Any],
):
    """One row per field: flag, default, default_from, cli (NA if not given), effective, origin.

    origin: `default`; `explicit` (given and kept); `explicit-overridden` (given, but the
    server runs another value); `auto-changed` (not given, yet the server runs a value
    other than the default: something in SGLang decided it). A field whose default
    cannot be known from the source counts as `default`. `default_from` says whose
    default it is (`argparse` or `dataclass`, from kit.server_args.cli_defaults /
    defaults; empty when plain values were given).
    """
    pd = pandas()
    rows = classify_rows(snapshot, explicit, defaults, na=pd.NA)
    return pd.DataFrame(rows, columns=list(CLASSIFY_COLUMNS))


def classify_rows(
    snapshot: ServerArgsSnapshot | Mapping[str, Any],
    explicit: Mapping[str, Any],
    defaults: Mapping[str, FieldDefault | Any],
    na: Any = None,
) -> list[tuple]:
    """classify() as plain tuples in CLASSIFY_COLUMNS' order, ``na`` where the table has NA: what a
    command line prints, without importing pandas (a third of a second)."""
    effective = _fields_of(snapshot)
    names = list(effective) + [k for k in explicit if k not in effective]
    return [_classify_row(n, effective, explicit, defaults, na) for n in names]


def _classify_row(name: str, effective: Mapping, explicit: Mapping, defaults: Mapping, na: Any) -> tuple:
    fd = defaults.get(name, MISSING)
    known = fd is not MISSING and (not isinstance(fd, FieldDefault) or fd.known)
    default = (fd.value if isinstance(fd, FieldDefault) else fd) if known else na
    eff = effective.get(name, MISSING)
    if name in explicit:
        origin = "explicit" if eff is MISSING or same_value(eff, explicit[name]) else "explicit-overridden"
    elif eff is MISSING or not known or same_value(eff, default):
        origin = "default"
    else:
        origin = "auto-changed"
    default_from = fd.origin if isinstance(fd, FieldDefault) else ""
    return (name, default, default_from, explicit[name] if name in explicit else na,
            na if eff is MISSING else eff, origin)


def diff(a: ServerArgsSnapshot | Mapping[str, Any], b: ServerArgsSnapshot | Mapping[str, Any]):
    """Fields whose values differ between two snapshots or two parsed commands: flag, a, b.

    Nested values (`CudaGraphConfig(...)`, dicts) are compared leaf by leaf under dotted
    names; a field present on one side only shows NA on the other.
    """
    pd = pandas()
    fa, fb = flatten(_fields_of(a)), flatten(_fields_of(b))
    names = list(fa) + [k for k in fb if k not in fa]
    rows = [
        (k, fa.get(k, pd.NA), fb.get(k, pd.NA))
        for k in names
        if not (k in fa and k in fb and same_value(fa[k], fb[k]))
    ]
    return pd.DataFrame(rows, columns=["flag", "a", "b"])


def flatten(fields: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        name = f"{prefix}{key}"
        nested = _nested(value)
        if nested:
            out.update(flatten(nested, name + "."))
        else:
            out[name] = value
    return out


def _nested(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, NonLiteral) and value.kwargs and not value.args:
        return value.kwargs
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        return value
    return None
