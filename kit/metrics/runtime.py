"""What the server measurably did over a span, as plain data for rules to read.

Each fact is a dict: ``status`` (``measured``, ``no series``, ``not declared``, ``unreadable``),
the PromQL or the log it came from, the span, and the numbers. A fact without a series is
never a zero: sglang reports a labelled counter (``cuda_graph_passes_total{mode=...}``) only
after its first increment, and only attention-TP rank 0 reports unless all schedulers are
asked to (``--enable-metrics-for-all-schedulers``).

Facts: graph passes by mode, whether batches ran in CUDA graphs, queueing, retraction, cache
hit rate, and accept length over time; from the decode log, which batch sizes ran eager.
"""

from __future__ import annotations

import time

from kit.errors import MetricsError

from .series import parse_duration

__all__ = ["FACTS", "runtime_facts"]

# fact -> (metric whose declaration it needs, PromQL with {sel} and {span}, how to read the answer)
FACTS = {
    "graph_passes": ("sglang:cuda_graph_passes_total",
                     "sum by (mode) (increase(sglang:cuda_graph_passes_total{sel}[{span}]))", "by:mode"),
    "is_cuda_graph": ("sglang:is_cuda_graph", "avg_over_time(sglang:is_cuda_graph{sel}[{span}])", "series"),
    "queue_max": ("sglang:num_queue_reqs", "max_over_time(sglang:num_queue_reqs{sel}[{span}])", "series"),
    "queue_avg": ("sglang:num_queue_reqs", "avg_over_time(sglang:num_queue_reqs{sel}[{span}])", "series"),
    "retracted_requests": ("sglang:num_retracted_requests_total",
                           "increase(sglang:num_retracted_requests_total{sel}[{span}])", "series"),
    "retracted_max": ("sglang:num_retracted_reqs", "max_over_time(sglang:num_retracted_reqs{sel}[{span}])", "series"),
    "cache_hit_rate": ("sglang:cache_hit_rate", "avg_over_time(sglang:cache_hit_rate{sel}[{span}])", "series"),
    "cached_token_share": ("sglang:cached_tokens_total",
                           "sum(increase(sglang:cached_tokens_total{sel}[{span}])) / "
                           "sum(increase(sglang:prompt_tokens_total{sel}[{span}]))", "series"),
    # An accept length counts the verified token itself, so it is >= 1; a 0 is the gauge before any
    # speculative batch ran, not a measurement, and stays out of the average.
    "accept_length": ("sglang:spec_accept_length",
                      "avg_over_time((sglang:spec_accept_length{sel} > 0)[{span}:])", "series"),
}


def runtime_facts(prometheus=None, *, since: str | float = "1h", end: float | None = None, selector: str = "",
                  names=None, log_text: str | None = None, log_tz: str = "UTC", points: int = 60) -> dict:
    """The facts over the ``since`` before ``end`` (default now), from Prometheus and/or the log.

    ``names`` (kit.metrics.MetricNames) tells a metric this release does not declare from one it
    declares but did not report. ``accept_length_over_time`` holds ``points`` (time, value) pairs.
    """
    end = time.time() if end is None else float(end)
    span_s = parse_duration(since)
    span = f"{int(span_s)}s"
    facts: dict = {"span": {"start": end - span_s, "end": end, "seconds": span_s}, "problems": []}
    if prometheus is not None:
        for key, (metric, promql, shape) in FACTS.items():
            query = promql.replace("{sel}", selector).replace("{span}", span)
            facts[key] = _fact(prometheus, metric, query, shape, end, names)
        facts["accept_length_over_time"] = _over_time(prometheus, "sglang:spec_accept_length", selector,
                                                      end - span_s, end, points, names)
    if log_text:
        facts["decode_log"] = _decode_log_facts(log_text)
    return facts


def _declared(names, metric: str) -> dict | None:
    if names is not None and (why := names.missing(metric)):
        return {"status": "not declared", "metric": metric, "why": why}
    return None


def _fact(prom, metric, query, shape, at, names) -> dict:
    if (absent := _declared(names, metric)) is not None:
        return absent
    try:
        res = prom.instant(query, at)
    except MetricsError as err:
        return {"status": "unreadable", "metric": metric, "query": query, "why": err.message}
    site = names.find(metric).site if names is not None and names.find(metric) else None
    if res.empty:
        return {"status": "no series", "metric": metric, "query": query, "site": site,
                "why": f"Prometheus holds no {metric} series in this span: the server did not report it "
                       "(not a zero)"}
    frame = res.frame[res.frame["value"].notna()]
    if frame.empty:
        return {"status": "undefined", "metric": metric, "query": query, "site": site,
                "why": "the series exist, but the query has no value in this span (a ratio of zero traffic)"}
    if shape.startswith("by:"):
        label = shape[3:]
        values = {}
        for series, value in zip(frame["series"], frame["value"], strict=True):
            key = dict(p.split("=", 1) for p in series.split(",") if "=" in p).get(label, series)
            values[key] = float(value)
    else:
        values = {series or "": float(value) for series, value in zip(frame["series"], frame["value"], strict=True)}
    return {"status": "measured", "metric": metric, "query": query, "site": site, "values": values}


def _over_time(prom, metric, selector, start, end, points, names) -> dict:
    if (absent := _declared(names, metric)) is not None:
        return absent
    step = max(1.0, (end - start) / max(1, points - 1))
    try:
        res = prom.range(f"{metric}{selector}", start, end, step)
    except MetricsError as err:
        return {"status": "unreadable", "metric": metric, "why": err.message}
    if res.empty:
        return {"status": "no series", "metric": metric,
                "why": f"no {metric} series in this span (speculative decoding off, or not reported)"}
    series = {}
    for key, part in res.frame.groupby("series"):
        series[key] = [(t.timestamp(), float(v)) for t, v in zip(part["time"], part["value"], strict=True)]
    return {"status": "measured", "metric": metric, "step": step, "series": series}


def _decode_log_facts(text: str) -> dict:
    """Decode lines by running batch size: how many ran in CUDA graphs and how many eager."""
    from kit.server_args import parse_decode_stats

    stats = parse_decode_stats(text)
    if not stats:
        return {"status": "no series", "why": "no `Decode batch` line in the log"}
    by_bs: dict[int, dict[str, int]] = {}
    for s in stats:
        if s.running_req is None or s.cuda_graph is None:
            continue
        cell = by_bs.setdefault(s.running_req, {"graph": 0, "eager": 0})
        cell["graph" if s.cuda_graph else "eager"] += 1
    eager = [bs for bs, c in by_bs.items() if c["eager"]]
    graph = [bs for bs, c in by_bs.items() if c["graph"]]
    return {"status": "measured", "lines": len(stats), "by_running_req": dict(sorted(by_bs.items())),
            "smallest_eager_batch": min(eager) if eager else None,
            "largest_graph_batch": max(graph) if graph else None}
