"""Which limit holds when requests wait: the running cap, the KV pool, or the prefill budget, with its numbers.

The queue rules (``requests-queued`` from the log, ``queue-time-measured`` from the metrics) see that
requests waited; :func:`which_limit` says why, from the same evidence, never as a list of things to
check. It reads the server's own numbers: the Decode/Prefill batch lines of the log (``#running-req``,
``token usage``, ``#new-token``, ``#queue-req``), what the server did over a span (``Evidence.runtime``:
Prometheus, or the ``/metrics`` pages a benchmark run kept, whose gauges are sampled peaks), the ready
line's pool size and running cap (``Evidence.capacity``), the resolved arguments, and the load a
benchmark sent (``Evidence.bench``). In order:

1. the KV pool: token usage at or above :data:`FULL_POOL` of the pool, or requests retracted;
2. the running cap: as many requests ran as ``max_running_requests`` allows;
3. the prefill budget: prefill batches of a full chunk (``chunked_prefill_size``) while requests queued.

When none of them shows, the answer says so and which evidence would tell (:data:`UNKNOWN`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .case import Case
from .result import Change

__all__ = ["CHUNKS_PER_PROMPT", "FULL_POOL", "LIMIT_FACTS", "UNKNOWN", "Limit", "chunk_target", "prefill_chunks", "prefix_reuse",
           "span_peak", "which_limit"]

FULL_POOL = 0.9  # the kit's own threshold: token usage at or above this share of the pool counts as full
# The facts which_limit reads when present (kit.doctor.facts): a rule that calls it declares them in ``uses``.
LIMIT_FACTS = ("args", "bench", "capacity", "command", "decode", "notices", "prefill", "runtime")
UNKNOWN = ("the running requests, token usage and prefill batch sizes under the load: the Decode/Prefill batch "
           "lines of the log over those minutes, a benchmark run that kept the server's /metrics (the server "
           "launched with --enable-metrics, then sgl-kit bench, then --bench RUN), or --prometheus URL")


@dataclass
class Limit:
    kind: str  # "KV pool", "running cap", "prefill budget"
    summary: str  # the limit with its numbers, in one sentence
    evidence: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    risk: str = ""  # what the fix may cost, in this case's numbers


def prefix_reuse(case: Case) -> dict | None:
    """How much of the workload's prompts an earlier prompt's prefix covers (``share``, with its ``basis``):
    the benchmark's own prompts (kit.bench keeps it with the run), or None when no evidence tells."""
    found = (case.ev.bench or {}).get("prefix_reuse")
    return found if isinstance(found, dict) and found.get("share") is not None else None


CHUNKS_PER_PROMPT = 4  # the kit's own threshold: a prompt prefilled in this many chunks or more is split finely


def chunk_target(case: Case) -> int:
    """The chunked_prefill_size to try: the next power of two that holds the longest prompt seen (the
    benchmark's), and at least CHUNKS_PER_PROMPT times the chunk now."""
    chunk = int(case.value("chunked_prefill_size"))
    longest = int((case.ev.bench or {}).get("prompt_tokens_max") or 0)
    return max(chunk * CHUNKS_PER_PROMPT, 1 << max(0, longest - 1).bit_length())


def span_peak(case: Case, key: str) -> tuple[float | None, str]:
    """A gauge's peak over a span (never one scrape: a gauge read once is not a peak), and where from."""
    fact = (case.ev.runtime or {}).get(key)
    if not fact or fact.get("status") != "measured" or fact.get("at_scrape"):
        return None, ""
    return max(fact["values"].values()), fact.get("query") or fact.get("metric", "")


def _counted(case: Case, key: str) -> float | None:
    fact = (case.ev.runtime or {}).get(key)
    return sum(fact["values"].values()) if fact and fact.get("status") == "measured" else None


def _peak(case: Case, log_key: str, runtime_key: str, log_where: str) -> tuple[float | None, str]:
    """The larger of the log's peak and the runtime span's, with where it was read."""
    found = []
    log_value = (case.ev.decode or {}).get(log_key)
    if log_value is not None:
        found.append((float(log_value), log_where))
    value, where = span_peak(case, runtime_key)
    if value is not None:
        found.append((value, where))
    return max(found, default=(None, ""))


def prefill_chunks(case: Case) -> tuple[int, int, int]:
    """(prefill lines, lines whose #new-token filled the chunk, the most #queue-req among those)."""
    chunk = case.value("chunked_prefill_size")
    lines = case.ev.prefill or []
    if not isinstance(chunk, int) or chunk <= 0:
        return len(lines), 0, 0
    full = [s for s in lines if getattr(s, "new_token", None) is not None and s.new_token >= chunk]
    return len(lines), len(full), max((s.queue_req or 0 for s in full), default=0)


def which_limit(case: Case) -> Limit | None:
    """The limit that holds, or None when the evidence shows none of them (then :data:`UNKNOWN` says what
    would tell)."""
    decode_where = case.ev.sources.get("decode", "the Decode batch lines")
    sent = (case.ev.bench or {}).get("concurrency")
    running, running_where = _peak(case, "max_running_req", "running_max", decode_where)
    usage, usage_where = _peak(case, "max_token_usage", "token_usage_max", decode_where)
    cap = (case.ev.capacity or {}).get("max_running_requests") or case.value("max_running_requests")
    pool = (case.ev.capacity or {}).get("max_total_num_tokens") or case.value("max_total_tokens")
    retracted = _counted(case, "retracted_requests") or 0
    retract_lines = [n for n in case.ev.messages if n.kind == "retract"]
    load = f"; the load sent {sent} at once ({case.ev.bench['source']})" if sent else ""

    if (usage is not None and usage >= FULL_POOL) or retracted or retract_lines:
        size = f" of a pool of {pool} tokens" if pool else ""
        parts = [f"token usage reached {usage:.2f}{size} ({usage_where})"] if usage is not None else []
        if retracted:
            parts.append(f"{retracted:g} requests were retracted and prefilled again")
        elif retract_lines:
            parts.append(f"sglang retracted requests ({len(retract_lines)} log lines)")
        advice = ["more room for the KV cache: a higher --mem-fraction-static, or a larger --max-total-tokens where "
                  "the launch sets it"]
        changes = []
        asked = (case.ev.explicit or {}).get("max_total_tokens")
        if isinstance(asked, int) and case.option("max_total_tokens"):
            changes = [Change(case.option("max_total_tokens"), asked * 2)]
            advice = [f"the launch itself sets the pool ({case.option('max_total_tokens')} {asked}): double it, if "
                      "the memory allows"]
        return Limit("KV pool", "the KV pool is full: " + "; ".join(parts) + load, parts, changes, advice,
                     "a larger pool takes memory from activations and CUDA graphs (an out-of-memory error at start "
                     "or under a long prompt); the fix is proved only by the same load without retraction")
    if running is not None and cap and running >= int(cap):
        origin = case.origin("max_running_requests")
        summary = (f"{running:g} requests ran at once, at the cap max_running_requests {cap} ({origin}) "
                   f"({running_where}){load}: the rest waited for a slot")
        option = case.option("max_running_requests") or "--max-running-requests"
        target = int(sent) if sent and int(sent) > int(cap) else int(cap) * 2
        graph = None if case.no_gpu else case.value("cuda_graph_max_bs")
        risk = (f"{target} running requests need {target} times a request's KV tokens in the pool"
                + (f" ({pool} tokens now)" if pool else "")
                + (f"; decode batches above cuda_graph_max_bs {graph} run without CUDA graphs" if graph else ""))
        summary += (f"; {option} {target} is the load's concurrency" if sent and int(sent) > int(cap) else
                    f"; {option} {target} is twice the cap (the load's concurrency is not in the evidence)")
        return Limit("running cap", summary, [summary], [Change(option, target)], [], risk)
    lines, full, queued = prefill_chunks(case)
    if full and queued:
        chunk = case.value("chunked_prefill_size")
        prompts = (case.ev.bench or {}).get("prompt_tokens_mean")
        seen = f" against prompts of {prompts:.0f} tokens on average ({case.ev.bench['source']})" if prompts else ""
        summary = (f"{full} of {lines} prefill batches filled the chunk of {chunk} tokens (chunked_prefill_size, "
                   f"{case.origin('chunked_prefill_size')}) while up to {queued} requests queued{seen}: the prefill "
                   "budget paces admission")
        option = case.option("chunked_prefill_size") or "--chunked-prefill-size"
        return Limit("prefill budget", summary, [summary], [Change(option, chunk_target(case))], [],
                     "a larger chunk makes each prefill step longer: running requests' next tokens wait for it "
                     "(inter-token latency spikes)")
    return None
