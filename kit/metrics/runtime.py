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

from . import names as m
from .series import parse_duration

__all__ = ["FACTS", "page_facts", "pages_facts", "runtime_facts"]


def _over(fn: str, metric: str) -> str:
    """``fn(metric{sel}[{span}])``: a gauge over the span."""
    return f"{fn}({metric}{{sel}}[{{span}}])"


# fact -> (metric whose declaration it needs, PromQL with {sel} and {span}, how to read the answer); the
# metrics are kit.metrics.names'.
FACTS = {
    "graph_passes": (m.CUDA_GRAPH_PASSES, m.CUDA_GRAPH_PASSES, "count:mode"),
    "is_cuda_graph": (m.IS_CUDA_GRAPH, _over("avg_over_time", m.IS_CUDA_GRAPH), "series"),
    "queue_max": (m.NUM_QUEUE_REQS, _over("max_over_time", m.NUM_QUEUE_REQS), "series"),
    "queue_avg": (m.NUM_QUEUE_REQS, _over("avg_over_time", m.NUM_QUEUE_REQS), "series"),
    "retracted_requests": (m.NUM_RETRACTED_REQUESTS, m.NUM_RETRACTED_REQUESTS, "count"),
    "retracted_max": (m.NUM_RETRACTED_REQS, _over("max_over_time", m.NUM_RETRACTED_REQS), "series"),
    "cache_hit_rate": (m.CACHE_HIT_RATE, _over("avg_over_time", m.CACHE_HIT_RATE), "series"),
    "cached_token_share": (m.CACHED_TOKENS,
                           f"sum(increase({m.CACHED_TOKENS}{{sel}}[{{span}}])) / "
                           f"sum(increase({m.PROMPT_TOKENS}{{sel}}[{{span}}]))", "series"),
    # An accept length counts the verified token itself, so it is >= 1; a 0 is the gauge before any
    # speculative batch ran, not a measurement, and stays out of the average.
    "accept_length": (m.SPEC_ACCEPT_LENGTH,
                      f"avg_over_time(({m.SPEC_ACCEPT_LENGTH}{{sel}} > 0)[{{span}}:])", "series"),
    "running_max": (m.NUM_RUNNING_REQS, _over("max_over_time", m.NUM_RUNNING_REQS), "series"),
    "token_usage_max": (m.TOKEN_USAGE, _over("max_over_time", m.TOKEN_USAGE), "series"),
    # The scheduler observes each request's wait from the queue to its first forward (queue_time_seconds);
    # the tokenizer its time to first token: both histograms, so the sums over the span are seconds.
    "queue_time_sum": (m.QUEUE_TIME, m.QUEUE_TIME + "_sum", "count"),
    "queue_time_count": (m.QUEUE_TIME, m.QUEUE_TIME + "_count", "count"),
    "queue_time_p90": (m.QUEUE_TIME, "histogram_quantile(0.9, sum by (le) "
                       f"(increase({m.QUEUE_TIME}_bucket{{sel}}[{{span}}])))", "series"),
    "ttft_sum": (m.TIME_TO_FIRST_TOKEN, m.TIME_TO_FIRST_TOKEN + "_sum", "count"),
    "retracted_input_tokens": (m.NUM_RETRACTED_INPUT_TOKENS, m.NUM_RETRACTED_INPUT_TOKENS, "count"),
    "retracted_output_tokens": (m.NUM_RETRACTED_OUTPUT_TOKENS, m.NUM_RETRACTED_OUTPUT_TOKENS, "count"),
    "prompt_tokens": (m.PROMPT_TOKENS, m.PROMPT_TOKENS, "count"),
    "cached_tokens": (m.CACHED_TOKENS, m.CACHED_TOKENS, "count:cache_source"),
}
# A "count" fact is what a counter counted in the span, summed (by a label): its end value less its
# start value where the series existed at the span's start and did not reset (exact; increase()
# where it reset), plus the whole end value of a series that appeared in the span: sglang creates a
# labelled counter's series on its first increment, so increase() alone would lose that increment.
_COUNT = ("sum{by} ((({s}{sel} - {s}{sel} offset {span}) >= 0) or (increase({s}{sel}[{span}]) "
          "and {s}{sel} offset {span}))", "sum{by} ({s}{sel} unless {s}{sel} offset {span})")


def runtime_facts(prometheus=None, *, since: str | float = "1h", end: float | None = None, selector: str = "",
                  names=None, log_text: str | None = None, log_tz: str = "UTC", points: int = 60) -> dict:
    """The facts over the ``since`` before ``end`` (default now), from Prometheus and/or the log.

    ``names`` (kit.metrics.MetricNames) tells a metric this release does not declare from one it
    declares but did not report. ``accept_length_over_time`` holds ``points`` (time, value) pairs.
    """
    end = time.time() if end is None else float(end)
    span_s = parse_duration(since)
    span = f"{round(span_s * 1000)}ms"  # to the millisecond: the span's ends are where its numbers are read
    facts: dict = {"span": {"start": end - span_s, "end": end, "seconds": span_s, "kind": "prometheus",
                            "source": getattr(prometheus, "url", None), "selector": selector}, "problems": []}
    if prometheus is not None:
        try:
            prometheus.metric_names()  # one call that proves the URL and the credentials before ~20 queries
        except MetricsError as err:
            why = err.message + (f" -> {err.hint}" if err.hint else "")
            facts["problems"].append(why)
            for key, (metric, _, _) in FACTS.items():
                facts[key] = {"status": "unreadable", "metric": metric, "why": err.message}
            facts["accept_length_over_time"] = {"status": "unreadable", "metric": m.SPEC_ACCEPT_LENGTH,
                                                "why": err.message}
            prometheus = None
    if prometheus is not None:
        for key, (metric, promql, shape) in FACTS.items():
            if shape.startswith("count"):
                facts[key] = _count(prometheus, metric, promql, shape, selector, span, end, names)
                continue
            query = promql.replace("{sel}", selector).replace("{span}", span)
            facts[key] = _fact(prometheus, metric, query, shape, end, names)
        facts["accept_length_over_time"] = _over_time(prometheus, m.SPEC_ACCEPT_LENGTH, selector,
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


def _count(prom, metric, series, shape, selector, span, at, names) -> dict:
    label = shape.partition(":")[2]
    by = f" by ({label})" if label else ""
    ran, appeared = (q.format(by=by, s=series, sel=selector, span=span) for q in _COUNT)
    parts = [_fact(prom, metric, q, f"by:{label}" if label else "series", at, names) for q in (ran, appeared)]
    measured = [p for p in parts if p["status"] == "measured"]
    if not measured:
        bad = next((p for p in parts if p["status"] in ("unreadable", "not declared")), parts[0])
        return {**bad, "query": f"{series}{selector} counted over {span}"}
    values: dict[str, float] = {}
    for part in measured:
        for key, value in part["values"].items():
            values[key] = values.get(key, 0.0) + value
    return {**measured[0], "values": values, "query": f"{series}{selector} counted over {span}", "promql": [ran, appeared]}


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


# fact -> (metric, the samples it sums, how to read them) for one /metrics page: counters since the
# process started, gauges as of the scrape.
_PAGE = {
    "graph_passes": (m.CUDA_GRAPH_PASSES, (m.CUDA_GRAPH_PASSES,), "by:mode"),
    "is_cuda_graph": (m.IS_CUDA_GRAPH, (m.IS_CUDA_GRAPH,), "series"),
    "queue_max": (m.NUM_QUEUE_REQS, (m.NUM_QUEUE_REQS,), "series"),
    "running_max": (m.NUM_RUNNING_REQS, (m.NUM_RUNNING_REQS,), "series"),
    "token_usage_max": (m.TOKEN_USAGE, (m.TOKEN_USAGE,), "series"),
    "retracted_requests": (m.NUM_RETRACTED_REQUESTS, (m.NUM_RETRACTED_REQUESTS,), "sum"),
    "retracted_max": (m.NUM_RETRACTED_REQS, (m.NUM_RETRACTED_REQS,), "series"),
    "retracted_input_tokens": (m.NUM_RETRACTED_INPUT_TOKENS, (m.NUM_RETRACTED_INPUT_TOKENS,), "sum"),
    "retracted_output_tokens": (m.NUM_RETRACTED_OUTPUT_TOKENS, (m.NUM_RETRACTED_OUTPUT_TOKENS,), "sum"),
    "queue_time_sum": (m.QUEUE_TIME, (m.QUEUE_TIME + "_sum",), "sum"),
    "queue_time_count": (m.QUEUE_TIME, (m.QUEUE_TIME + "_count",), "sum"),
    "ttft_sum": (m.TIME_TO_FIRST_TOKEN, (m.TIME_TO_FIRST_TOKEN + "_sum",), "sum"),
    "prompt_tokens": (m.PROMPT_TOKENS, (m.PROMPT_TOKENS,), "sum"),
    "cached_tokens": (m.CACHED_TOKENS, (m.CACHED_TOKENS,), "by:cache_source"),
    "accept_length": (m.SPEC_ACCEPT_LENGTH, (m.SPEC_ACCEPT_LENGTH,), "positive"),
}


def page_facts(page, *, source: str = "/metrics", names=None, at: float | None = None,
               started: float | None = None) -> dict:
    """The same facts from one ``/metrics`` page (kit.metrics.scrape): counters count from the process'
    start (``started``, epoch seconds, when known) to the scrape (``at``), gauges are as of the scrape.
    Nothing over time: ``accept_length_over_time`` needs Prometheus."""
    at = time.time() if at is None else float(at)
    span = {"start": started, "end": at, "seconds": (at - started) if started else None, "source": source,
            "kind": "page"}
    facts: dict = {"span": span, "problems": []}
    served = _page_values(page, (m.PROMPT_TOKENS,), "sum").get("", 0.0) > 0
    for key, metric, samples, shape, site in _declared_families(facts, names):
        rows = page[page["sample"].isin(samples)]
        if rows.empty and shape.startswith("by:") and site is not None and served:
            facts[key] = _none_counted(metric, samples, site, f"{samples[0]} in {source}", "the page")
            continue
        if rows.empty:
            facts[key] = {"status": "no series", "metric": metric, "site": site, "query": f"{samples[0]} in {source}",
                          "why": f"{source} has no {samples[0]} sample: the server did not report it (not a zero)"}
            continue
        if shape.startswith("by:"):
            label, values = shape[3:], {}
            for series, value in zip(rows["series"], rows["value"], strict=True):
                k = dict(p.split("=", 1) for p in series.split(",") if "=" in p).get(label, series)
                values[k] = values.get(k, 0.0) + float(value)
        elif shape == "sum":
            values = {"": float(rows["value"].sum())}
        else:
            values = {s: float(v) for s, v in zip(rows["series"], rows["value"], strict=True)
                      if shape != "positive" or v > 0}
            if not values:
                facts[key] = {"status": "no series", "metric": metric, "site": site,
                              "why": f"{metric} is 0 in {source}: no speculative batch ran (not a measurement)"}
                continue
        facts[key] = {"status": "measured", "metric": metric, "query": f"{samples[0]} in {source}", "site": site,
                      "values": values, "at_scrape": shape in ("series", "positive")}
    facts["accept_length_over_time"] = {"status": "no series", "metric": m.SPEC_ACCEPT_LENGTH,
                                        "why": "one /metrics page has no history: give --prometheus URL"}
    return facts


def _page_values(page, samples: tuple[str, ...], shape: str) -> dict[str, float]:
    rows = page[page["sample"].isin(samples)]
    if shape.startswith("by:"):
        label, values = shape[3:], {}
        for series, value in zip(rows["series"], rows["value"], strict=True):
            k = dict(p.split("=", 1) for p in series.split(",") if "=" in p).get(label, series)
            values[k] = values.get(k, 0.0) + float(value)
        return values
    if shape == "sum":
        return {"": float(rows["value"].sum())} if not rows.empty else {}
    return {s: float(v) for s, v in zip(rows["series"], rows["value"], strict=True)}


def _declared_families(facts: dict, names):
    """(key, metric, samples, shape, site) of each family the rules read; one the release does not declare
    is put in ``facts`` as such and skipped."""
    for key, (metric, samples, shape) in _PAGE.items():
        if (absent := _declared(names, metric)) is not None:
            facts[key] = absent
            continue
        found = names.find(metric) if names is not None else None
        yield key, metric, samples, shape, (found.site if found else None)


def _none_counted(metric: str, samples: tuple[str, ...], site: str, query: str, where: str) -> dict:
    """A labelled counter has no series before its first count (prometheus_client makes a child at
    ``.labels()``): declared by this release and absent while requests were served, it counted none."""
    return {"status": "measured", "metric": metric, "query": query, "site": site, "values": {}, "sampled": False,
            "at_scrape": False, "none": f"no {samples[0]} series in {where} while the server served requests: a "
                                        "labelled counter appears at its first count, so none was counted"}


def _served(first, last) -> bool:
    """Whether the server counted prompt tokens between two pages."""
    before, after = (_page_values(p, (m.PROMPT_TOKENS,), "sum") for p in (first, last))
    return sum(after.values()) > sum(before.values())


def pages_facts(pages, *, source: str = "/metrics", names=None) -> dict:
    """The facts from several ``/metrics`` pages of one server, ``pages`` a list of (epoch, page) in time
    order (kit.metrics.parse_metrics_text of each): what the server did between the first and the last.

    Counters are the last page's value less the first's (a series absent from the first page counted
    from zero: sglang creates it on its first increment; a value that went down is a restart, and the last
    value counts). Gauges are the most any page showed (a peak sampled at the pages' times, not the true
    peak between them); the accept length is also kept over time. One page is :func:`page_facts`."""
    pages = sorted(pages, key=lambda p: p[0])
    if len(pages) < 2:
        raise MetricsError(f"pages_facts needs two /metrics pages or more, not {len(pages)}",
                           hint="one page is page_facts(page)")
    (t0, first), (t1, last) = pages[0], pages[-1]
    every = (t1 - t0) / (len(pages) - 1)
    span = {"start": t0, "end": t1, "seconds": t1 - t0, "source": source, "kind": "pages", "pages": len(pages),
            "every": every}
    facts: dict = {"span": span, "problems": []}
    for key, metric, samples, shape, site in _declared_families(facts, names):
        query = f"{samples[0]} in {len(pages)} pages of {source}"
        counter = shape == "sum" or shape.startswith("by:")
        if counter:
            before, after = _page_values(first, samples, shape), _page_values(last, samples, shape)
            values = {k: (v - before.get(k, 0.0)) if v >= before.get(k, 0.0) else v for k, v in after.items()}
        else:
            values = {}
            for _, page in pages:
                for k, v in _page_values(page, samples, shape).items():
                    if shape != "positive" or v > 0:
                        values[k] = max(values.get(k, v), v)
        if not values and shape.startswith("by:") and site is not None and _served(first, last):
            facts[key] = _none_counted(metric, samples, site, query, "any page")
            continue
        if not values:
            facts[key] = {"status": "no series", "metric": metric, "site": site, "query": query,
                          "why": f"no page of {source} has a {samples[0]} sample"
                                 + (" above 0: no speculative batch ran (not a measurement)" if shape == "positive"
                                    else ": the server did not report it (not a zero)")}
            continue
        facts[key] = {"status": "measured", "metric": metric, "query": query, "site": site, "values": values,
                      "sampled": not counter}
    series: dict = {}
    for at, page in pages:
        for k, v in _page_values(page, (m.SPEC_ACCEPT_LENGTH,), "series").items():
            if v > 0:
                series.setdefault(k, []).append((at, v))
    facts["accept_length_over_time"] = (
        {"status": "measured", "metric": m.SPEC_ACCEPT_LENGTH, "query": f"{m.SPEC_ACCEPT_LENGTH} in the pages",
         "series": series} if series else
        {"status": "no series", "metric": m.SPEC_ACCEPT_LENGTH,
         "why": f"no page of {source} has {m.SPEC_ACCEPT_LENGTH} above 0: no speculative batch ran"})
    return facts
