"""The answer in one shape, above the findings' details: problem class, strongest signal, best guess, what
was checked and ruled out, next step, and the fix's risk; or the verdict that the server is fine, with
its basis, or that the evidence does not decide.

``verdict`` is one of:

- ``cause found``: a finding that applies here; the first one (the findings' order) is the best guess;
- ``fine``: no finding, and the evidence of the load says the server does what this hardware does: the
  measured single-stream rate within :data:`FINE_SHARE` of the roofline, no queue, no retraction, graphs
  in use (on a GPU);
- ``no cause found``: no finding, but the evidence cannot show the server is fine (what is missing is said).

The kit's own threshold :data:`FINE_SHARE` is not sglang's: a memory-bound decode step that reaches half
the bandwidth ceiling leaves launch overhead and kernels, not a setting, as the gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .case import Case
from .limits import FULL_POOL, span_peak

__all__ = ["CLASSES", "FINE_SHARE", "Answer", "answer_of", "load_seen"]

FINE_SHARE = 0.5  # the kit's own: a measured single-stream rate at or above this share of the roofline is fine

# The problem class of a finding, by the first part of serving it slows (kit.doctor.result.PARTS).
CLASSES = {"queueing": "capacity: requests wait for the server (queueing)",
           "prefill/extend": "prefill: time to first token",
           "decode step": "decode speed: tokens per second of each stream",
           "verify": "decode speed: speculative decoding's verify step",
           "draft": "decode speed: speculative decoding's draft",
           "all-reduce": "multi-GPU communication (the all-reduce between GPUs)",
           "scheduling": "scheduling overhead between steps",
           "streaming": "streaming: how often the client receives its tokens"}


@dataclass
class Answer:
    verdict: str  # "cause found", "fine", "no cause found"
    problem_class: str
    strongest_signal: str
    best_guess: str
    checked: list[str] = field(default_factory=list)  # the rules that ran
    ruled_out: list[str] = field(default_factory=list)  # what was checked and did not hold (or does not apply)
    next_step: str = ""
    risk: str = ""
    basis: list[str] = field(default_factory=list)  # what the verdict rests on

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "problem_class": self.problem_class,
                "strongest_signal": self.strongest_signal, "best_guess": self.best_guess,
                "checked": list(self.checked), "ruled_out": list(self.ruled_out), "next_step": self.next_step,
                "risk": self.risk, "basis": list(self.basis)}

    def rows(self) -> list[tuple[str, str]]:
        """(label, text) in the answer's order, for text and HTML."""
        ruled = (f"{len(self.checked)} rules checked; ruled out: " + "; ".join(self.ruled_out)
                 if self.ruled_out else f"{len(self.checked)} rules checked")
        rows = [("verdict", self.verdict), ("problem class", self.problem_class),
                ("strongest signal", self.strongest_signal), ("best guess", self.best_guess),
                ("checked", ruled), ("next step", self.next_step), ("risk", self.risk or "none beyond a restart")]
        rows += [("basis", b) for b in self.basis]
        return rows


def load_seen(case: Case) -> list[str]:
    """What the evidence says of the load the server served: the benchmark's and the server's own numbers."""
    out = []
    bench = case.ev.bench or {}
    if bench.get("concurrency") or bench.get("rate"):
        how = f"{bench['rate']} requests per second" if bench.get("rate") else f"{bench['concurrency']} at once"
        prompts = (f", prompts of {bench['prompt_tokens_mean']:.0f} tokens on average"
                   if bench.get("prompt_tokens_mean") else "")
        out.append(f"the benchmark {bench['source']} sent {bench.get('requests') or '?'} requests, {how}{prompts}")
    for key, what in (("queue_max", "queued at once"), ("running_max", "running at once"),
                      ("token_usage_max", "token usage")):
        peak, _ = span_peak(case, key)
        if peak is not None:
            out.append(f"the most {what}: {peak:.2f}" if key == "token_usage_max" else f"the most {what}: {peak:g}")
    decode = case.ev.decode or {}
    if decode.get("max_running_req") is not None:
        out.append(f"the Decode batch lines: up to {decode['max_running_req']} running, "
                   f"{decode.get('max_queue_req') or 0} queued")
    return out


def _no_queue(case: Case) -> tuple[bool | None, str]:
    peak, where = span_peak(case, "queue_max")
    if peak is not None:
        return peak < 1, f"no request queued ({where}: at most {peak:g})"
    decode = case.ev.decode or {}
    if decode.get("max_queue_req") is not None:
        return decode["max_queue_req"] < 1, f"no request queued (the Decode batch lines: #queue-req at most " \
                                            f"{decode['max_queue_req']})"
    return None, "whether requests queued: no span of the server's metrics and no Decode batch lines"


def _no_retraction(case: Case) -> tuple[bool | None, str]:
    fact = (case.ev.runtime or {}).get("retracted_requests")
    if fact and fact.get("status") == "measured":
        n = sum(fact["values"].values())
        return n == 0, f"{n:g} requests retracted ({fact['query']})"
    if any(n.kind == "retract" for n in case.ev.messages):
        return False, "sglang's log retracted requests"
    if case.ev.runtime:
        return True, "no request retracted (sglang creates the counter on the first retraction, and has none)"
    usage = (case.ev.decode or {}).get("max_token_usage")
    if usage is not None and usage < FULL_POOL:
        # sglang retracts only when a decode step finds no room in the KV pool
        return True, (f"no retraction: token usage at most {usage:.2f} in the Decode batch lines, far from a full "
                      "pool, and no retraction in the log read")
    return None, "whether requests were retracted: no metrics of the server"


def _graphs(case: Case) -> tuple[bool | None, str]:
    if case.no_gpu:
        return True, f"CUDA graphs do not apply ({case.no_gpu})"
    fact = (case.ev.runtime or {}).get("graph_passes")
    if fact and fact.get("status") == "measured":
        values = fact["values"]
        eager = values.get("decode_none", 0)
        total = eager + values.get("decode_cuda_graph", 0)
        return (eager == 0 if total else None), f"decode passes in CUDA graphs: {total - eager:g} of {total:g}"
    if case.value("disable_cuda_graph") is True:
        return False, "disable_cuda_graph = True"
    decode = case.ev.decode or {}
    said, lines = decode.get("cuda_graph"), decode.get("lines") or 0
    if said is True:
        return True, (f"decode ran in CUDA graphs: `cuda graph: True` on every Decode batch line that shows the "
                      f"column ({lines} line(s) read)")
    if said is False:
        return False, f"decode ran eager: `cuda graph: False` on the {lines} Decode batch line(s) read"
    if said == "mixed":
        return False, "some Decode batch lines say `cuda graph: False`: those batches ran eager"
    return None, ("whether decode ran in CUDA graphs: no graph pass counts (--enable-metrics) and no `cuda graph` "
                  "column in Decode batch lines")


def _rate(case: Case) -> tuple[bool | None, str]:
    roof = case.roofline
    bench = case.ev.bench or {}
    if roof is None or not getattr(roof, "ceiling_tok_s", None):
        why = getattr(roof, "note", "") or "it needs the GPU and its bandwidth, the model's config.json and tp"
        return None, f"the measured rate against the roofline: no roofline ({why})"
    decode = case.ev.decode or {}
    if bench.get("tok_s"):
        if (bench.get("concurrency") or 1) != 1:
            return None, (f"the measured rate against the roofline: the roofline is one stream's, the benchmark ran "
                          f"{bench['concurrency']} at once (sgl-kit bench -c 1 compares)")
        rate, source = bench["tok_s"], bench["source"]
    elif decode.get("single_stream") and decode.get("gen_throughput"):
        rate = decode["gen_throughput"]
        source = f"the median gen throughput of {decode['lines']} Decode batch line(s) with one request running"
    else:
        return None, (f"the measured rate against the roofline ({roof.ceiling_tok_s:.0f} tok/s for one stream): "
                      "no measured rate (sgl-kit bench TARGET -c 1, then --bench RUN)")
    share = rate / roof.ceiling_tok_s
    return share >= FINE_SHARE, (f"one stream decodes at {rate:.1f} tok/s ({source}), {share:.0%} of the roofline's "
                                 f"{roof.ceiling_tok_s:.1f} tok/s for this GPU and model (the kit counts "
                                 f"{FINE_SHARE:.0%} or more as what the hardware does)")


def _fine(checked: list[str], ruled_out: list[str], basis: list[str]) -> Answer:
    """The verdict that the server does what this hardware does; its strongest signal is the rate's check."""
    return Answer("fine", "none: the server does what this hardware does", basis[3], "nothing to change in the launch",
                  list(checked), ruled_out, "if users still see it slow, measure from their side: their concurrency, "
                  "prompt lengths and network (sgl-kit bench with their load)", "", basis)


def answer_of(case: Case, findings: list, not_applicable: list, checked: list[str], questions: list[str],
              set_aside: tuple[str, ...] = ()) -> Answer:
    """The answer for these findings (ranked, the causes), those that do not apply, the rules that ran, the
    questions left open, and the ids of findings set aside (moot given another)."""
    found = {f.id for f in findings} | {f.id for f in not_applicable} | set(set_aside)
    why: dict[str, list[str]] = {}
    for f in not_applicable:
        why.setdefault(f.not_here, []).append(f.id)
    ruled_out = [f"does not apply ({reason}): {', '.join(ids)}" for reason, ids in why.items()]
    if set_aside:
        ruled_out.append("set aside, given another finding (said below): " + ", ".join(set_aside))
    quiet = [i for i in dict.fromkeys(checked) if i not in found]
    if quiet:
        ruled_out.append("no sign of: " + ", ".join(quiet))
    checks = [_no_queue(case), _no_retraction(case), _graphs(case), _rate(case)]
    basis = [text for _, text in checks]
    matched = [f for f in findings if f.id == "known-issue"]
    if findings and len(matched) == len(findings) and all(ok is True for ok, _ in checks):
        # only the release database's matches, none of them seen in what the server did: the evidence says fine
        return _fine(checked, ruled_out, basis + [f"{len(matched)} known issue(s) of this release match the launch "
                                                  "(listed below); none shows in this evidence"])
    if findings:
        top = findings[0]
        part = top.affects[0] if top.affects else ""
        fix = "; ".join(top.fix) if top.fix else "no change to the launch is prescribed"
        signal = top.evidence[0] if top.evidence else top.title
        nxt = (f"apply: {fix}; then prove it with the same load (sgl-kit validate, or sgl-kit bench before and "
               "after, and sgl-kit bench compare)" if top.changes else f"{fix}")
        size = (f"~{top.estimate.share:.0%} of {top.estimate.metric}, {top.estimate.basis}"
                if top.estimate.share is not None else f"{top.estimate.metric}: size not estimated")
        return Answer("cause found", CLASSES.get(part, part or "not classed"), signal,
                      f"{top.title} [{top.id}] ({size})", list(checked), ruled_out, nxt,
                      top.risk, [])
    if all(ok is True for ok, _ in checks):
        return _fine(checked, ruled_out, basis)
    failed = [text for ok, text in checks if ok is False]
    unknown = [text for ok, text in checks if ok is None]
    nxt = ("collect: " + "; ".join(unknown)) if unknown else (questions[0] if questions else "")
    return Answer("no cause found", "not determined from this evidence",
                  failed[0] if failed else "no rule fired", "none: no rule found a cause in this evidence",
                  list(checked), ruled_out, nxt, "", basis)
