"""Two deployments side by side: what their launches asked differently, and what SGLang resolved.

Each side is what one witness says about a server: a launch command (what was asked; its
resolved values come from the dry-run when it can run, else from the defaults), a log line
or a `/server_info` (what the server ran, but not which of it was asked). Rows whose two
sides are equal are never printed; fields SGLang changed on its own on both sides are
named once, as context.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kit._text import clip, plain, wrap

from .common import MISSING
from .compare import flatten
from .values import NonLiteral, same_value

__all__ = ["LaunchDiff", "LaunchSide", "launch_diff"]

# Fields that differ between any two starts: a fresh random seed every time.
VOLATILE = ("random_seed",)


@dataclass
class LaunchSide:
    """What one witness says about one deployment.

    ``explicit``: the fields its command set (None for a log or /server_info, which do not
    say). ``defaults``: the argparse defaults of its sglang (kit.server_args.cli_defaults),
    to tell a default from a change. ``changed``: field -> sglang's file:line, for values
    the dry-run saw SGLang change at startup. ``method`` says how ``resolved`` was obtained.
    """

    label: str
    kind: str  # "command", "log" or "server_info"
    resolved: Mapping[str, Any]
    method: str
    explicit: Mapping[str, Any] | None = None
    defaults: Mapping[str, Any] | None = None
    changed: Mapping[str, str] = field(default_factory=dict)
    # What the witness does not tell: ``unknown`` fields (a flag set to `${PORT}`), or, when
    # ``partial``, every field it lacks (a cut-off server_args line, a log of Decode batch lines).
    unknown: Collection[str] = ()
    partial: bool = False
    problems: list[str] = field(default_factory=list)  # what could not be read, in words
    decode: Mapping[str, Any] | None = None  # kit.server_args.decode_summary of its log

    def lacks(self, name: str) -> bool:
        top = name.split(".")[0]
        return top in self.unknown or (self.partial and top not in self.resolved)

    def origin(self, name: str, value: Any) -> str:
        top = name.split(".")[0]
        if self.explicit is not None and top in self.explicit:
            return "asked"
        if name in self.changed or top in self.changed:
            return f"SGLang set it ({self.changed.get(name) or self.changed.get(top)})"
        fd = self.defaults.get(top) if self.defaults is not None else None
        if fd is not None and getattr(fd, "known", False) and top == name:
            if same_value(fd.value, value):
                return "default"
            return "not the default" if self.explicit is None else "resolved"
        return "" if self.explicit is None else "default"


@dataclass
class DiffRow:
    group: str  # "asked", "resolved" or "volatile"
    flag: str
    a: Any
    a_origin: str
    b: Any
    b_origin: str


@dataclass
class LaunchDiff:
    a: LaunchSide
    b: LaunchSide
    rows: list[DiffRow]
    # Equal on both sides and at the default on neither: (field, its default or MISSING, value, where set).
    same_changed: list[tuple[str, Any, Any, str]]

    @property
    def shown(self) -> list[DiffRow]:
        return [r for r in self.rows if r.group != "volatile"]

    def __repr__(self) -> str:
        groups = {g: sum(r.group == g for r in self.rows) for g in ("asked", "resolved", "volatile")}
        return f"<LaunchDiff {self.a.label} vs {self.b.label}: {groups['asked']} asked, {groups['resolved']} resolved>"

    def to_dict(self) -> dict:
        def side(s: LaunchSide) -> dict:
            return {"label": s.label, "kind": s.kind, "method": s.method}

        return {"a": side(self.a), "b": side(self.b),
                "rows": [{"group": r.group, "flag": r.flag, "a": plain(r.a, _shown), "a_origin": r.a_origin,
                          "b": plain(r.b, _shown), "b_origin": r.b_origin} for r in self.rows],
                "same_changed": [{"flag": n, "default": plain(_missing(d), _shown), "value": plain(v, _shown), "where": w}
                                 for n, d, v, w in self.same_changed]}

    def to_text(self, everything: bool = False, width: int = 100) -> str:
        rows = self.rows if everything else self.shown
        out = [f"A: {self.a.label} ({self.a.method})", f"B: {self.b.label} ({self.b.method})", ""]
        titles = {"asked": "asked differently (flags on the launch command)",
                  "resolved": "resolved differently at startup (no flag on either side names them)",
                  "volatile": "different on every start"}
        name_w = min(40, max([len(r.flag) for r in rows] + [4]))
        for group in ("asked", "resolved", "volatile"):
            members = [r for r in rows if r.group == group]
            if not members:
                continue
            out.append(titles[group] + ":")
            for r in members:
                a = _cell(r.a, r.a_origin)
                b = _cell(r.b, r.b_origin)
                out.append(f"  {clip(r.flag, name_w):<{name_w}}  {clip(a, 34):<34} -> {clip(b, 34)}")
            out.append("")
        if not rows:
            out += ["no differences in what the two deployments run", ""]
        hidden = [r.flag for r in self.rows if r.group == "volatile"]
        if hidden and not everything:
            out.append(f"not shown: {', '.join(hidden)} (different on every start; --all shows it)")
        out += self._same_changed_text(width)
        return "\n".join(out).rstrip() + "\n"

    def _same_changed_text(self, width: int) -> list[str]:
        if not self.same_changed:
            return []
        replaced = [f"{n} {clip(_shown(d), 40)} -> {clip(_shown(v), 40)}" + (f" ({w})" if w else "")
                    for n, d, v, w in self.same_changed if d is not MISSING and d is not None]
        filled = [n for n, d, _, _ in self.same_changed if d is MISSING or d is None]
        out = ["the same on both sides, and not at their defaults (set at startup, or by a flag on both):"]
        if replaced:
            out.append(wrap("changed from a default: " + "; ".join(replaced), width, "  ", "    "))
        if filled:
            out.append(wrap("filled in where the default is None: " + ", ".join(filled), width, "  ", "    "))
        return out

    def _repr_html_(self) -> str:
        e = html.escape
        body = "".join(f"<tr><td>{e(r.group)}</td><td><code>{e(r.flag)}</code></td>"
                       f"<td>{e(_cell(r.a, r.a_origin))}</td><td>{e(_cell(r.b, r.b_origin))}</td></tr>"
                       for r in self.rows)
        same = f"<p>the same on both sides, and not at their defaults: {e(', '.join(self.same_changed))}</p>"
        return (f"<div><p>A: <code>{e(self.a.label)}</code> ({e(self.a.method)})<br>B: <code>{e(self.b.label)}"
                f"</code> ({e(self.b.method)})</p><table><tr><th>group</th><th>flag</th><th>A</th><th>B</th></tr>"
                f"{body}</table>{same if self.same_changed else ''}</div>")


def launch_diff(a: LaunchSide, b: LaunchSide, volatile: tuple[str, ...] = VOLATILE) -> LaunchDiff:
    """The differing fields of two sides, grouped; equal fields are never rows."""
    fa, fb = flatten(a.resolved), flatten(b.resolved)
    rows, same_changed = [], []
    for name in list(fa) + [k for k in fb if k not in fa]:
        va, vb = fa.get(name, MISSING), fb.get(name, MISSING)
        top = name.split(".")[0]
        if (va is MISSING or top in a.unknown) and a.lacks(name) or (vb is MISSING or top in b.unknown) and b.lacks(name):
            continue  # one side does not tell: not a difference
        if va is not MISSING and vb is not MISSING and same_value(va, vb):
            oa, ob = a.origin(name, va), b.origin(name, vb)
            if oa not in ("default", "asked", "") and ob not in ("default", "asked", "") and top not in volatile:
                where = a.changed.get(name) or a.changed.get(top) or b.changed.get(name) or b.changed.get(top) or ""
                same_changed.append((name, _default(a, top) if top == name else MISSING, va, where))
            continue
        asked = any(s.explicit is not None and top in s.explicit for s in (a, b))
        group = "volatile" if top in volatile else "asked" if asked else "resolved"
        rows.append(DiffRow(group, name, _missing(va), a.origin(name, va) if va is not MISSING else "absent",
                            _missing(vb), b.origin(name, vb) if vb is not MISSING else "absent"))
    return LaunchDiff(a, b, rows, same_changed)


def _default(side: LaunchSide, name: str) -> Any:
    fd = side.defaults.get(name) if side.defaults is not None else None
    return fd.value if fd is not None and getattr(fd, "known", False) else MISSING


def _shown(value: Any) -> str:
    """A value as the launch wrote it: a NonLiteral's own text, anything else its repr."""
    return value.text if isinstance(value, NonLiteral) else repr(value)


def _missing(value: Any) -> Any:
    return None if value is MISSING else value


def _cell(value: Any, origin: str) -> str:
    text = _shown(value)
    return f"{text} ({origin})" if origin else text
