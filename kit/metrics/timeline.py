"""When did it drop, and what changed then: the server's own series over time, restarts marked.

``timeline()`` asks Prometheus for throughput, accept length, queue, running requests and
token usage over a span, adds the decode log's lines when a log is given, and marks each
restart from whatever evidence there is:

- ``process_start_time_seconds`` changing (when the scrape job exports it);
- ``up`` at 0 (Prometheus could not scrape the server);
- a gap in the series longer than three steps;
- a counter (``sglang:num_requests_total`` ...) going down: a new process counts from zero;
- a ``server_args=`` startup line in the log, which also tells the launch and the version
  that changed there (compared with the startup before it).

Between restarts, each segment gets the median of each series; a missing metric is named
(not declared by this release, or declared but never reported), never drawn as zero. Any
source that cannot be read leaves a problem and the rest still counts.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from kit._text import plain
from kit.errors import MetricsError

from .names import (
    GEN_THROUGHPUT,
    GENERATION_TOKENS,
    NUM_QUEUE_REQS,
    NUM_REQUESTS,
    NUM_RUNNING_REQS,
    PROMPT_TOKENS,
    SPEC_ACCEPT_LENGTH,
    TOKEN_USAGE,
)
from .series import empty_frame, epochs, parse_duration

__all__ = ["PANELS", "Restart", "Timeline", "timeline"]

# What the timeline plots, in order: label -> metric (kit.metrics.names).
PANELS = {
    "gen throughput (tok/s)": GEN_THROUGHPUT,
    "accept length": SPEC_ACCEPT_LENGTH,
    "queued requests": NUM_QUEUE_REQS,
    "running requests": NUM_RUNNING_REQS,
    "token usage": TOKEN_USAGE,
}
ACCEPT = SPEC_ACCEPT_LENGTH
COUNTERS = (NUM_REQUESTS, GENERATION_TOKENS, PROMPT_TOKENS)


@dataclass
class Restart:
    """One restart: when, what shows it, and what the logs say changed there."""

    at: float  # epoch seconds (the earliest evidence)
    until: float | None = None  # the latest evidence (the end of a gap, the new process' first sample)
    evidence: list[str] = field(default_factory=list)
    launch_changes: list[tuple[str, Any, Any]] = field(default_factory=list)
    version: tuple[str | None, str | None] | None = None  # (before, after) when a log says both
    log_line: str | None = None  # the startup line's place in the log
    kind: str = "restart"  # "start": the log's first startup, with nothing before it that stopped

    def to_dict(self) -> dict:
        return {"kind": self.kind, "at": _iso(self.at), "until": _iso(self.until or self.at), "evidence": self.evidence,
                "launch_changes": [{"flag": f, "before": plain(a, str), "after": plain(b, str)}
                                   for f, a, b in self.launch_changes],
                "version": list(self.version) if self.version else None, "log_line": self.log_line}


@dataclass
class Timeline:
    start: float
    end: float
    step: float
    frame: Any  # kit.metrics.series shape, Prometheus and log points together
    restarts: list[Restart]
    segments: Any  # DataFrame: start, end, and the median of each panel's metric
    missing: dict[str, str]  # metric -> why there is no series for it
    problems: list[str]
    queries: list[tuple[str, float, int]]  # (PromQL, seconds, points)
    version: str | None = None

    def to_dict(self) -> dict:
        segs = self.segments.astype(object).where(self.segments.notna(), None)
        return {"start": _iso(self.start), "end": _iso(self.end), "step": self.step, "version": self.version,
                "restarts": [r.to_dict() for r in self.restarts],
                "segments": [{k: (_iso(v) if k in ("start", "end") else v) for k, v in row.items()}
                             for row in segs.to_dict("records")],
                "missing": self.missing, "problems": self.problems,
                "queries": [{"query": q, "seconds": round(s, 3), "points": n} for q, s, n in self.queries],
                "points": int(len(self.frame))}

    def to_text(self) -> str:
        out = [f"timeline {_iso(self.start)} .. {_iso(self.end)}, step {self.step:g}s"
               + (f", sglang {self.version}" if self.version else "")
               + f": {len(self.frame)} points"]
        if self.queries:
            total = sum(s for _, s, _ in self.queries)
            out.append(f"  {len(self.queries)} Prometheus queries in {total:.2f}s")
        out.append("")
        count = sum(r.kind == "restart" for r in self.restarts)
        starts = len(self.restarts) - count
        out.append((f"restarts ({count}):" if count else "restarts: none seen")
                   + (f" (and {starts} start{'s' * (starts > 1)})" if starts else ""))
        for r in self.restarts:
            out.append(f"  {_iso(r.at)}  {'start: ' if r.kind == 'start' else ''}{'; '.join(r.evidence)}")
            if r.version and r.version[0] != r.version[1]:
                out.append(f"      sglang {r.version[0]} -> {r.version[1]}")
            for flag, a, b in r.launch_changes[:20]:
                out.append(f"      {flag}: {plain(a, str)} -> {plain(b, str)}")
            if len(r.launch_changes) > 20:
                out.append(f"      ... {len(r.launch_changes) - 20} more settings changed")
        out.append("")
        if len(self.segments):
            out.append("segments (median of each series between restarts):")
            out.append(_segment_table(self.segments))
            out += _changes(self.segments)
        for name, why in self.missing.items():
            out.append(f"missing: {why}" if why.startswith(name) else f"missing: {name}: {why}")
        for problem in self.problems:
            out.append(f"problem: {problem}")
        return "\n".join(out).rstrip() + "\n"

    def figure(self):
        """The plotly figure (kit.display.metrics_timeline)."""
        from kit.display import metrics_timeline

        return metrics_timeline(self.frame, restarts=[r.at for r in self.restarts], panels=PANELS)


def timeline(prometheus=None, *, since: str | float = "24h", end: float | None = None,
             step: str | float | None = None, selector: str = "", names=None, log_text: str | None = None,
             log_tz: str = "UTC", process_started: float | None = None) -> Timeline:
    """The timeline of one server over ``since`` up to ``end`` (default now).

    ``prometheus`` is a :class:`kit.metrics.Prometheus` (or None: log only); ``selector`` a
    PromQL label set such as ``{instance="10.0.0.5:30000"}``; ``names`` the
    :class:`MetricNames` of the server's release (to tell a metric that release lacks);
    ``log_text`` the server's log; ``process_started`` the running process' start time.
    """
    import pandas as pd

    end = time.time() if end is None else float(end)
    span = parse_duration(since)
    start = end - span
    step_s = parse_duration(step) if step is not None else max(1.0, math.ceil(span / 5760))
    problems: list[str] = []
    missing: dict[str, str] = {}
    queries: list[tuple[str, float, int]] = []
    frames = []
    restarts: list[tuple[float, float, str]] = []
    version = getattr(names, "version", None)

    for metric in PANELS.values():
        if names is not None and (why := names.missing(metric)):
            missing[metric] = why
    if prometheus is not None:
        frames.append(_from_prometheus(prometheus, start, end, step_s, selector, missing, problems, queries,
                                       restarts, names))
    startups = []
    if log_text:
        frames.append(_from_log(log_text, log_tz, start, end, problems))
        startups = _startups(log_text, log_tz, problems)
        restarts += [(t, t, f"startup line in the log ({snap.source})") for t, snap in startups if start <= t <= end]
        if version is None:
            version = next((s.version for _, s in reversed(startups) if s.version), None)
    frames = [f for f in frames if len(f)]
    frame = pd.concat(frames, ignore_index=True) if frames else empty_frame()
    # An accept length counts the verified token itself (>= 1): sglang's gauge reads 0 until a speculative
    # batch runs, which is not a measurement; those points stay out, and a series of only 0 is missing.
    unset = (frame["metric"] == ACCEPT) & ~(frame["value"] > 0)
    if unset.any():
        if not (frame["metric"] == ACCEPT)[~unset].any():
            missing[ACCEPT] = (f"{ACCEPT} reported only 0 in this span: no speculative batch ran (an accept length "
                               "is 1 or more), so there is nothing to plot; not a zero")
        frame = frame[~unset].reset_index(drop=True)
    # Metric evidence is an interval around the restart already; the slack only joins what the
    # step blurs, and never more than two minutes (two startup lines are two restarts anyway).
    slack = min(max(2 * step_s, 5.0), 120.0)
    merged = _merge(restarts, startups, slack)
    if process_started and start <= process_started <= end:
        _process_start(merged, process_started, startups, slack)
    segments = _segments(frame, merged, start, end)
    for metric in PANELS.values():
        if metric not in missing and not (frame["metric"] == metric).any():
            missing[metric] = _no_series(metric, names)
    return Timeline(start, end, step_s, frame, merged, segments, missing, problems, queries, version)


def _from_prometheus(prom, start, end, step, selector, missing, problems, queries, restarts, names):
    import pandas as pd

    parts = []
    try:
        known = prom.metric_names()
    except MetricsError as err:
        problems.append(err.message + (f" -> {err.hint}" if err.hint else ""))
        return empty_frame()
    for metric in PANELS.values():
        if metric in missing:
            continue
        if metric not in known:
            continue
        parts.append(_ask(prom, f"{metric}{selector}", start, end, step, problems, queries))
    frame = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else empty_frame()
    gaps: dict[tuple[float, float], list[str]] = {}
    for name, series in frame.groupby(["metric", "series"], sort=False) if len(frame) else ():
        t = epochs(series["time"])
        for a, b in zip(t[:-1], t[1:], strict=True):
            if b - a > 3 * step:
                gaps.setdefault((float(a), float(b)), []).append(name[0])
    for (a, b), metrics in gaps.items():
        shown = ", ".join(dict.fromkeys(metrics))
        restarts.append((a, b, f"no samples of {shown} from {_iso(a)} to {_iso(b)} ({b - a:.0f}s gap)"))
    if not selector:  # only the scrape targets that export sglang's series, not everything Prometheus watches
        instances = sorted({lab.split("=", 1)[1] for series in frame["series"].unique() for lab in series.split(",")
                            if lab.startswith("instance=")}) if len(frame) else []
        selector = ('{instance=~"' + "|".join(re.escape(i).replace("\\", "\\\\") for i in instances) + '"}'
                    if instances else "")
    if "up" in known and selector:
        up = _ask(prom, f"up{selector}", start, end, step, problems, queries)
        for series, part in up.groupby("series") if len(up) else ():
            t, v = epochs(part["time"]), part["value"].to_numpy()
            for a, b in _runs(t, v == 0, step):
                restarts.append((a, b, f"up=0 from {_iso(a)} to {_iso(b)} (Prometheus could not scrape "
                                       f"{series or 'it'})"))
    for counter in COUNTERS:
        if counter not in known:
            continue
        part = _ask(prom, f"{counter}{selector}", start, end, step, problems, queries)
        for _series, rows in part.groupby("series") if len(part) else ():
            v = rows["value"].to_numpy()
            t = epochs(rows["time"])
            for i in range(1, len(v)):
                if v[i] < v[i - 1]:
                    restarts.append((t[i - 1], t[i], f"{counter} went down {v[i - 1]:g} -> {v[i]:g} (a new process)"))
        break  # one counter is enough evidence; asking all would triple the cost
    if "process_start_time_seconds" in known:
        part = _ask(prom, f"process_start_time_seconds{selector}", start, end, step, problems, queries)
        for series, rows in part.groupby("series") if len(part) else ():
            for value in sorted(set(rows["value"].tolist()))[1:]:
                if start <= value <= end:
                    restarts.append((value, value, f"process_start_time_seconds moved to {_iso(value)} ({series})"))
    return frame


def _ask(prom, query, start, end, step, problems, queries):
    try:
        res = prom.range(query, start, end, step)
    except MetricsError as err:
        problems.append(err.message)
        return empty_frame()
    queries.append((query, res.seconds, len(res.frame)))
    return res.frame


def _from_log(text, tz, start, end, problems):
    from .decode_log import log_series

    frame = log_series(text, tz)
    if frame.attrs.get("untimed"):
        problems.append(f"{frame.attrs['untimed']} decode/prefill log lines carry no time and are left out")
    if not len(frame):
        return frame
    t0, t1 = (pd_ts(start), pd_ts(end))
    inside = frame[(frame["time"] >= t0) & (frame["time"] <= t1)].reset_index(drop=True)
    if len(inside) < len(frame):
        first, last = frame["time"].min(), frame["time"].max()
        problems.append(f"{len(frame) - len(inside)} of the log's {len(frame)} points lie outside this span "
                        f"(the log runs from {_iso(first.timestamp())} to {_iso(last.timestamp())}): "
                        "a longer --since or an --end inside the log shows them")
    return inside


def pd_ts(epoch: float):
    import pandas as pd

    return pd.Timestamp(epoch, unit="s", tz="UTC")


def _startups(text, tz, problems):
    from kit.errors import ParseError
    from kit.server_args import parse_log_all

    from .decode_log import startup_times

    try:
        return startup_times(parse_log_all(text), tz)
    except ParseError as err:
        problems.append(f"no startup line in the log: {err.message}")
        return []


def _no_series(metric: str, names) -> str:
    decl = names.find(metric) if names is not None else None
    head = f"declared by sglang {names.version} ({decl.site}), but no series in this span" if decl else \
        "no series in this span"
    why = ("sglang reports it only while speculative decoding runs" if metric == ACCEPT
           else "the server reported none (metrics off, the server down, or outside the selector)")
    return f"{head}: {why}; a missing series is not a zero"


def _runs(t, mask, step: float) -> list[tuple[float, float]]:
    """(first, last) time of each run of consecutive steps where ``mask`` holds."""
    out: list[tuple[float, float]] = []
    for ti, hit in zip(t, mask, strict=True):
        if not hit:
            continue
        if out and ti - out[-1][1] <= step * 1.5:
            out[-1] = (out[-1][0], ti)
        else:
            out.append((ti, ti))
    return out


def _merge(evidence: list[tuple[float, float, str]], startups, slack: float) -> list[Restart]:
    """Evidence whose intervals overlap (within ``slack``) is one restart; a startup line inside
    it names what changed, compared with the startup before it."""
    from kit.server_args import diff

    out: list[Restart] = []
    for t0, t1, what in sorted(evidence, key=lambda x: (x[0], x[1])):
        second_startup = what.startswith("startup line") and any(e.startswith("startup line") for e in
                                                                 (out[-1].evidence if out else ()))
        if out and t0 <= out[-1].until + slack and not second_startup:
            if what not in out[-1].evidence:
                out[-1].evidence.append(what)
            out[-1].until = max(out[-1].until, t1)
            continue
        out.append(Restart(t0, t1, [what]))
    for i, (t, snap) in enumerate(startups):
        line = f"startup line in the log ({snap.source})"
        hit = next((r for r in out if line in r.evidence), None) or \
            next((r for r in out if r.at - slack <= t <= r.until + slack), None)
        if hit is None:
            continue
        if i == 0:
            if all(e.startswith(("startup line", "the running process")) for e in hit.evidence):
                hit.kind = "start"
            continue
        before = startups[i - 1][1]
        rows = diff(before, snap)
        hit.launch_changes = [(r.flag, r.a, r.b) for r in rows.itertuples()]
        hit.version = (before.version, snap.version)
        hit.log_line = snap.source
    return out


def _process_start(restarts: list[Restart], started: float, startups, slack: float) -> None:
    """The running process' start time (ps) joins the restart of its own startup line (the first one from a
    second before it, within ``slack``: the process writes it just after it starts), else the restart nearest
    to it within ``slack``, else it is a restart of its own. It is a point in time: it never stretches one
    restart over the next, as it would if merged by order with the other evidence."""
    what = "the running process started then (ps)"
    own = [snap for t, snap in startups if started - 1.0 <= t <= started + slack]
    line = f"startup line in the log ({own[0].source})" if own else None
    hit = next((r for r in restarts if line in r.evidence), None) if line else None
    if hit is None:
        near = [r for r in restarts if r.at - slack <= started <= r.until + slack]
        hit = min(near, key=lambda r: abs(r.at - started)) if near else None
    if hit is None:
        restarts.append(Restart(started, started, [what]))
        restarts.sort(key=lambda r: r.at)
    elif what not in hit.evidence:
        hit.evidence.append(what)


def _segments(frame, restarts: list[Restart], start: float, end: float):
    """Median of each panel's Prometheus series (the log's when Prometheus has none) between restarts."""
    import pandas as pd

    cuts = [start] + [r.at for r in restarts if start < r.at < end] + [end]
    rows = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        row = {"start": a, "end": b}
        part = frame[(frame["time"] >= pd_ts(a)) & (frame["time"] < pd_ts(b))] if len(frame) else frame
        for label, metric in PANELS.items():
            points = part[part["metric"] == metric] if len(part) else part
            if len(points) and (points["source"] == "prometheus").any():
                points = points[points["source"] == "prometheus"]
            if metric == ACCEPT and len(points):
                points = points[points["value"] > 0]  # >= 1 when measured; 0 is the gauge before any batch
            row[label] = float(points["value"].median()) if len(points) else None
        rows.append(row)
    return pd.DataFrame(rows, columns=["start", "end", *PANELS])


def _segment_table(segments) -> str:
    heads = ["from", "to", *PANELS]
    cells = [[_iso(r["start"])[5:19].replace("T", " "), _iso(r["end"])[5:19].replace("T", " "),
              *(_fmt(r[k]) for k in PANELS)] for r in segments.to_dict("records")]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _changes(segments) -> list[str]:
    """Each panel's median before and after each restart, where both sides have one."""
    out = []
    rows = segments.to_dict("records")
    for before, after in zip(rows[:-1], rows[1:], strict=True):
        for label in PANELS:
            a, b = before[label], after[label]
            if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or \
                    (isinstance(b, float) and math.isnan(b)) or _fmt(a) == _fmt(b):
                continue
            pct = f" ({(b - a) / a:+.0%})" if a else ""
            out.append(f"  at {_iso(after['start'])}: {label} {_fmt(a)} -> {_fmt(b)}{pct}")
    return (["changes at the restarts (medians):", *out] if out else [])


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
