"""Rules that read what the server did: its series in a Prometheus, or its own ``/metrics`` page.

The evidence is :func:`kit.metrics.runtime_facts` (a span of a Prometheus server's series) or
:func:`kit.metrics.page_facts` (one scrape of the server's page: counters since its process
started), put in ``Evidence.runtime`` by :func:`add_runtime`. The metric names and their
declarations are that release's own (kit.metrics.names reads them from its source, with
``file:line``); a metric the release does not declare is named as such.

Each rule is gated on the facts it needs and says what it measured: the metric, the query, the
span and the numbers. A series that is missing is never a zero: sglang creates a labelled
counter's series (``cuda_graph_passes_total{mode=...}``, ``cached_tokens_total{cache_source=...}``)
on its first increment, some counters (``num_retracted_requests_total``) on their first use, and
only attention-TP rank 0 reports unless ``--enable-metrics-for-all-schedulers``; a fact without
a series goes to :func:`evidence_gaps`, with why it may be missing.

The rules: decode passes run eager (outside the CUDA graph) and above the captured batch size;
prefill passes outside graphs; requests waiting in the queue (their share of the time to first
token, measured); retracted requests; the prefix cache's hit rate; accept length over time (a drop,
and when).
"""

from __future__ import annotations

from datetime import datetime, timezone

from kit._text import short_path
from kit.errors import KitError

from .case import Case
from .limits import prefix_reuse, which_limit
from .result import Change
from .rulebase import ALL_VERSIONS as _ALL
from .rulebase import Fix, Impact, Rule, gap, not_estimated, rule, source_site
from .rules_runtime import queue_fix, queue_risk

__all__ = ["ACCEPT_DROP", "GROUP", "LOW_CACHE_HIT", "QUEUE_SHARE", "add_runtime", "add_runtime_page",
           "add_runtime_pages", "evidence_gaps"]

GROUP = "metrics"  # every rule below declares it: kit.doctor.rulebase.in_group("metrics")

# The kit's own thresholds (not sglang's):
LOW_CACHE_HIT = 0.10  # fewer prompt tokens than this share served from the prefix cache counts as "low"
QUEUE_SHARE = 0.10  # queueing at or above this share of the summed time to first token counts as waiting
ACCEPT_DROP = 0.10  # an accept length whose median falls by this share or more counts as a drop
_MIN_POINTS = 3  # points on each side of a drop


# --------------------------------------------------------------------------- gathering


def add_runtime(ev, *, server=None, prometheus=None, since: str | float = "1h", selector: str | None = None,
                metrics_url: str | None = None, timeout: float = 10.0, end: float | None = None) -> None:
    """Put what the server did in ``ev.runtime``: from ``prometheus`` (a URL, credentials from the
    environment, or a kit.metrics.Prometheus) over ``since``, else from the server's own ``/metrics``
    (``metrics_url``, or the live ``server``'s URL when it runs with ``--enable-metrics``). What cannot
    be read is a problem in ``ev.problems``; the rest of the evidence still counts."""
    from kit.errors import MetricsError
    from kit.metrics import Prometheus, runtime_facts

    names = _names(ev)
    if prometheus:
        prom = Prometheus.from_env(prometheus, timeout=timeout) if isinstance(prometheus, str) else prometheus
        if selector is None and server is not None and getattr(server, "port", None):
            selector = f'{{instance=~".+:{int(server.port)}"}}'
        facts = runtime_facts(prom, since=since, end=end, selector=selector or "", names=names)
        for problem in facts["problems"]:
            ev.problems.append(f"Prometheus (--prometheus {prom.url}): {problem}; the rules that read what the "
                               "server did were not run, the rest of the evidence still counts")
        if not facts["problems"]:
            ev.runtime = facts
            ev.sources["runtime"] = f"Prometheus at {prom.url}, {_window(facts)}"
        return
    url = metrics_url
    if url is None and server is not None:
        if not ev.args.get("enable_metrics"):
            return  # no /metrics to read: the server runs without --enable-metrics
        url = getattr(server, "url", None)
        if not url:
            return
    if url is None:
        return
    from kit.metrics import scrape

    try:
        page = scrape(url, timeout=timeout)
    except MetricsError as err:
        ev.problem(f"the server's /metrics ({url})", err)
        return
    add_runtime_page(ev, page, source=url.rstrip("/") + ("" if url.rstrip("/").endswith("/metrics") else "/metrics"),
                     started=getattr(server, "started_at", None) if server is not None else None,
                     pid=getattr(server, "pid", None) if server is not None else None, names=names)


def add_runtime_page(ev, page, *, source: str, at: float | None = None, started: float | None = None,
                     pid: int | None = None, names=None) -> None:
    """Put what one ``/metrics`` page (kit.metrics.scrape or parse_metrics_text) says in ``ev.runtime``:
    a live scrape, or the page a captured case keeps (``at``: when it was scraped)."""
    from kit.metrics import page_facts

    facts = page_facts(page, source=source, names=names if names is not None else _names(ev), started=started, at=at)
    if pid is not None:
        facts["span"]["pid"] = pid
    ev.runtime = facts
    ev.sources["runtime"] = f"one scrape of {facts['span']['source']}, {_window(facts)}"


def add_runtime_pages(ev, pages, *, source: str, names=None) -> None:
    """Put what several ``/metrics`` pages of one server say in ``ev.runtime`` (kit.metrics.pages_facts):
    ``pages`` a list of (epoch, exposition text or parsed page), e.g. the pages a benchmark run kept
    while it ran, so the counters are what the server did during that load."""
    from kit.metrics import pages_facts, parse_metrics_text

    try:
        parsed = [(float(at), parse_metrics_text(page) if isinstance(page, str) else page) for at, page in pages]
        facts = pages_facts(parsed, source=source, names=names if names is not None else _names(ev))
    except KitError as err:
        ev.problem(f"the /metrics pages of {source}", err)
        return
    ev.runtime = facts
    ev.sources["runtime"] = f"{len(parsed)} scrapes of {source}, {_window(facts)}"


def _names(ev):
    """The metric families the server's release declares (its own source when at hand)."""
    from kit.metrics import declared_metrics, metric_names

    try:
        if ev.tree is not None:
            found = declared_metrics(ev.tree)
            found.version = found.version or ev.version
            if found.files:
                return found
        return metric_names(ev.version) if ev.version else None
    except KitError as err:
        ev.problem(f"the metric names of sglang {ev.version}", err)
        return None


def _iso(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return datetime.fromtimestamp(float(epoch), timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _window(facts: dict) -> str:
    span = facts.get("span") or {}
    if span.get("kind") == "page":
        pid = f"pid {span['pid']} " if span.get("pid") else "the process "
        since = f"since {pid}started at {_iso(span['start'])}" if span.get("start") else f"since {pid}started"
        return f"the span {since} to the scrape at {_iso(span['end'])} (counters since the start, gauges at the scrape)"
    if span.get("kind") == "pages":
        return (f"the {span['seconds']:.0f} s from {_iso(span['start'])} to {_iso(span['end'])} ({span['pages']} "
                f"pages of {span['source']}, one every {span['every']:.1f} s: counters over the span, gauges their "
                "most at a page)")
    sel = f", series {span['selector']}" if span.get("selector") else ""
    return f"the {span.get('seconds', 0):g} s from {_iso(span.get('start'))} to {_iso(span.get('end'))}{sel}"


# --------------------------------------------------------------------------- reading the facts


def _facts(case: Case) -> dict:
    return getattr(case.ev, "runtime", None) or {}


def _fact(case: Case, key: str) -> dict | None:
    """A measured fact, or None (the gaps say why)."""
    fact = _facts(case).get(key)
    return fact if fact and fact.get("status") == "measured" else None


def _total(case: Case, key: str) -> float | None:
    fact = _fact(case, key)
    return sum(fact["values"].values()) if fact else None


def _peak(case: Case, key: str) -> float | None:
    fact = _fact(case, key)
    return max(fact["values"].values()) if fact else None


def _said(fact: dict, numbers: str) -> str:
    """``metric (query): numbers``: what was asked and what came back."""
    return f"{fact.get('query') or fact['metric']}: {numbers}"


def _decl_site(fact: dict | None) -> list[str]:
    return [short_path(fact["site"])] if fact and fact.get("site") else []


def _src_site(case: Case, text: str, under: str = "observability/") -> list[str]:
    return source_site(case, text, under)


def _peak_words(fact: dict, what: str) -> str:
    """'the most X' over a span; 'X at the scrape' for a gauge read once."""
    if fact.get("at_scrape"):
        return f"{what} at the scrape (a gauge read once, not a peak)"
    return f"the most {what} at a page (sampled, not the true peak)" if fact.get("sampled") else f"the most {what}"


def _when(case: Case) -> str:
    return _window(_facts(case))


def _measured(reason: str, share: float, metric: str, *inputs: str) -> Impact:
    return Impact(max(0.0, min(1.0, share)), "measured", reason, metric, tuple(inputs))


# --------------------------------------------------------------------------- graph passes by mode


def _graph_limit(case: Case):
    return case.value("cuda_graph_max_bs") or case.value("cuda_graph_max_bs_decode")


def _decode_passes(case: Case) -> tuple[float, float] | None:
    fact = _fact(case, "graph_passes")
    if fact is None:
        return None
    values = fact["values"]
    return values.get("decode_cuda_graph", 0.0), values.get("decode_none", 0.0)


def _decode_eager(case: Case) -> list[str] | None:
    passes = _decode_passes(case)
    if passes is None or passes[1] <= 0:
        return None
    graph, eager = passes
    fact = _fact(case, "graph_passes")
    total = graph + eager
    out = [f"{_said(fact, f'decode_cuda_graph {graph:g}, decode_none {eager:g}')}: {eager / total:.1%} of "
           f"{total:g} decode passes ran eager, over {_when(case)}"]
    site = _src_site(case, '"decode_cuda_graph" if value else "decode_none"')
    if site:
        out.append(f"sglang counts one pass per decode batch, decode_none when the batch could not replay a graph "
                   f"({site[0]})")
    limit, running = _graph_limit(case), _peak(case, "running_max")
    if graph > 0 and limit and running is not None and running > int(limit):
        out.append(f"{_said(_fact(case, 'running_max'), f'{running:g}')}: running requests peaked above the "
                   f"largest captured batch, cuda_graph_max_bs = {limit} ({case.origin('cuda_graph_max_bs')})")
    elif graph == 0:
        out.append("no decode pass replayed a graph: the decode CUDA graph is off or was never captured")
    return out


def _decode_eager_impact(case: Case) -> Impact:
    graph, eager = _decode_passes(case)
    return not_estimated(f"{eager:g} of {graph + eager:g} decode passes ran eager ({_when(case)}); what an eager pass "
                         "costs against a graph replay at those batch sizes is not in the metrics", "decode tok/s",
                         "a torch profile of decode steps above and below the captured batch size (sgl-kit profile)",
                         "a load benchmark within the captured batch size and above it (sgl-kit bench --concurrency N)")


def _decode_eager_fix(case: Case) -> Fix:
    graph, _ = _decode_passes(case)
    limit, running = _graph_limit(case), _peak(case, "running_max")
    option = case.option("cuda_graph_max_bs") or case.option("cuda_graph_max_bs_decode")
    if graph > 0 and limit and running is not None and running > int(limit) and option:
        return ([Change(option, int(running))],
                [f"or cap {case.option('max_running_requests') or '--max-running-requests'} at {limit}, the "
                 "largest captured batch"], ["capturing batch sizes the GPU memory cannot hold: each size keeps its "
                                             "own graph buffers"])
    return [], ["see why the decode graph is off in this launch (the decode-cuda-graph-off finding, or "
                "`sgl-kit why TARGET disable_cuda_graph`)"], []


rule(Rule(
    "decode-passes-eager", "Decode passes ran outside CUDA graphs (measured)", _ALL, ("runtime",),
    when=_decode_eager, impact=_decode_eager_impact, fix=_decode_eager_fix,
    sites=lambda case: _decl_site(_fact(case, "graph_passes"))
    + _src_site(case, '"decode_cuda_graph" if value else "decode_none"'),
    affects=("decode step",), covers=lambda case: {"cuda_graph_max_bs"}, gpu_only=True, group=GROUP,
    uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))


def _prefill_passes(case: Case) -> tuple[float, float] | None:
    fact = _fact(case, "graph_passes")
    if fact is None:
        return None
    values = fact["values"]
    return values.get("prefill_cuda_graph", 0.0), values.get("prefill_none", 0.0)


def _prefill_eager(case: Case) -> list[str] | None:
    passes = _prefill_passes(case)
    if passes is None or passes[1] <= 0 or passes[0] > 0:
        return None
    graph, eager = passes
    fact = _fact(case, "graph_passes")
    out = [f"{_said(fact, f'prefill_cuda_graph {graph:g}, prefill_none {eager:g}')}: none of {eager:g} prefill "
           f"passes ran in a graph, over {_when(case)}"]
    site = _src_site(case, '"prefill_cuda_graph" if value else "prefill_none"')
    if site:
        out.append(f"sglang counts one pass per prefill batch, prefill_none when it ran outside the piecewise graph "
                   f"({site[0]})")
    return out


rule(Rule(
    "prefill-passes-eager", "No prefill pass ran in a CUDA graph (measured)", _ALL, ("runtime",),
    when=_prefill_eager,
    impact=lambda case: not_estimated(f"{_prefill_passes(case)[1]:g} prefill passes ran eager ({_when(case)}); "
                                      "what the piecewise graph would save on them is not in the metrics",
                                      "time to first token",
                                      "time to first token with the piecewise CUDA graph on and off "
                                      "(sgl-kit bench on both launches)"),
    fix=lambda case: ([], ["see why the prefill graph is off in this launch (the prefill-cuda-graph-off finding, or "
                           "`sgl-kit why TARGET disable_piecewise_cuda_graph`)"], []),
    sites=lambda case: _decl_site(_fact(case, "graph_passes"))
    + _src_site(case, '"prefill_cuda_graph" if value else "prefill_none"'),
    affects=("prefill/extend",), gpu_only=True, group=GROUP,
    uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))


# --------------------------------------------------------------------------- queueing


def _queue_numbers(case: Case):
    waited, count, ttft = _total(case, "queue_time_sum"), _total(case, "queue_time_count"), _total(case, "ttft_sum")
    return waited, count, ttft


def _queued(case: Case) -> list[str] | None:
    waited, count, ttft = _queue_numbers(case)
    peak = _peak(case, "queue_max")
    share = waited / ttft if waited is not None and ttft else None
    if not ((peak is not None and peak >= 1) or (share is not None and share >= QUEUE_SHARE)):
        return None
    out = []
    if peak is not None:
        out.append(f"{_said(_fact(case, 'queue_max'), f'{peak:g}')}: "
                   f"{_peak_words(_fact(case, 'queue_max'), 'requests queued at once')}, over {_when(case)}")
    if waited is not None and count:
        p90 = _total(case, "queue_time_p90")
        tail = f", p90 {p90:.3f} s ({_fact(case, 'queue_time_p90')['query']})" if p90 is not None and p90 == p90 else ""
        out.append(f"{_said(_fact(case, 'queue_time_sum'), f'{waited:.3f} s')} over "
                   f"{_said(_fact(case, 'queue_time_count'), f'{count:g} requests')}: {waited / count:.3f} s each "
                   f"on average{tail}")
    if share is not None:
        out.append(f"{_said(_fact(case, 'ttft_sum'), f'{ttft:.3f} s')} of summed time to first token: "
                   f"{share:.1%} of it was spent in the queue")
    limit = which_limit(case)
    if limit is not None:
        out.insert(0, f"the limit that holds is the {limit.kind}: {limit.summary}")
    return out


def _queued_impact(case: Case) -> Impact:
    waited, count, ttft = _queue_numbers(case)
    if waited is not None and ttft:
        return _measured(f"requests spent {waited:.3f} s in the queue of {ttft:.3f} s summed time to first token "
                         f"({_when(case)}): that share of the wait for the first token is queueing",
                         waited / ttft, "time to first token", _fact(case, "queue_time_sum")["query"],
                         _fact(case, "ttft_sum")["query"])
    return not_estimated("the queue's gauge shows requests waiting, but the queue time or the time to first token "
                         f"is not in the series ({_when(case)})", "throughput under load",
                         "sglang:queue_time_seconds and sglang:time_to_first_token_seconds over the same span "
                         "(both need --enable-metrics)")


rule(Rule(
    "queue-time-measured", "Requests waited in the scheduler's queue (measured)", _ALL,
    ("runtime",),
    when=_queued, impact=_queued_impact, fix=queue_fix, risk=queue_risk,
    sites=lambda case: _decl_site(_fact(case, "queue_time_sum")) + _src_site(case, "observe_queue_time(self."),
    affects=("queueing",), group=GROUP, covers=lambda case: {"max_running_requests"} if which_limit(case) else set(),
    uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))


# --------------------------------------------------------------------------- retraction


def _retracted(case: Case) -> list[str] | None:
    count, peak = _total(case, "retracted_requests"), _peak(case, "retracted_max")
    if not ((count or 0) > 0 or (peak or 0) > 0):
        return None
    out = []
    if count is not None:
        out.append(f"{_said(_fact(case, 'retracted_requests'), f'{count:g}')} requests retracted over {_when(case)}")
    if peak:
        out.append(f"{_said(_fact(case, 'retracted_max'), f'{peak:g}')} retracted in one step at most")
    tokens = [(k, _total(case, k)) for k in ("retracted_input_tokens", "retracted_output_tokens")]
    if all(v is not None for _, v in tokens):
        out.append(f"{tokens[0][1]:g} input and {tokens[1][1]:g} output tokens of them are computed again "
                   f"({_fact(case, 'retracted_input_tokens')['query']}; {_fact(case, 'retracted_output_tokens')['query']})")
    usage = _peak(case, "token_usage_max")
    if usage is not None:
        out.append(f"{_said(_fact(case, 'token_usage_max'), f'{usage:.2f}')}: "
                   f"{_peak_words(_fact(case, 'token_usage_max'), 'use of the KV pool')}")
    return out


def _retracted_impact(case: Case) -> Impact:
    rin, rout = _total(case, "retracted_input_tokens"), _total(case, "retracted_output_tokens")
    prompt = _total(case, "prompt_tokens")
    redone = (f"{rin + rout:g} tokens of retracted requests are prefilled again, against {prompt:g} prompt tokens "
              f"(measured, {_when(case)}); " if rin is not None and rout is not None and prompt else
              f"requests were retracted ({_when(case)}); ")
    return not_estimated(redone + "what the redone prefill and the wait cost in throughput depends on the load",
                         "throughput under load",
                         "a load benchmark at the concurrency served with more KV room (sgl-kit bench --concurrency N "
                         "on both launches)")


rule(Rule(
    "requests-retracted-measured", "The scheduler retracted running requests for KV room (measured)", _ALL,
    ("runtime",),
    when=_retracted, impact=_retracted_impact,
    fix=lambda case: ([], ["more room for the KV cache (a higher --mem-fraction-static, or --max-total-tokens when it "
                           f"is set), or fewer running requests ({case.option('max_running_requests') or '--max-running-requests'})"],
                      ["a lower --schedule-conservativeness than needed: it admits requests the pool cannot hold"]),
    sites=lambda case: _decl_site(_fact(case, "retracted_requests")) + _src_site(case, "increment_retracted_reqs(",
                                                                                  "managers/"),
    affects=("queueing",), group=GROUP,
    uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))


# --------------------------------------------------------------------------- prefix cache


def _cache(case: Case) -> tuple[float, float] | None:
    prompt, cached = _total(case, "prompt_tokens"), _fact(case, "cached_tokens")
    if not prompt or cached is None:
        return None
    return sum(cached["values"].values()), prompt


def _cache_low(case: Case) -> list[str] | None:
    found = _cache(case)
    if found is None or found[0] / found[1] >= LOW_CACHE_HIT:
        return None
    cached, prompt = found
    fact = _fact(case, "cached_tokens")
    by = ", ".join(f"{k} {v:g}" for k, v in fact["values"].items()) or f"0 ({fact.get('none', 'no series')})"
    out = [f"{_said(_fact(case, 'cached_tokens'), by)} of {_said(_fact(case, 'prompt_tokens'), f'{prompt:g}')} prompt "
           f"tokens: {cached / prompt:.1%} came from the prefix cache, over {_when(case)} (the kit counts under "
           f"{LOW_CACHE_HIT:.0%} as low)"]
    reuse = prefix_reuse(case)
    if reuse is not None:
        out.append(f"the workload's prompts share {reuse['share']:.0%} of their length with an earlier prompt's "
                   f"prefix ({reuse['basis']}, {case.ev.bench['source']})")
    if case.value("disable_radix_cache") is True:
        out.append(f"disable_radix_cache = True ({case.origin('disable_radix_cache')}): nothing is kept to reuse")
    reset = _src_site(case, "cache_hit_rate = 0.0")
    if reset:
        out.append(f"sglang:cache_hit_rate is not averaged here: sglang sets it to 0.0 at every decode log "
                   f"({reset[0]}), so it reads the last prefill's rate or 0")
    return out


def _cache_fix(case: Case) -> Fix:
    option = case.option("disable_radix_cache")
    if case.value("disable_radix_cache") is True and case.asked("disable_radix_cache") and option:
        return [Change(option, remove=True)], [], []
    return [], ["requests that share a prefix (system prompt, few-shot examples, chat history) hit the cache when "
                "it is not evicted first: put the shared part first and keep it byte-identical; route a session "
                "to the same replica"], []


def _cache_not_here(case: Case) -> str | None:
    """Why a low hit rate is not a cause for this workload: its prompts share no prefix, or nothing says they do."""
    reuse, found = prefix_reuse(case), _cache(case)
    hit = found[0] / found[1] if found else 0.0
    if reuse is None:
        return ("whether the workload's prompts share a prefix is not in the evidence: a low hit rate alone is no "
                "cause (give --bench RUN of the same prompts, or a sample of the requests served)")
    if reuse["share"] <= hit + LOW_CACHE_HIT:
        return (f"the workload's prompts share {reuse['share']:.0%} ({reuse['basis']}, {case.ev.bench['source']}), "
                f"and {hit:.0%} came from the cache: there was nothing more to reuse")
    return None


rule(Rule(
    "prefix-cache-hit-low", "Few prompt tokens came from the prefix cache (measured)", _ALL, ("runtime",),
    when=_cache_low, applies=_cache_not_here,
    impact=lambda case: not_estimated(f"{_cache(case)[0]:g} of {_cache(case)[1]:g} prompt tokens were cached "
                                      f"({_when(case)}); how much more the workload could share is not in the "
                                      "metrics", "time to first token",
                                      "the prompts served: how long a prefix they share (a sample of requests)"),
    fix=_cache_fix,
    sites=lambda case: _decl_site(_fact(case, "cached_tokens")) + _src_site(case, "cache_hit_rate = 0.0"),
    affects=("prefill/extend",), covers=lambda case: {"disable_radix_cache"}, group=GROUP,
    uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))


# --------------------------------------------------------------------------- accept length over time


def _accept_drop(case: Case) -> tuple | None:
    """(series, before, after, at, first, last) of the largest drop of the accept length's median."""
    fact = _fact(case, "accept_length_over_time")
    if fact is None:
        return None
    from statistics import fmean, median

    best, key = None, None
    for series, points in fact["series"].items():
        points = [(t, v) for t, v in points if v == v and v > 0]
        for i in range(_MIN_POINTS, len(points) - _MIN_POINTS + 1):
            before = median(v for _, v in points[:i])
            after = median(v for _, v in points[i:])
            drop = (before - after) / before if before else 0.0
            # Medians give the same drop for every split inside a run of equal values; among those, the
            # split whose means differ most is where the values changed.
            here = (round(drop, 9), fmean(v for _, v in points[:i]) - fmean(v for _, v in points[i:]))
            if key is None or here > key:
                best, key = (drop, series, before, after, points[i][0], points[0][0], points[-1][0]), here
    if best is None or best[0] < ACCEPT_DROP:
        return None
    return best[1:]


def _accept_dropped(case: Case) -> list[str] | None:
    found = _accept_drop(case)
    if found is None:
        return None
    series, before, after, at, first, last = found
    step = _fact(case, "accept_length_over_time")["step"]
    return [f"sglang:spec_accept_length{{{series}}} every {step:g} s: the median fell from {before:.2f} "
            f"({_iso(first)} to {_iso(at)}) to {after:.2f} ({_iso(at)} to {_iso(last)}), "
            f"{(before - after) / before:.0%} lower from {_iso(at)} (the kit counts {ACCEPT_DROP:.0%} as a drop)",
            f"what changed then: `sgl-kit timeline TARGET --prometheus URL --since ...` marks restarts and the "
            f"launch or version that changed at each, around {_iso(at)}"]


rule(Rule(
    "accept-length-dropped", "The speculative accept length dropped (measured over time)", _ALL, ("runtime",),
    when=_accept_dropped,
    impact=lambda case: not_estimated(f"the accept length fell from {_accept_drop(case)[1]:.2f} to "
                                      f"{_accept_drop(case)[2]:.2f}; decode tok/s per request falls with it, less the "
                                      "draft's share of a step, which the metrics do not give", "decode tok/s",
                                      "sglang:gen_throughput over the same two spans at the same concurrency",
                                      "the launch and the draft model before and after (sgl-kit timeline)"),
    fix=lambda case: ([], ["compare the launch and the sglang version before and after the drop (sgl-kit timeline, "
                           "then sgl-kit args diff); a changed draft model, speculative flags or prompt mix moves it"],
                      []),
    sites=lambda case: _decl_site(_fact(case, "accept_length_over_time")),
    affects=("verify", "draft"), group=GROUP,
    uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))


# --------------------------------------------------------------------------- what was not answered

_ASKED = {  # fact -> the question it answers, for the gaps
    "graph_passes": "graph passes by mode",
    "queue_time_sum": "time spent in the queue",
    "retracted_requests": "retracted requests",
    "cached_tokens": "prefix cache hits",
    "accept_length_over_time": "accept length over time",
}
_WHY_MISSING = {
    "graph_passes": "a labelled counter: sglang creates each mode's series on its first pass",
    "retracted_requests": "sglang creates it on the first retraction; none may have happened",
    "cached_tokens": "a labelled counter: sglang creates each cache_source's series on its first cache hit",
    "accept_length_over_time": "reported only while speculative decoding runs",
}


@gap
def evidence_gaps(case: Case) -> list[str]:
    """For each runtime question the rules could not answer: which series was missing and why it may be.
    Empty when no runtime evidence was asked for."""
    facts = _facts(case)
    if not facts:
        return []
    out = []
    for key, question in _ASKED.items():
        fact = facts.get(key) or {}
        if fact.get("status") in (None, "measured"):
            continue
        why = fact.get("why", "")
        if fact.get("status") == "no series":
            reasons = [_WHY_MISSING.get(key, ""), "only attention-TP rank 0 reports unless "
                       "--enable-metrics-for-all-schedulers"]
            why = f"{why}; it may be missing because: " + "; ".join(r for r in reasons if r)
            site = f" (declared at {short_path(fact['site'])})" if fact.get("site") else ""
            why = why.replace("(not a zero)", f"{site} (not a zero)") if site else why
        out.append(f"{question} ({_window(facts)}): {fact.get('status')}: {why}")
    return out
