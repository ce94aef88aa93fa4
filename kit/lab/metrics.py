"""``/metrics`` in Prometheus text format, with sglang 0.5.11's metric names.

Names, help texts and label names follow ``srt/observability/metrics_collector.py``
(the tokenizer's and the scheduler's collectors); the lab exports the subset it models.
``sglang:cuda_graph_passes_total{mode=...}`` stands in for what only a GPU shows: the lab has no
batch steps, so it counts one decode pass per chunk it sends (in the graph when the running batch
is within cuda_graph_max_bs) and one prefill pass per admitted batch; a mode appears on its first pass.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["prometheus_text"]


def _labels(labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(out: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, str, float]]) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
    out.extend(f"{sample}{labels} {float(value)!r}" for sample, labels, value in samples)


def prometheus_text(engine, labels: Mapping[str, str]) -> str:
    """The metrics page: scheduler gauges, tokenizer counters and latency histograms."""
    sched = dict(labels, tp_rank="0", pp_rank="0", moe_ep_rank="0")
    sl, tl = _labels(sched), _labels(labels)
    c = engine.counters
    accept = engine.avg_spec_accept_length() or 0.0
    out: list[str] = []
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", len(engine.running)),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", len(engine.waiting)),
        ("sglang:gen_throughput", "The generation throughput (token/s).", engine.last_gen_throughput),
        ("sglang:token_usage", "The token usage.", engine.used_tokens / engine.max_total_tokens),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.",
         c["cached_tokens"] / c["prompt_tokens"] if c["prompt_tokens"] else 0.0),
        ("sglang:spec_accept_length", "The average acceptance length of speculative decoding.", accept),
    ]
    for name, help_text, value in gauges:
        _family(out, name, "gauge", help_text, [(name, sl, value)])
    counters = [
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", c["prompt_tokens"]),
        ("sglang:generation_tokens", "Number of generation tokens processed.", c["generation_tokens"]),
        ("sglang:num_requests", "Number of requests processed.", c["requests"]),
        ("sglang:num_aborted_requests", "Number of requests aborted.", c["aborted"]),
    ]
    for name, help_text, value in counters:
        _family(out, name, "counter", help_text, [(name + "_total", tl, value)])
    passes = [(name, _labels(dict(sched, mode=mode)), count) for mode, count in engine.graph_passes.items()
              for name in ("sglang:cuda_graph_passes_total",)]
    if passes:
        _family(out, "sglang:cuda_graph_passes", "counter", "Total number of forward passes categorized by CUDA graph.",
                passes)
    histograms = [
        ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
        ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
        ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "e2e"),
    ]
    for name, help_text, key in histograms:
        _family(out, name, "histogram", help_text, _histogram(name, labels, engine.histograms[key]))
    return "\n".join(out) + "\n"


def _histogram(name: str, labels: Mapping[str, str], hist) -> list[tuple[str, str, float]]:
    samples, running = [], 0
    for bound, count in zip((*hist.buckets, float("inf")), hist.counts, strict=True):
        running += count
        le = "+Inf" if bound == float("inf") else repr(float(bound))
        samples.append((name + "_bucket", _labels(dict(labels, le=le)), running))
    samples.append((name + "_count", _labels(labels), hist.count))
    samples.append((name + "_sum", _labels(labels), hist.sum))
    return samples
