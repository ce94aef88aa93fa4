"""What the known-issues database says of one deployment (``report``: matches, partial matches, and with an
upgrade target what it fixes and brings), as text, JSON and a table; and the database's coverage tables of
docs/known-issues.md. The database and the matcher are :mod:`kit.doctor.known_issues`.

    from kit.doctor import known_issues as ki, known_report
    found = known_report.report(ki.evidence_for("0.5.9", "h100"), upgrade_to="0.5.23")
    found.to_text(); found.to_dict(); found.to_frame("fixes")
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kit._text import wrap
from kit._versions import key as version_key

from .known_issues import AREAS, Match, first_source, gpu_facts, load, match, release_or_none

__all__ = ["Report", "coverage_table", "for_launch", "recent_table", "report"]


@dataclass
class Report:
    """What the database knows of one deployment: matches, partial matches (with what to send), and with
    an upgrade target, what the upgrade fixes and what it brings."""

    version: str
    matches: list[Match]
    partial: list[Match]
    problems: list[str]
    gpus: list[dict]
    model: str | None
    entries: int
    upgrade_to: str | None = None
    fixes: list[Match] = field(default_factory=list)
    brings: list[Match] = field(default_factory=list)
    hardware: list[str] = field(default_factory=list)  # what this release does on the GPU (kit.doctor.gpu_support)
    hardware_after: list[str] = field(default_factory=list)  # the same for the upgrade target

    def to_dict(self) -> dict:
        out = {"sglang": self.version, "gpus": self.gpus, "model": self.model, "entries": self.entries,
               "matches": [m.to_dict() for m in self.matches], "partial": [m.to_dict() for m in self.partial],
               "problems": list(self.problems), "hardware": list(self.hardware)}
        if self.upgrade_to:
            out["upgrade"] = {"to": self.upgrade_to, "fixes": [m.to_dict() for m in self.fixes],
                              "brings": [m.to_dict() for m in self.brings], "hardware": list(self.hardware_after)}
        return out

    def to_frame(self, which: str = "matches"):
        """One row per entry of ``which`` (matches, partial, fixes or brings): id, status, title, affected,
        fixed in, the traffic it needs, the first source."""
        import pandas as pd

        rows = [{"id": m.id, "status": m.status, "title": " ".join(str(m.entry.get("title", "")).split()),
                 "affected": m.entry.get("affected"), "fixed in": m.entry.get("fixed_in"),
                 "only with": m.entry.get("workload") or "", "source": first_source(m.entry)}
                for m in getattr(self, which)]
        return pd.DataFrame(rows, columns=["id", "status", "title", "affected", "fixed in",
                                           "only with", "source"])

    def upgrade_lines(self, width: int = 110) -> list[str]:
        """What the upgrade fixes and brings, as `sgl-kit upgrade-diff` prints it after its settings."""
        def item(text: str) -> str:  # indented as the settings above it
            return wrap(text, width, "  ", "      ")

        out = []
        if self.hardware and self.hardware_after:
            for version, lines in ((self.version, self.hardware), (self.upgrade_to, self.hardware_after)):
                out += ["", f"SGLANG {version} ON THIS GPU (its source and the GPU's data)"]
                out += [item(line) for line in lines if version == self.version
                        or not line.startswith(("tensor formats", "links"))]
        for title, items in ((f"KNOWN ISSUES FIXED BY THE UPGRADE ({len(self.fixes)})", self.fixes),
                             (f"KNOWN ISSUES THE UPGRADE BRINGS ({len(self.brings)})", self.brings)):
            out += ["", title]
            out += [item(f"{m.id} [{m.status}]: {str(m.entry.get('title', '')).strip()} ({first_source(m.entry)})"
                         + (f"; only with {m.entry['workload']}" if m.entry.get("workload") else ""))
                    for m in items] or ["  (none)"]
        if self.fixes or self.brings:
            out.append(item("[partial]: a key of its trigger is unknown here (the GPU, the model): `sgl-kit known-issues "
                            f"--sglang {self.version} --upgrade-to {self.upgrade_to}` with --gpu and --model says what "
                            "each needs"))
        return out

    def _repr_html_(self) -> str:
        import html as _html

        parts = [f"<p><b>{_html.escape(self.to_text().splitlines()[0])}</b></p>"]
        parts += [f"<p style='color:#a00'>{_html.escape(p)}</p>" for p in self.problems]
        parts.append(self.hardware_html())
        sections = [("Matches", "matches"), ("May apply (not checked)", "partial")]
        if self.upgrade_to:
            sections += [(f"Fixed by upgrading to {self.upgrade_to}", "fixes"),
                         (f"Brought by upgrading to {self.upgrade_to}", "brings")]
        for title, which in sections:
            frame = self.to_frame(which)
            parts.append(f"<p><b>{_html.escape(title)} ({len(frame)})</b></p>"
                         + (frame.to_html(index=False) if len(frame) else "<p>none</p>"))
        return "<div>" + "".join(parts) + "</div>"

    def hardware_html(self) -> str:
        """What the release (and the upgrade target) does on the GPU, as HTML lists ('' without a GPU)."""
        import html as _html

        return "".join(f"<p><b>sglang {_html.escape(str(version))} on this GPU</b></p><ul>"
                       + "".join(f"<li>{_html.escape(line)}</li>" for line in lines) + "</ul>"
                       for version, lines in ((self.version, self.hardware), (self.upgrade_to, self.hardware_after))
                       if lines)

    def to_text(self) -> str:
        gpus = ", ".join(f"{g['name']} ({g['vendor'] or 'vendor unknown'}, "
                         f"{'SM' + str(g['sm']) if g['sm'] else g['gfx'] or 'SM unknown'})" for g in self.gpus)
        out = [f"known issues for sglang {self.version}" + (f" on {gpus}" if gpus else " (GPU not given)")
               + (f" with {self.model}" if self.model else "") + f": {len(self.matches)} match, "
               f"{len(self.partial)} may apply ({self.entries} entries in the database)"]
        out += [f"  ! {p}" for p in self.problems]
        if self.hardware:
            out += ["", "this release on this GPU (read from its source and the GPU's data):"]
            out += [f"  - {line}" for line in self.hardware]
        if self.upgrade_to and self.hardware_after:
            out += ["", f"sglang {self.upgrade_to} on this GPU, for comparison:"]
            out += [f"  - {line}" for line in self.hardware_after if not line.startswith(("tensor formats", "links"))]
        out += _section("matches", self.matches, _match_lines)
        out += _section("may apply (not checked: send what each needs)", self.partial, _partial_lines)
        if self.upgrade_to:
            out += _section(f"fixed by upgrading to {self.upgrade_to} (they affect {self.version}, not "
                            f"{self.upgrade_to})", self.fixes, _short_lines)
            out += _section(f"brought by upgrading to {self.upgrade_to} (they affect {self.upgrade_to}, not "
                            f"{self.version})", self.brings, _short_lines)
        return "\n".join(out) + "\n"


def _section(title: str, items: list[Match], lines) -> list[str]:
    out = ["", f"{title}:"]
    if not items:
        return out + ["  none"]
    for m in items:
        out += lines(m)
    return out


def _short_lines(m: Match) -> list[str]:
    e = m.entry
    return [f"- {m.id} [{m.status}]: {str(e.get('title', '')).strip()}",
            f"    affected {e.get('affected')}, "
            + ("no fix known" if e.get("fixed_in") in (None, "unfixed") else f"fixed in {e.get('fixed_in')}")
            + f"; {', '.join(e.get('sources') or [])}"] + (
        [f"    only with {' '.join(str(e['workload']).split())}"] if e.get("workload") else [])


def _match_lines(m: Match) -> list[str]:
    e = m.entry
    fix = e.get("fix") or {}
    out = _short_lines(m) + [f"    {c.fact}" for c in m.held]
    change = (e.get("symptom") or {}).get("change")
    if change:
        out.append(f"    measured elsewhere: {str(change).strip()}")
    if fix.get("upgrade_to") or fix.get("workaround"):
        out.append("    fix: " + "; ".join(([f"upgrade to {fix['upgrade_to']}"] if fix.get("upgrade_to") else [])
                                          + [f"workaround {w}" for w in fix.get("workaround") or []]))
    if e.get("notes") or e.get("note"):
        out.append(f"    note: {' '.join(str(e.get('notes') or e.get('note')).split())}")
    return out


def _partial_lines(m: Match) -> list[str]:
    return _short_lines(m) + [f"    holds: {c.fact}" for c in m.held] + \
        [f"    not checked: {c.key}: needs {c.needs}" for c in m.unknown]


def for_launch(version: str, args: dict, how: str, *, upgrade_to: str | None = None, gpu=None, model=None,
               tp: int | None = None, tree=None) -> Report:
    """The report for a launch already resolved elsewhere (``args``: its fields, ``how``: by what), on ``gpu``
    with ``model`` (a config.json, a directory or a hub id): `upgrade-diff` gives the first release's resolution."""
    from .evidence import Evidence
    from .known_issues import evidence_for

    ev = Evidence("upgrade-diff")
    ev.args, ev.sources["args"], ev.tree = dict(args), how, tree
    ev = evidence_for(version, gpu, None if model is None else str(model), count=tp or 1, evidence=ev)
    return report(ev, upgrade_to=upgrade_to)


def report(evidence, upgrade_to: str | None = None, entries: list[dict] | None = None) -> Report:
    """The database against one deployment's evidence (evidence_for, or kit.doctor.from_files)."""
    from copy import copy

    from .case import Case

    entries = load() if entries is None else entries
    case = Case(evidence)
    found = [match(e, case) for e in entries]
    out = Report(evidence.version or "?", [m for m in found if m.status == "matches"],
                 [m for m in found if m.status == "partial"], list(evidence.problems), gpu_facts(case),
                 evidence.sources.get("model_config"), len(entries), upgrade_to)
    gpu = getattr(evidence.hardware, "gpu_name", None)
    if gpu and evidence.version:
        from .gpu_support import gpu_lines

        out.hardware = gpu_lines(evidence.version, gpu)
        if upgrade_to:
            out.hardware_after = gpu_lines(upgrade_to, gpu)
    if upgrade_to:
        later = copy(evidence)
        later.version, later.sources = upgrade_to, {**evidence.sources, "version": "--upgrade-to"}
        after = [match(e, Case(later)) for e in entries]
        for now, then in zip(found, after, strict=True):
            if now.status != "no" and then.check("release").status == "not held":
                out.fixes.append(now)
            elif then.status != "no" and now.check("release").status == "not held":
                out.brings.append(then)
    return out


# --------------------------------------------------------------------------- coverage (docs/known-issues.md)

_BANDS = (("0.3.x", "0.3", "0.4"), ("0.4.x", "0.4", "0.5"), ("0.5.0-0.5.9", "0.5", "0.5.10"),
          ("0.5.10 and newer", "0.5.10", "9"))


def _first_affected(entry: dict) -> str | None:
    """The lowest release ``affected`` names with >= or ==, or None (an open lower end: "<0.3.6")."""
    found = [r for op, r in re.findall(r"(>=|==|>)\s*([\d][\w.]*)", str(entry.get("affected") or ""))]
    return min(found, key=version_key) if found else None


def coverage_table(entries: list[dict] | None = None) -> str:
    """Entries by the release band of their first affected release and by area (a markdown table)."""
    entries = load() if entries is None else entries
    bands = [b[0] for b in _BANDS] + ["open lower end"]

    def band(entry: dict) -> str:
        first = _first_affected(entry)
        if first is None:
            return "open lower end"
        return next(name for name, lo, hi in _BANDS if version_key(lo) <= version_key(first) < version_key(hi))

    rows = ["| first affected | " + " | ".join(AREAS) + " | all |", "| --- |" + " --- |" * (len(AREAS) + 1)]
    for b in bands:
        mine = [e for e in entries if band(e) == b]
        rows.append(f"| {b} | " + " | ".join(str(sum(e["area"] == a for e in mine)) for a in AREAS)
                    + f" | {len(mine)} |")
    rows.append("| all | " + " | ".join(str(sum(e["area"] == a for e in entries)) for a in AREAS)
                + f" | {len(entries)} |")
    return "\n".join(rows)


def recent_table(n: int = 20, entries: list[dict] | None = None) -> str:
    """The ``n`` entries of the newest releases (by their fix release, or their first affected one when
    unfixed), as a markdown table."""
    entries = load() if entries is None else entries

    def newest(entry: dict) -> tuple:
        fixed = release_or_none(entry.get("fixed_in"))
        first = _first_affected(entry)
        return version_key(fixed or first or "0")

    rows = ["| id | area | affected | fixed in | confidence |", "| --- | --- | --- | --- | --- |"]
    for e in sorted(entries, key=lambda e: (newest(e), e["id"]), reverse=True)[:n]:
        rows.append(f"| `{e['id']}` | {e['area']} | `{e['affected']}` | {e.get('fixed_in')} | {e['confidence']} |")
    return "\n".join(rows)
