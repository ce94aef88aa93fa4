"""Two sweeps compared: each one's Pareto front, and where one dominates the other, computed from the numbers.

A sweep trades one user's speed (per-request decode tok/s) for the server's total (output tok/s): more
concurrency, more in all and less each. A point is on its sweep's Pareto front when no other point of
the same sweep has at least as much of both and more of one. Between two sweeps, at each concurrency both
measured, B dominates A when B has at least as much of both and more of one; "more" means more than
``tolerance`` (default 3%) apart, so that the noise of a short run is not read as a difference, and the
statement says the tolerance it used. ``compare_sweeps(a, b)`` says where each dominates, where they
trade, and whether one front dominates the other (every point of one front matched or beaten on both
by a point of the other).
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import BenchError

from .sweeps import Sweep, SweepPoint, pareto_front, rated

__all__ = ["SweepComparison", "compare_sweeps", "pareto_front"]

_METRICS = (("total_tok_s", "total tok/s"), ("per_request_tok_s", "per-request tok/s"))


def _side(b: float, a: float, tolerance: float) -> int:
    """+1 when b is more than ``tolerance`` above a, -1 below, 0 within."""
    if b > a * (1 + tolerance):
        return 1
    if b < a * (1 - tolerance):
        return -1
    return 0


@dataclass
class Level:
    """One concurrency both sweeps measured: each one's numbers and how B stands against A on each."""

    concurrency: int
    a: SweepPoint
    b: SweepPoint
    total: int  # +1: B more total tok/s, -1: less, 0: within the tolerance
    per_request: int

    @property
    def dominant(self) -> str | None:
        """``"B"`` or ``"A"`` when one has at least as much of both and more of one, else None."""
        sides = (self.total, self.per_request)
        if min(sides) >= 0 and max(sides) > 0:
            return "B"
        if max(sides) <= 0 and min(sides) < 0:
            return "A"
        return None

    def phrase(self, tolerance: float) -> str:
        """How B stands against A here, in words."""
        same = f"within {tolerance:.0%}"
        t, r = self.total, self.per_request
        if self.dominant:
            win = 1 if self.dominant == "B" else -1
            more = [label for (_, label), side in zip(_METRICS, (t, r), strict=True) if side == win]
            level = [label for (_, label), side in zip(_METRICS, (t, r), strict=True) if side == 0]
            return (f"{self.dominant} dominates: more {' and more '.join(more)}"
                    + (f", the same {level[0]} ({same})" if level else ""))
        if t == 1 and r == -1:
            return "B gives more total tok/s at a lower per-request rate (a trade: neither dominates)"
        if t == -1 and r == 1:
            return "B gives more per-request tok/s at less total tok/s (a trade: neither dominates)"
        return f"neither dominates: the same total and per-request tok/s ({same})"

    def to_dict(self) -> dict:
        return {"concurrency": self.concurrency, "dominant": self.dominant, "total": self.total,
                "per_request": self.per_request,
                "a": {"total_tok_s": self.a.total_tok_s, "per_request_tok_s": self.a.per_request_tok_s,
                      "ttft_mean_ms": self.a.ttft_mean_ms},
                "b": {"total_tok_s": self.b.total_tok_s, "per_request_tok_s": self.b.per_request_tok_s,
                      "ttft_mean_ms": self.b.ttft_mean_ms}}


@dataclass
class SweepComparison:
    """Sweep B against sweep A: each front, each shared concurrency, and the statements drawn from them."""

    a: Sweep
    b: Sweep
    tolerance: float
    levels: list[Level]
    front_a: list[SweepPoint]
    front_b: list[SweepPoint]
    statements: list[str] = field(default_factory=list)
    dominates: str | None = None  # "A" or "B" when it dominates at every shared concurrency, else None
    front_dominates: str | None = None  # "A" or "B" when its front covers the other's, else None

    @property
    def headline(self) -> str:
        return self.statements[0] if self.statements else "nothing to compare"

    def to_text(self) -> str:
        out = [f"A: {self.a.name} ({self.a.manifest})", f"B: {self.b.name} ({self.b.manifest})", ""]
        head = ["concurrency", "A total tok/s", "B total tok/s", "A per-request", "B per-request", "A TTFT ms",
                "B TTFT ms", "B against A"]
        rows = [[str(v.concurrency), _num(v.a.total_tok_s), _num(v.b.total_tok_s), _num(v.a.per_request_tok_s),
                 _num(v.b.per_request_tok_s), _num(v.a.ttft_mean_ms, 1), _num(v.b.ttft_mean_ms, 1),
                 v.dominant + " dominates" if v.dominant else "neither"] for v in self.levels]
        if rows:
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
            out.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
            out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
            out.append("")
        out += self.statements
        for name, front in (("A", self.front_a), ("B", self.front_b)):
            out.append(f"{name}'s Pareto front (per-request and total tok/s): concurrency "
                       + (", ".join(str(p.concurrency) for p in front) or "none"))
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {"a": {"name": self.a.name, "manifest": str(self.a.manifest)},
                "b": {"name": self.b.name, "manifest": str(self.b.manifest)},
                "tolerance": self.tolerance, "dominates": self.dominates, "front_dominates": self.front_dominates,
                "statements": list(self.statements), "levels": [v.to_dict() for v in self.levels],
                "front_a": [p.concurrency for p in self.front_a], "front_b": [p.concurrency for p in self.front_b]}

    def __repr__(self) -> str:
        return f"<SweepComparison B {self.b.name} against A {self.a.name}: {self.headline}>"

    def _repr_html_(self) -> str:
        return "<div>" + "<br>".join(html.escape(line) for line in self.to_text().splitlines()) + "</div>"

    def plot(self):
        from kit.display import sweep_fronts

        return sweep_fronts({f"A: {self.a.name}": self.a, f"B: {self.b.name}": self.b},
                            fronts={f"A: {self.a.name}": self.front_a, f"B: {self.b.name}": self.front_b},
                            title=self.headline)

    def save(self, path: str | os.PathLike) -> Path:
        """The comparison as JSON (to_dict)."""
        from kit._paths import write_json

        return write_json(path, self.to_dict())

    def save_html(self, path: str | os.PathLike) -> Path:
        """One self-contained page (plotly.js inlined, so it opens offline): the statements and the plot."""
        fig = self.plot()
        body = fig.to_html(full_html=False, include_plotlyjs=True)
        text = html.escape(self.to_text())
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.headline)}</title>"
                f"</head><body><pre style='white-space:pre-wrap'>{text}</pre>{body}</body></html>")
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
        return out


def compare_sweeps(a: Sweep | str | os.PathLike, b: Sweep | str | os.PathLike, *,
                   tolerance: float = 0.03) -> SweepComparison:
    """B against A (each a Sweep, its directory or its sweep.json): see the module."""
    if not 0 <= tolerance < 1:
        raise BenchError(f"tolerance must be in [0, 1), not {tolerance!r}", hint="e.g. 0.03 (3%)")
    sa, sb = (x if isinstance(x, Sweep) else Sweep.load(x) for x in (a, b))
    rated_a, rated_b = ({p.concurrency: p for p in rated(s.points)} for s in (sa, sb))
    shared = sorted(set(rated_a) & set(rated_b))
    levels = [Level(c, rated_a[c], rated_b[c], _side(rated_b[c].total_tok_s, rated_a[c].total_tok_s, tolerance),
                    _side(rated_b[c].per_request_tok_s, rated_a[c].per_request_tok_s, tolerance)) for c in shared]
    front_a, front_b = pareto_front(sa.points), pareto_front(sb.points)
    result = SweepComparison(sa, sb, tolerance, levels, front_a, front_b)
    result.statements, result.dominates = _statements(levels, tolerance, rated_a, rated_b)
    result.front_dominates = _front_dominance(front_a, front_b, tolerance)
    if result.front_dominates:
        other = "A" if result.front_dominates == "B" else "B"
        result.statements.append(f"{result.front_dominates}'s front dominates {other}'s: every point of {other}'s "
                                 f"front is matched or beaten on both by one of {result.front_dominates}'s "
                                 f"(within {tolerance:.0%})")
    elif front_a and front_b:
        same = _matches(front_a, front_b, tolerance) and _matches(front_b, front_a, tolerance)
        result.statements.append(f"the two Pareto fronts match within {tolerance:.0%}" if same else
                                 "neither front dominates the other: each has a point the other does not match "
                                 "on both")
    return result


def _statements(levels: list[Level], tolerance: float, rated_a: dict, rated_b: dict) -> tuple[list[str], str | None]:
    only_a, only_b = sorted(set(rated_a) - set(rated_b)), sorted(set(rated_b) - set(rated_a))
    extra = []
    if only_a:
        extra.append(f"concurrency {_list(only_a)} only in A: not compared")
    if only_b:
        extra.append(f"concurrency {_list(only_b)} only in B: not compared")
    if not levels:
        return ["no concurrency measured by both (with a decode rate): nothing to compare", *extra], None
    every = f"every concurrency measured ({_list([v.concurrency for v in levels])})"
    dominant = {v.dominant for v in levels}
    if len(dominant) == 1 and None not in dominant:
        who = levels[0].dominant
        phrases = {v.phrase(tolerance) for v in levels}
        how = phrases.pop().split(": ", 1)[1] if len(phrases) == 1 else \
            "at least as much of both, and more of one"
        other = "A" if who == "B" else "B"
        return [f"{who} dominates {other} at {every}: {how}", *extra], who
    if all(v.total == 0 and v.per_request == 0 for v in levels):
        return [f"neither dominates: total and per-request tok/s within {tolerance:.0%} at {every}", *extra], None
    out = ["neither dominates at " + every + ":"]
    for first, last, phrase in _runs(levels, tolerance):
        out.append(f"  {_span(first, last, levels)}: {phrase}")
    return out + extra, None


def _runs(levels: list[Level], tolerance: float) -> list[tuple[int, int, str]]:
    """Consecutive shared concurrencies with the same phrase, as (first index, last index, phrase)."""
    runs: list[tuple[int, int, str]] = []
    for i, v in enumerate(levels):
        phrase = v.phrase(tolerance)
        if runs and runs[-1][2] == phrase:
            runs[-1] = (runs[-1][0], i, phrase)
        else:
            runs.append((i, i, phrase))
    return runs


def _span(first: int, last: int, levels: list[Level]) -> str:
    cs = [v.concurrency for v in levels[first:last + 1]]
    if last == len(levels) - 1 and first > 0 and len(cs) > 1:
        return f"from concurrency {cs[0]} on"
    if first == 0 and last < len(levels) - 1 and len(cs) > 1:
        return f"up to concurrency {cs[-1]}"
    return f"at concurrency {_list(cs)}"


def _matches(mine: list[SweepPoint], theirs: list[SweepPoint], tolerance: float) -> bool:
    """Every point of ``theirs`` is matched on both (within the tolerance) by a point of ``mine``."""
    return all(any(all(_side(getattr(q, m), getattr(p, m), tolerance) >= 0 for m, _ in _METRICS) for q in mine)
               for p in theirs)


def _front_dominance(front_a: list[SweepPoint], front_b: list[SweepPoint], tolerance: float) -> str | None:
    """``"B"`` when every point of A's front is matched or beaten on both (within the tolerance) by a point of
    B's and not the other way round; ``"A"`` the other way round; else None."""
    if not front_a or not front_b:
        return None

    for who, mine, theirs in (("B", front_b, front_a), ("A", front_a, front_b)):
        if _matches(mine, theirs, tolerance) and not _matches(theirs, mine, tolerance):
            return who
    return None


def _list(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"

