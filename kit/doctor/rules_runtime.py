"""Rules about the running server: what its log says about capacity, queues, speculative decoding
under load, the tokenizer and the MoE kernels. They read the evidence a pasted log holds (sglang's
notices with their line, the ready line's numbers, ``Decode batch`` / ``Prefill batch`` lines), so
they are gated by that evidence, not by a version floor: 0.4.x lines carry ``accept len`` too.

They register into kit.doctor.rulebase.RULES, like kit.doctor.rules and kit.doctor.rules_hw.
:func:`evidence_gaps` asks what no rule asks (the concurrency DP attention is served at); the questions
of missing evidence are generated from the rules' declarations (kit.doctor.facts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kit._text import short_path
from kit.errors import KitError

from .case import Case
from .limits import FULL_POOL, LIMIT_FACTS, UNKNOWN, which_limit
from .result import Change
from .rulebase import ALL_VERSIONS as _ALL
from .rulebase import Fix, Impact, Rule, gap, not_estimated, rule

__all__ = ["evidence_gaps", "queue_fix", "queue_risk"]

# The kit's own threshold (not sglang's) for "many requests at once": a decode step of 16 or more
# sequences is past the batch sizes at which speculative decoding's extra verify tokens come free.
HIGH_CONCURRENCY = 16


def _said(case: Case, pattern: str, kinds: tuple[str, ...] = ()) -> list:
    """sglang's notices and warnings (kit.server_args.LogNotice) whose text matches ``pattern``."""
    rx = re.compile(pattern, re.I)
    return [n for n in case.ev.messages if rx.search(n.text) and (not kinds or n.kind in kinds)]


def _at(notice) -> str:
    where = f"{notice.source} " if getattr(notice, "source", "") else ""
    return f"{where}line {notice.line}"


def _site(case: Case, text: str) -> list[str]:
    """Where this version's source prints ``text`` (file:line), when the source is at hand."""
    if case.ev.tree is None:
        return []
    try:
        found = case.ev.tree.grep(text, fixed=True, max_matches=5)
    except KitError:
        return []
    return [f"{short_path(m.path)}:{m.line}" for m in found if "/test" not in m.path][:1]


def _decode(case: Case) -> dict:
    return case.ev.decode or {}


def _prefill_queue(case: Case) -> tuple[int | None, object]:
    """The largest #queue-req of the Prefill batch lines, and the line it is on."""
    best = None
    for s in case.ev.prefill or []:
        if s.queue_req is not None and (best is None or s.queue_req > best.queue_req):
            best = s
    return (best.queue_req, best) if best is not None else (None, None)


def _max_queue(case: Case) -> tuple[int | None, str]:
    d, (pq, ps) = _decode(case), _prefill_queue(case)
    candidates = []
    if d.get("max_queue_req") is not None:
        candidates.append((d["max_queue_req"], case.ev.sources.get("decode", "the Decode batch lines")))
    if pq is not None:
        candidates.append((pq, f"the Prefill batch line {ps.line} of {case.ev.sources.get('prefill', 'the log')}"))
    return max(candidates, default=(None, ""))


def _max_usage(case: Case) -> tuple[float | None, str]:
    d = _decode(case)
    candidates = []
    if d.get("max_token_usage") is not None:
        candidates.append((d["max_token_usage"], case.ev.sources.get("decode", "the Decode batch lines")))
    for s in case.ev.prefill or []:
        if s.token_usage is not None:
            candidates.append((s.token_usage, f"the Prefill batch line {s.line}"))
    return max(candidates, default=(None, ""))


def _load_impact(case: Case, cap: int | None, what: str) -> Impact:
    """Throughput under load: measured nothing lost when a benchmark ran within the cap; else not
    estimated, with the measured queue when the log shows one."""
    concurrency = (case.ev.bench or {}).get("concurrency")
    if cap and concurrency and concurrency <= cap:
        return Impact(0.0, "measured", f"the benchmark ran {concurrency} stream(s) at once, within the cap of {cap}: "
                      "nothing queued for it", "throughput under load", (f"concurrency {concurrency}",))
    queue, where = _max_queue(case)
    seen = f"; the log shows {queue} request(s) queued ({where})" if queue else ""
    return not_estimated(f"{what}{seen}; how much throughput that costs depends on the load served",
                         "throughput under load",
                         "a load benchmark at the concurrency served (sgl-kit bench --concurrency N, or "
                         "bench_serving) before and after the fix",
                         "the Decode batch lines' #running-req and #queue-req under the real load")


# --------------------------------------------------------------------------- running requests capped

_CAPPED = r"max_running_requests is capped to (\d+) by the ([a-z_ ]+?)(?: \(|\.|$)"
_REDUCED = r"max_running_requests was reduced from the requested (\d+) to (\d+)"
_REQS = ("_resolve_max_num_reqs", "resolve_max_num_reqs")  # 0.5.11-0.5.15 ModelRunner; 0.5.16+ KVCacheConfigurator
# Context accessors of 0.5.17+ (get_schedule().max_running_requests ...): each answers from the server args.
_ACCESSORS = ("get_schedule", "get_memory", "get_exec", "get_spec", "get_parallel", "get_model")


@dataclass
class _Cap:
    cap: int
    by: str  # what capped it, in a few words
    text: str = ""  # sglang's own words, when it said so
    notice: object = None
    how: list[str] = field(default_factory=list)  # this release's arithmetic, with its inputs
    mamba: bool = False  # the mamba/state cap holds
    sites: list[str] = field(default_factory=list)  # the lines of this release that computed it


def _cap(case: Case) -> _Cap | None:
    """The cap, and what set it: sglang's notice when it printed one (0.5.17+: "is capped to N by the mamba state
    cache"), else the ready line's max_running_requests below the ask, explained by this release's own
    computation of it (:func:`_bounds`)."""
    for n in _said(case, _CAPPED):
        m = re.search(_CAPPED, n.text, re.I)
        return _Cap(int(m.group(1)), m.group(2).strip(), n.text, n, mamba="mamba" in m.group(2))
    asked = (case.ev.explicit or {}).get("max_running_requests")
    got = (case.ev.capacity or {}).get("max_running_requests")
    reduced = _said(case, _REDUCED)
    if reduced and not isinstance(asked, int):
        # 0.5.14+: "was reduced from the requested N to M (per dp worker) due to the available KV cache capacity";
        # 0.5.14-0.5.16 print it whichever bound held, the mamba cap included: the arithmetic tells which
        m = re.search(_REDUCED, reduced[0].text)
        dp = int(case.value("dp_size") or 1) if case.value("enable_dp_attention") is True else 1
        found = _bounds(case, int(m.group(1)) * dp, int(m.group(2)))
        found.how.insert(0, f"sglang says at {_at(reduced[0])}: {reduced[0].text[:200]}")
        return found
    if isinstance(asked, int) and isinstance(got, int) and got < asked:
        return _bounds(case, asked, got)
    return None


def _bounds(case: Case, asked: int, got: int) -> _Cap:
    """What this release's own max_running_requests arithmetic gives for this launch, from the ready line's numbers:
    run twice (kit.provenance.compute), with the mamba/state cap and without it, to tell which bound holds."""
    from kit.provenance import SERVER_ARGS, compute

    capacity = case.ev.capacity or {}
    tokens, context = capacity.get("max_total_num_tokens"), capacity.get("context_len")
    dp_on = case.value("enable_dp_attention") is True
    dp = int(case.value("dp_size") or 1) if dp_on else 1
    hybrid = case.hybrid_linear or capacity.get("max_mamba_cache_size") is not None
    if case.ev.tree is None or not tokens or not context:
        missing = "the sglang source" if case.ev.tree is None else "the ready line's max_total_num_tokens and context_len"
        return _Cap(got, "a bound the kit did not compute", how=[f"not computed: {missing} is needed to follow this "
                                                                 "release's arithmetic"])
    from kit._pysource import unknown

    ratio_found = compute(case.ev.tree, "_calculate_mamba_ratio", snapshot=case.ev.args, environ=case.ev.environ,
                          attributes={"server_args": SERVER_ARGS}, calls={a: SERVER_ARGS for a in _ACCESSORS})
    ratio = ratio_found.value if ratio_found is not None and ratio_found.known else unknown(
        "the mamba ratio", ratio_found.why if ratio_found is not None else "_calculate_mamba_ratio not in this tree")
    size = capacity.get("max_mamba_cache_size")
    size = size if size is not None else unknown("max_mamba_cache_size", "the log has no `Mamba Cache is allocated` line")
    attributes = {"context_len": context, "max_running_requests": asked, "dp_size": dp, "attn_dp_size": dp,
                  "max_mamba_cache_size": size, "mambaish_config": True if hybrid else None}
    calls = {"_calculate_mamba_ratio": ratio, **{a: SERVER_ARGS for a in _ACCESSORS}}
    run = lambda **over: compute(case.ev.tree, _REQS, params={"token_capacity": tokens},  # noqa: E731
                                 attributes={**attributes, **over}, calls=calls, snapshot=case.ev.args,
                                 environ=case.ev.environ)
    full, plain = run(), run(mambaish_config=None)
    if full is None:
        return _Cap(got, "a bound the kit did not compute", how=["not computed: this release has no "
                                                                 "resolve_max_num_reqs"])
    where = full.where
    inputs = (f"the ask {asked}, dp {dp} ({'DP attention on' if dp_on else 'no DP attention: not split'}), "
              f"token capacity {tokens} and context_len {context} (the ready line)")
    how = [f"sglang {case.ev.version or ''}'s own arithmetic ({where}) with {inputs}".replace("sglang 's", "sglang's")]
    per_worker = asked // dp
    pool = plain.value if plain is not None and plain.known else None
    bound = ", ".join(f"{k} = {v}" for k, v in plain.variables.items() if k not in ("max_num_reqs", "ratio",
                                                                                   "additional_ratio")) \
        if plain is not None else ""
    if pool is not None:
        how.append(f"without the mamba/state cap it gives {pool}" + (f" (its variables: {bound})" if bound else ""))
    path = where.split(":")[0]
    mamba_line = full.lines.get("mamba_cap") or full.lines.get("max_num_reqs")
    mamba_where = f"{path}:{mamba_line}" if mamba_line else where
    if pool is not None and got == pool:
        if pool == per_worker and dp > 1:
            return _Cap(got, f"the ask split across {dp} DP ranks (the ready line is per DP worker: {asked} // {dp})",
                        how=how, sites=[where])
        return _Cap(got, f"this release's token-pool bound ({pool}, {where})", how=how, sites=[where])
    if hybrid and (pool is None or got < pool):
        known = isinstance(size, int) and isinstance(ratio, int)
        if known:
            how.append(f"the mamba/state cap: max_mamba_cache_size // ratio = {size} // {ratio} = {size // ratio} "
                       f"({mamba_where}; max_mamba_cache_size from the log's `Mamba Cache is allocated` line, the ratio "
                       f"from {ratio_found.where})")
        else:
            why = "; ".join(x.reason for x in (size, ratio) if not isinstance(x, int))
            how.append(f"the mamba/state cap, max_mamba_cache_size // ratio ({mamba_where}), is the bound left; its "
                       f"inputs are not all in the evidence: {why}")
        agrees = "" if not known or size // ratio == got else f"; {size // ratio} is not the {got} the ready line says"
        return _Cap(got, f"the mamba state cache (max_mamba_cache_size // ratio{agrees})", how=how, mamba=True,
                    sites=[mamba_where])
    how.append(f"{got} is not what this release's arithmetic gives ({full.value if full.known else full.why})")
    return _Cap(got, "a bound this release's arithmetic does not explain", how=how, sites=[where])


def _capped(case: Case) -> list[str] | None:
    found = _cap(case)
    if found is None:
        return None
    if found.notice is not None:
        out = [f"sglang says at {_at(found.notice)}: {found.text[:240]}"]
    elif not isinstance((case.ev.explicit or {}).get("max_running_requests"), int):
        out = [f"max_running_requests={found.cap} per DP worker: capped by {found.by}"]
    else:
        out = [f"the launch asks for max_running_requests {case.ev.explicit['max_running_requests']}; the ready line "
               f"says max_running_requests={found.cap} ({case.ev.sources.get('capacity', 'the log')}): capped by "
               f"{found.by}"]
    out += found.how
    asked = (case.ev.explicit or {}).get("max_running_requests")
    if asked and found.notice is not None:
        out.append(f"the launch asked for {asked}")
    d = _decode(case)
    if d.get("max_running_req") is not None:
        out.append(f"the Decode batch lines peak at {d['max_running_req']} running, {d.get('max_queue_req') or 0} "
                   f"queued ({case.ev.sources.get('decode', 'the log')})")
    return out


def _capped_fix(case: Case) -> Fix:
    found = _cap(case)
    advice = []
    if found.mamba:
        tail = found.text.split("To raise it:", 1)[1].strip() if "To raise it:" in found.text else ""
        option = case.option("max_mamba_cache_size") or "--max-mamba-cache-size"
        advice.append(f"sglang's own advice: {tail}" if tail else
                      f"raise {option} (or the mamba memory ratio of this version): the state pool holds a fixed "
                      "number of slots per running request")
    elif found.by.startswith("the ask split"):
        advice.append("nothing is lost: the ready line counts one DP worker's requests; the server runs that many "
                      "per DP rank")
    elif found.by.startswith("this release's token-pool bound"):
        advice.append("more room for the KV cache: a higher --mem-fraction-static, a smaller --context-length, "
                      "or more GPUs (tp); the pool holds every running request's tokens")
    else:
        advice.append("read how this release computes it (the lines above) before changing a flag")
    return [], advice, ["raising --max-running-requests alone: sglang caps it again by the same bound at startup"]


def _capped_sites(case: Case) -> list[str]:
    found = _cap(case)
    if found is not None and found.notice is not None:
        return _site(case, "max_running_requests is capped to")
    return list(found.sites) if found is not None else []


rule(Rule(
    "running-requests-capped", "sglang capped the running requests below what was asked", _ALL,
    (),
    when=_capped,
    impact=lambda case: _load_impact(case, _cap(case).cap, f"at most {_cap(case).cap} requests run at once "
                                                           f"(capped by {_cap(case).by}); the rest wait"),
    fix=_capped_fix, sites=_capped_sites,
    affects=("queueing",), covers=lambda case: {"max_running_requests"},
    uses=("notices", "capacity", "command", "decode", "prefill", "bench", "source", "args", "environ", "model_config", "version")))


# --------------------------------------------------------------------------- context larger than the pool

_TOO_LONG = r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)"


def _context(case: Case) -> tuple[int | None, str]:
    cap = case.ev.capacity or {}
    if cap.get("context_len"):
        return int(cap["context_len"]), "the ready line's context_len"
    asked = (case.ev.explicit or {}).get("context_length")
    if isinstance(asked, int):
        return asked, "the launch's --context-length"
    value = case.value("context_length")
    if isinstance(value, int) and case.ev.sources.get("args", "").startswith("the server_args line"):
        return value, "context_length in the server_args line"
    return None, ""


def _pool(case: Case) -> tuple[int | None, str]:
    cap = case.ev.capacity or {}
    if cap.get("max_total_num_tokens"):
        return int(cap["max_total_num_tokens"]), "the ready line's max_total_num_tokens"
    for n in _said(case, _TOO_LONG):
        allowed = int(re.search(_TOO_LONG, n.text).group(2))
        return allowed, f"sglang's refusal at {_at(n)} (the longest input it admits, min(context, pool) less a few)"
    return None, ""


def _context_over_pool(case: Case) -> list[str] | None:
    context, c_where = _context(case)
    pool, p_where = _pool(case)
    if not context or not pool or context <= pool:
        return None
    out = [f"context length {context} ({c_where}) is larger than the KV pool of {pool} tokens ({p_where}): one "
           "request at full context cannot fit, and any long one leaves the pool to itself"]
    refused = _said(case, _TOO_LONG)
    if refused:
        out.append(f"sglang refused a request at {_at(refused[0])}: {refused[0].text[:200]}")
    return out


def _context_impact(case: Case) -> Impact:
    context, _ = _context(case)
    pool, where = _pool(case)
    return not_estimated(f"a request longer than {pool} tokens is refused ({where}), although the context length "
                         f"promises {context}; requests near that length run one at a time",
                         "throughput under load", "the prompt lengths served (the Prefill batch lines' #new-token, "
                         "or bench_serving's input lengths)")


def _context_fix(case: Case) -> Fix:
    pool, _ = _pool(case)
    option = case.option("context_length") or "--context-length"
    changes = [Change(option, pool)] if pool and case.asked("context_length") else []
    return changes, ["or give the KV cache more room (a higher --mem-fraction-static, more GPUs) until "
                     "max_total_num_tokens in the ready line is at least the context length"], []


rule(Rule(
    "context-exceeds-kv-pool", "The context length is larger than the KV cache pool", _ALL,
    (),
    when=_context_over_pool, impact=_context_impact, fix=_context_fix,
    sites=lambda case: _site(case, "the maximum allowed length"),
    affects=("queueing",), covers=lambda case: {"context_length"},
    uses=("capacity", "command", "notices", "args", "source")))


# --------------------------------------------------------------------------- speculative decoding under load

def _spec_on(case: Case) -> tuple[bool, str]:
    if _decode(case).get("accept_len") is not None:
        return True, f"the Decode batch lines carry an accept length ({case.ev.sources.get('decode', 'the log')})"
    if case.speculative:
        return True, f"speculative_algorithm = {case.value('speculative_algorithm')!r}"
    return False, ""


def _spec_loaded(case: Case) -> list[str] | None:
    on, why = _spec_on(case)
    d = _decode(case)
    running = d.get("max_running_req")
    if not on or not running or running < HIGH_CONCURRENCY:
        return None
    out = [f"speculative decoding is on: {why}",
           f"{running} requests decode at once (the kit's threshold for 'many': {HIGH_CONCURRENCY})"]
    accept = d.get("accept_len")
    rate = d.get("max_gen_throughput")
    if accept is not None:
        out.append(f"accept length {accept:.2f}: each request gains {accept - 1:.2f} token(s) per verify step")
    if rate:
        out.append(f"gen throughput {rate:.2f} tok/s over {running} requests: {rate / running:.2f} tok/s each")
    if d.get("max_queue_req"):
        out.append(f"{d['max_queue_req']} more are queued")
    return out


def _spec_loaded_impact(case: Case) -> Impact:
    from .rules import _draft_cost

    d = _decode(case)
    accept, running = d.get("accept_len"), d.get("max_running_req")
    cost, how = _draft_cost(case)
    steps = int(case.value("speculative_num_steps") or 0)
    at_one = ""
    if cost is not None and accept and steps:
        at_one = (f"; memory-bound (batch 1) it would gain {accept / (1 + steps * cost):.2f}x ({steps} draft steps "
                  f"at {cost:.1%} of a verify each, {how}), but at batch {running} the verify of "
                  f"{running} x {steps + 1} tokens is no longer memory-bound, which the roofline does not model")
    per_request = f"{steps + 1}" if steps else "steps + 1 (the step count is not in the evidence)"
    return not_estimated(f"at {running} requests at once the verify pass computes {per_request} tokens per request "
                         f"where a decode step computes 1, and the drafts add their own steps; whether the accept length "
                         f"{accept if accept is not None else '(not measured)'} pays for that at this batch size is "
                         f"not in the evidence{at_one}", "throughput under load",
                         f"a load benchmark at {running} concurrent requests with and without speculative decoding "
                         "(sgl-kit bench --concurrency N on both launches)",
                         "the model's config.json and the speculative flags (the roofline's draft cost)")


rule(Rule(
    "speculative-under-load", "Speculative decoding runs at high concurrency, where it may cost more than it gains",
    _ALL, ("decode",),
    when=_spec_loaded, impact=_spec_loaded_impact,
    fix=lambda case: ([], ["benchmark the served concurrency with speculative decoding off; if that is faster, "
                           "serve high-concurrency traffic without it (a separate server or route), or use fewer "
                           "draft steps"], ["more draft steps at high concurrency: each adds verify work per request"]),
    affects=("draft", "verify"), covers=lambda case: set(),
    uses=("args", "model_config", "bench")))


# --------------------------------------------------------------------------- the tokenizer

_SLOW_TOKENIZER = r"Using a slow tokenizer"


def _slow_tokenizer(case: Case) -> list[str] | None:
    found = _said(case, _SLOW_TOKENIZER)
    if not found:
        return None
    out = [f"sglang (transformers) warns at {_at(found[0])}: {found[0].text[:200]}",
           "tokenization and detokenization run on the CPU, in the tokenizer manager and detokenizer processes; a "
           "slow (Python) tokenizer there can bound the serving rate at large batches while the GPU waits"]
    return out


def _tokenizer_impact(case: Case) -> Impact:
    bench, d = case.ev.bench or {}, _decode(case)
    if bench.get("tok_s") and d.get("gen_throughput") and d.get("single_stream"):
        gap = max(0.0, 1 - bench["tok_s"] / d["gen_throughput"])
        return Impact(gap, "measured", f"the client sees {bench['tok_s']:.1f} tok/s against the scheduler's "
                      f"{d['gen_throughput']:.1f} tok/s for one stream: the gap is spent outside the GPU step "
                      "(tokenizer, detokenizer, HTTP)", "decode tok/s",
                      (f"the benchmark {bench.get('source')}", case.ev.sources.get("decode", "the log")))
    return not_estimated("the warning alone does not say how much time the tokenizer takes", "throughput under load",
                         "--bench FILE: a benchmark's client-side tok/s (or inter-token latency) together with the "
                         "server log's Decode batch lines (--log) over the same run: the gap between them is the "
                         "time spent outside the GPU step")


rule(Rule(
    "slow-tokenizer", "A slow (Python) tokenizer is loaded: the CPU side may bound serving", _ALL,
    ("notices",),
    when=_slow_tokenizer, impact=_tokenizer_impact,
    fix=lambda case: ([], ["load a fast tokenizer (a tokenizer.json beside the weights, or --tokenizer-path to one)",
                           "or --skip-tokenizer-init and send token ids (the client tokenizes)",
                           "measure client against server first: sgl-kit bench, then doctor --bench FILE --log LOG"],
                      []),
    sites=lambda case: _site(case, "Using a slow tokenizer"),
    affects=("scheduling",), covers=lambda case: set(),
    uses=("bench", "decode", "source")))


# --------------------------------------------------------------------------- MoE kernel configs

# sglang's tuned-config lookup for the fused MoE kernel (get_moe_configs, srt/layers/moe/.../fused_moe_triton_config.py)
# prints "Using default MoE kernel config" when no tuned file is found for the shape and GPU and the default tiles
# run (get_default_config); "Deterministic inference is enabled, using default MoE kernel config." when
# --enable-deterministic-inference skips the lookup. Its other lines are not a default: "Fallback to triton version
# X and use MoE kernel config from ..." is a tuned file of another Triton release, and (0.5.x up to 0.5.15) "Using
# MoE kernel config with down_moe=False" is the lookup of the down projection's own file failing, after which the
# down GEMM runs with the up projection's config (`down_config or config` in fused_moe.py), tuned when it was found.
_MOE_DEFAULT = r"Using default MoE kernel config"
_MOE_DETERMINISTIC = r"Deterministic inference is enabled, using default MoE kernel config"
_MOE_DOWN_REUSES = r"Using MoE kernel config with down_moe=False|Down MoE config file not found"
_MOE_FALLBACK = r"Fallback to triton version \S+ and use MoE kernel config from"


def _moe_default(case: Case) -> list[str] | None:
    found = _said(case, _MOE_DEFAULT)
    if not found:
        return None
    deterministic = [n for n in found if re.search(_MOE_DETERMINISTIC, n.text, re.I)]
    missing = [n for n in found if n not in deterministic]
    out = []
    if missing:
        m = re.search(r"Config file not found at (\S+?\.json|\S.*?\.json)", missing[0].text)
        out.append(f"sglang says at {_at(missing[0])}: {missing[0].text[:240]}")
        if m:
            out.append(f"no tuned config for this MoE shape and GPU: {m.group(1)}; the kernel runs the default tiles "
                       "(get_default_config)")
    if deterministic:
        out.append(f"sglang says at {_at(deterministic[0])}: {deterministic[0].text[:200]} (with "
                   f"{case.option('enable_deterministic_inference') or '--enable-deterministic-inference'} the lookup "
                   "returns before reading any tuned file)")
    reused = _said(case, _MOE_DOWN_REUSES)
    if reused:
        out.append(f"and at {_at(reused[0])}: the down projection has no tuned file of its own; sglang runs it with "
                   "the up projection's config (its own line, not a default)")
    return out


def _moe_fix(case: Case) -> Fix:
    if not _said(case, _MOE_DEFAULT + r"\. Performance"):  # only the deterministic notice
        return [], [f"the default tiles are the price of {case.option('enable_deterministic_inference') or '--enable-deterministic-inference'}"
                    ": keep it only where bitwise-reproducible output is needed"], []
    return [], ["tune a config for this shape: python benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py "
                "--model MODEL --tp-size TP --tune (sglang's repository), and put the JSON where the notice says it "
                "looked (or point SGLANG_MOE_CONFIG_DIR at it)"], []


def _moe_sites(case: Case) -> list[str]:
    printed = _said(case, _MOE_DEFAULT)
    texts = (["Deterministic inference is enabled, using default MoE kernel config"]
             if printed and all(re.search(_MOE_DETERMINISTIC, n.text, re.I) for n in printed)
             else ["Using default MoE kernel config"])
    return [site for text in texts for site in _site(case, text)]


rule(Rule(
    "moe-default-kernel-config", "The fused MoE kernel runs with its default (untuned) config", _ALL,
    ("notices",),
    when=_moe_default,
    impact=lambda case: not_estimated("the default tiles are not tuned for this expert shape and GPU; what a tuned "
                                      "config gains depends on both", "decode tok/s",
                                      "a benchmark after tuning (sglang's benchmark/kernels/fused_moe_triton/"
                                      "tuning_fused_moe_triton.py, then sgl-kit bench on both)"),
    fix=_moe_fix, sites=_moe_sites,
    affects=("decode step", "prefill/extend"), covers=lambda case: set(),
    uses=("source",)))


# --------------------------------------------------------------------------- queues, a full pool, retraction
# (symptoms: registered after the rules that name a cause, so a cause found ranks first among equals)

def _retractions(case: Case) -> list:
    return [n for n in case.ev.messages if n.kind == "retract"]


def _pool_full(case: Case) -> list[str] | None:
    usage, where = _max_usage(case)
    retracted = _retractions(case)
    if (usage is None or usage < FULL_POOL) and not retracted:
        return None
    out = []
    if usage is not None and usage >= FULL_POOL:
        d = _decode(case)
        running = f" with {d['max_running_req']} running" if d.get("max_running_req") is not None else ""
        out.append(f"token usage reaches {usage:.2f}{running} ({where}): the KV cache pool is (nearly) full")
    for n in retracted[:3]:
        out.append(f"sglang retracted requests at {_at(n)}: {n.text[:200]}")
    return out


def _pool_full_fix(case: Case) -> Fix:
    return [], ["more room for the KV cache: a higher --mem-fraction-static (what the GPUs leave after weights "
                "and CUDA graphs), fewer --max-running-requests, or a shorter --context-length",
                "if token usage stays high while few requests run, the pool is not being released: compare "
                "#running-req with token usage over time, and try a later sglang release"], []


rule(Rule(
    "kv-pool-full", "The KV cache pool runs full (requests wait or are retracted)", _ALL, ("decode|notices",),
    when=_pool_full,
    impact=lambda case: _load_impact(case, None, "new requests wait for KV room, and retracted ones are prefilled "
                                                 "again"),
    fix=_pool_full_fix, sites=lambda case: _site(case, "KV cache pool is full. Retract requests"),
    affects=("queueing",), covers=lambda case: set(),
    uses=("bench", "prefill", "source")))


def _queued(case: Case) -> list[str] | None:
    queue, where = _max_queue(case)
    if not queue or "queue-time-measured" in case.found:  # the measured finding says it, with the time lost
        return None
    limit = which_limit(case)
    if limit is not None:
        return [f"the limit that holds is the {limit.kind}: {limit.summary}", f"#queue-req reaches {queue} ({where})"]
    usage, _ = _max_usage(case)
    out = [f"#queue-req reaches {queue} ({where})"]
    if usage is not None:
        out.append(f"token usage stays at or below {usage:.2f}: not the KV pool; no running cap or full prefill "
                   "chunk is seen either")
    return out


def _graph_bs_option(case: Case) -> str:
    """This version's flag for the decode CUDA graphs' largest batch (0.5.20 removed --cuda-graph-max-bs)."""
    return case.option("cuda_graph_max_bs") or case.option("cuda_graph_max_bs_decode") or "the CUDA graph batch limit"


def queue_fix(case: Case) -> Fix:
    """The fix of a queue: the limit that holds (kit.doctor.limits), or what evidence would tell it."""
    limit = which_limit(case)
    if limit is None:
        return [], [f"which limit holds is not in the evidence: collect {UNKNOWN}"], []
    return list(limit.changes), list(limit.advice), []


def queue_risk(case: Case) -> str:
    limit = which_limit(case)
    return limit.risk if limit is not None else ""


rule(Rule(
    "requests-queued", "Requests wait in the scheduler's queue", _ALL, ("decode|prefill",),
    when=_queued,
    impact=lambda case: _load_impact(case, None, "queued requests wait before their first token"),
    fix=queue_fix, risk=queue_risk, after=("queue-time-measured",),
    affects=("queueing",), covers=lambda case: {"max_running_requests"} if which_limit(case) else set(),
    uses=tuple(sorted({"capacity", "args", "bench", "source", *LIMIT_FACTS} - {"decode", "prefill"}))))


# --------------------------------------------------------------------------- what was not answered

def _concurrency(case: Case) -> float | None:
    """The concurrency the evidence shows: a benchmark's, bench_serving's, or the Decode batch lines' peak."""
    if (case.ev.bench or {}).get("concurrency"):
        return float(case.ev.bench["concurrency"])
    found = next((v for k, v in (case.ev.bench_serving or {}).items() if "concurrency" in k.lower()), None)
    if found is not None:
        return float(found)
    running = _decode(case).get("max_running_req")
    return float(running) if running is not None else None


@gap
def evidence_gaps(case: Case) -> list[str]:
    """A question no rule asks, with the evidence that would answer it: DP attention pays at high
    concurrency and costs per-request speed at low, and the concurrency served is not in the evidence.
    (The questions of missing evidence are generated from the rules' declarations: kit.doctor.facts.)"""
    out = []
    ev = case.ev
    if ev.version is not None and getattr(ev, "version_basis", None) in ("inferred", "assumed"):
        out.append(f"the sglang version (sglang {ev.version} is assumed, not known): the release-specific rules and "
                   "the known issues (kit/data/known_issues) are matched by it; send `python -m sglang.check_env` or "
                   "the log's first lines")
    if case.value("enable_dp_attention") is not True or _concurrency(case) is not None:
        return out
    dp = case.value("dp_size")
    return out + [f"DP attention is on ({'dp_size ' + str(dp) if dp and dp != 1 else 'dp_size as sglang sets it'}, "
            f"tp_size {case.tp}): it pays at high concurrency and costs per-request speed at low; the "
            "concurrency served is not in the evidence: send bench_serving's result (its Max request "
            "concurrency) or the Decode batch lines' #running-req under the real load"]
