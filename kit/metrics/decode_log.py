"""The scheduler's ``Decode batch`` and ``Prefill batch`` log lines as a time series.

The decode lines are read by ``kit.server_args.parse_decode_stats`` (the one parser of their
fields); this module only gives each parsed line the time its log prefix carries
(``[2026-11-30 19:04:16 TP0] ...``) and names each field after the sglang metric that
reports the same number, so a server run without ``--enable-metrics`` still plots next to
one with it. ``Prefill batch`` lines are read here as ``key: value`` pairs (no field of
theirs has a metric of the same meaning except the queue).

Log times carry no zone; ``tz`` says which one the server's clock used (default UTC).
"""

from __future__ import annotations

import re

from .names import (
    GEN_THROUGHPUT,
    IS_CUDA_GRAPH,
    NUM_QUEUE_REQS,
    NUM_RUNNING_REQS,
    SPEC_ACCEPT_LENGTH,
    TOKEN_USAGE,
)
from .series import empty_frame

__all__ = ["DECODE_FIELDS", "PREFILL_FIELDS", "log_series", "startup_times"]

# DecodeStat field -> the metric of the same meaning (kit.metrics.names).
DECODE_FIELDS = {
    "gen_throughput": GEN_THROUGHPUT,
    "running_req": NUM_RUNNING_REQS,
    "queue_req": NUM_QUEUE_REQS,
    "token_usage": TOKEN_USAGE,
    "accept_len": SPEC_ACCEPT_LENGTH,
    "cuda_graph": IS_CUDA_GRAPH,
}
# PrefillStat field (kit.server_args.parse_prefill_stats) -> the name it gets in the frame.
PREFILL_FIELDS = {
    "new_seq": "log:prefill_new_seqs",
    "new_token": "log:prefill_new_tokens",
    "cached_token": "log:prefill_cached_tokens",
    "queue_req": NUM_QUEUE_REQS,
    "input_throughput": "log:prefill_input_throughput",
    "cuda_graph": "log:prefill_cuda_graph",
}
# ISO (sglang's own prefix, docker -t) and syslog/journald (`May 01 10:00:00`, no year).
_TIME = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
                   r"|\b[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d\b)")
_SYSLOG = re.compile(r"[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d\Z")


def _epoch(stamp: str, tz: str, now: float | None = None) -> float | None:
    """Epoch seconds of a log time. A syslog time has no year: it is taken to be within the
    year before ``now`` (default: the clock), as journald's short format means it."""
    import time

    import pandas as pd

    stamp = stamp.strip().replace(",", ".")
    try:
        if _SYSLOG.match(stamp):
            now = time.time() if now is None else now
            year = pd.Timestamp(now, unit="s", tz=tz).year
            t = pd.Timestamp(f"{year} {stamp}").tz_localize(tz)
            if t.timestamp() > now + 86400:
                t = pd.Timestamp(f"{year - 1} {stamp}").tz_localize(tz)
            return t.timestamp()
        t = pd.Timestamp(stamp)
    except ValueError:
        return None
    t = t.tz_localize(tz) if t.tzinfo is None else t
    return t.timestamp()


def log_series(text: str, tz: str = "UTC"):
    """The decode and prefill lines of a log in the ``kit.metrics.series`` shape (source ``log``).

    ``series`` is ``tp_rank=N`` when the prefix names the rank, and ``kind=prefill`` marks the
    prefill lines' queue, so the two never join into one line. Lines without a time are skipped
    (they cannot be placed); ``frame.attrs['untimed']`` counts them.
    """
    from kit.server_args import parse_decode_stats, parse_prefill_stats

    lines = text.splitlines()
    blocks: dict[tuple[str, str], tuple[list, list]] = {}
    untimed = 0

    def add(metric: str, series: str, t: float, v: float | None) -> None:
        if v is None:
            return
        ts, vs = blocks.setdefault((metric, series), ([], []))
        ts.append(t)
        vs.append(v)

    for stat in parse_decode_stats(text):
        m = _TIME.search(lines[stat.line - 1])
        t = _epoch(m.group(1), tz) if m else None
        if t is None:
            untimed += 1
            continue
        series = f"tp_rank={stat.tp_rank}" if stat.tp_rank is not None else ""
        for field, metric in DECODE_FIELDS.items():
            value = getattr(stat, field)
            add(metric, series, t, float(value) if value is not None else None)
    for stat in parse_prefill_stats(text):
        line = lines[stat.line - 1]
        m = _TIME.search(line[:line.find("Prefill batch")])
        t = _epoch(m.group(1), tz) if m else None
        if t is None:
            untimed += 1
            continue
        base = f"tp_rank={stat.tp_rank}" if stat.tp_rank is not None else ""
        for field, metric in PREFILL_FIELDS.items():
            value = getattr(stat, field)
            series = ",".join(x for x in ("kind=prefill", base) if x) if metric.startswith("sglang:") else base
            add(metric, series, t, float(value) if value is not None else None)
    return _frame(blocks, untimed)


def _frame(blocks: dict, untimed: int):
    from .series import series_frame

    frame = series_frame([(m, s, ts, vs) for (m, s), (ts, vs) in blocks.items()], "log") if blocks else empty_frame()
    frame = frame.sort_values(["metric", "series", "time"], ignore_index=True) if len(frame) else frame
    frame.attrs["untimed"] = untimed
    return frame


def startup_times(snapshots, tz: str = "UTC") -> list[tuple[float, object]]:
    """(epoch seconds, snapshot) of each startup in ``parse_log_all``'s snapshots.

    One startup logs its arguments more than once: 0.5.11 twice, both resolved (Engine.__init__
    and _launch_subprocesses, engine.py:188 and :679), 0.5.19+ raw then resolved. A snapshot
    within 60 s of the one before it that repeats its fields, or resolves a raw one, belongs to
    the same startup (its resolved form is kept). Snapshots without a time are dropped: nothing
    places them on the time axis.
    """
    timed = []
    for snap in snapshots:
        stamp = getattr(snap, "timestamp", None)
        t = _epoch(stamp, tz) if stamp else None
        if t is not None:
            timed.append((t, snap))
    timed.sort(key=lambda x: x[0])
    out: list[tuple[float, object]] = []
    for t, snap in timed:
        if out and t - out[-1][0] <= 60:
            prev = out[-1][1]
            if prev.stage == "raw" and snap.stage == "resolved" and snap.process == prev.process:
                out[-1] = (out[-1][0], snap)
                continue
            if dict(prev.fields) == dict(snap.fields):
                continue
        out.append((t, snap))
    return out
