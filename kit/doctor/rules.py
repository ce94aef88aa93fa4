"""The rules about CUDA graphs, speculative decoding, the scheduler and caches (kit.doctor.rulebase
says what a rule is; kit.doctor.rules_hw holds those about the machine, the release and the baseline).

Impact estimates are rough by design: they order the findings, and each says what it
rests on. Where the evidence allows (an accept length, the model's size) they use it.
"""

from __future__ import annotations

from .case import Case
from .result import Change
from .rulebase import ALL_VERSIONS as _ALL
from .rulebase import Fix, Rule, rule
from .rulebase import resolution_sites as _resolution_sites
from .rulebase import where as _where

__all__: list[str] = []  # the rules register themselves in kit.doctor.rulebase.RULES

def _is_disabled(value) -> bool:
    return value is True or str(value).lower().rsplit(".", 1)[-1] == "disabled"


# --------------------------------------------------------------------------- CUDA graphs

def _prefill_field(case: Case) -> str | None:
    """0.5.10-0.5.1x: disable_piecewise_cuda_graph; 0.5.2x: cuda_graph_config.prefill.backend."""
    if "disable_piecewise_cuda_graph" in case.fields and case.has("disable_piecewise_cuda_graph"):
        return "disable_piecewise_cuda_graph"
    if case.has("cuda_graph_config.prefill.backend"):
        return "cuda_graph_config.prefill.backend"
    return None


_PREFILL_SWITCHES = ("disable_piecewise_cuda_graph", "disable_prefill_cuda_graph")


def _prefill_off(case: Case) -> list[str] | None:
    name = _prefill_field(case)
    if name is None or not _is_disabled(case.value(name)):
        return None
    switch = next((f for f in _PREFILL_SWITCHES if case.asked(f)), None)
    if switch is not None:
        return [f"{name} = {case.value(name)!r}: the launch command asks for it ({case.option(switch) or switch})"]
    logged = next((f for f in _PREFILL_SWITCHES[1:] if case.value(f) is True), None)
    if logged is not None and case.asked(logged) is None:
        return [f"{name} = {case.value(name)!r}, with {logged} = True in the log: a flag turned it off"]
    out = [f"{name} = {case.value(name)!r}, and the launch command does not ask for it"
           if case.asked(name) is False else f"{name} = {case.value(name)!r} (no launch command to tell "
                                              "whether it was asked for)"]
    exp = case.explain(name)
    chain = sorted((s for s in exp.sites if s.rule and s.function.endswith(("piecewise_cuda_graph", "incompatible"))),
                   key=lambda s: s.line) if exp is not None else []
    arch = ((case.ev.model_config or {}).get("architectures") or ["\0"])[0]
    for s in (s for s in chain if s.fired):
        why = [e for e in s.evidence if arch in e]
        out.append(f"rule '{s.rule}' fired at {s.where.removeprefix('sglang/')}: "
                   f"`{s.guards[-1].condition if s.guards else s.value_text}`" + (f" ({why[0]})" if why else ""))
    rest = [f"{s.rule} ({s.status})" for s in chain if not s.fired]
    if rest:
        out.append("the other rules of the chain, in order: " + "; ".join(rest))
    if exp is not None and not any(s.fired for s in chain):
        out.append(f"no rule of sglang {case.ev.version}'s chain was found to fire: "
                   f"`sgl-kit why {name}` shows every site")
    return out


def _prefill_impact(case: Case) -> tuple[float, str]:
    if case.speculative:
        return 0.22, ("with speculative decoding every verify step is an extend batch, which the prefill "
                      "(piecewise) graph captures; without it each step pays per-kernel launch overhead "
                      "(the incident: ~53 -> ~69 tok/s once enforced)")
    return 0.03, "without speculative decoding only prefill runs without graphs: time to first token, not decode"


def _prefill_fix(case: Case) -> Fix:
    from kit.provenance import escapes, refusals

    name = _prefill_field(case)
    changes, advice, avoid = [], [], []
    switch = next((f for f in _PREFILL_SWITCHES if case.asked(f)), None)
    if switch is not None:
        return [Change(case.option(switch) or "--" + switch.replace("_", "-"), remove=True)], [], []
    exp = case.explain(name)
    found = escapes(case.ev.tree, exp) if exp is not None else []
    if found:
        changes.append(Change(found[0].option))
    elif name == "cuda_graph_config.prefill.backend" and case.option("cuda_graph_backend_prefill"):
        changes.append(Change(case.option("cuda_graph_backend_prefill"), "breakable"))
    else:
        advice.append(f"sglang {case.ev.version} has no flag that skips the rule that fired; "
                      "change what the rule tests, or upgrade to a release that keeps the prefill graph")
    if "language_only" in case.fields and case.ev.tree is not None:
        refused = [r for r in refusals(case.ev.tree, case.ev.args, {"language_only": True},
                                       case.ev.model_config) if r.status == "fired"]
        if refused:
            avoid.append(f"--language-only: sglang {case.ev.version} refuses it at startup without "
                         f"--encoder-urls ({refused[0].where}: \"{refused[0].message[:90]}\")")
    return changes, advice, avoid


rule(Rule(
    "prefill-cuda-graph-off", "The prefill (piecewise) CUDA graph is off",
    ">=0.5.10", ("args", "command", "model_config", "source"),
    when=_prefill_off, impact=_prefill_impact, fix=_prefill_fix,
    sites=lambda case: _where(s for s in case.fired(_prefill_field(case) or "") if s.rule)))


def _decode_field(case: Case) -> str | None:
    if case.has("cuda_graph_config.decode.backend"):
        return "cuda_graph_config.decode.backend"
    return "disable_cuda_graph" if case.has("disable_cuda_graph") else None


def _decode_off(case: Case) -> list[str] | None:
    name = _decode_field(case)
    if name is None or not _is_disabled(case.value(name)):
        return None
    return [f"{name} = {case.value(name)!r}: {case.origin(name)}",
            "decode runs eagerly: every step launches each kernel from Python"]


def _decode_fix(case: Case) -> Fix:
    name = _decode_field(case)
    if case.asked(name) or case.asked("disable_cuda_graph"):
        option = case.option("disable_cuda_graph") or "--disable-cuda-graph"
        return [Change(option, remove=True)], [], ["disabling graphs to work around a capture OOM: lower "
                                                   "--cuda-graph-max-bs or --mem-fraction-static instead"]
    sites = _resolution_sites(case, name)
    why = f" ({sites[0].rule or sites[0].guards[-1].condition})" if sites and (sites[0].rule or sites[0].guards) \
        else ""
    return [], [f"sglang set it{why}; change what that rule tests"], []


rule(Rule(
    "decode-cuda-graph-off", "Decode runs without CUDA graphs", _ALL, ("args", "command", "source"),
    when=_decode_off,
    impact=lambda case: (0.3, "at batch 1 kernel-launch overhead is a large share of each decode step"),
    fix=_decode_fix, sites=lambda case: _where(_resolution_sites(case, _decode_field(case) or ""))))


def _graph_bs_ceiling(case: Case) -> list[str] | None:
    decode = case.ev.decode or {}
    limit = case.value("cuda_graph_max_bs")
    if not limit or decode.get("cuda_graph") not in (False, "mixed"):
        return None
    return [f"Decode batch lines show `cuda graph: False` ({case.ev.sources.get('decode', 'the log')}) while "
            f"cuda_graph_max_bs = {limit}: batches larger than that run eagerly",
            f"max_running_requests = {case.value('max_running_requests')}"]


rule(Rule(
    "decode-batches-above-graph-ceiling", "Decode batches outgrow the captured CUDA graphs", _ALL,
    ("args", "decode"),
    when=_graph_bs_ceiling,
    impact=lambda case: (0.1, "batches above cuda_graph_max_bs decode eagerly; under load this feeds on itself "
                              "(github.com/sgl-project/sglang/issues/33483)"),
    fix=lambda case: ([Change(case.option("cuda_graph_max_bs") or "--cuda-graph-max-bs",
                              case.value("max_running_requests") or 2 * (case.value("cuda_graph_max_bs") or 32))],
                      [], ["raising --max-running-requests further: it admits more than the graphs cover"])))


# --------------------------------------------------------------------------- speculative decoding

def _tokens_per_round(p: float, k: int) -> float:
    return sum(p ** i for i in range(int(k) + 1))


def _solve_p(accept: float, k: int) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _tokens_per_round(mid, k) < accept else (lo, mid)
    return (lo + hi) / 2


def _spec_target(case: Case) -> tuple[int, int, str] | None:
    """(steps, draft tokens, where from): the baseline's when it ran more, else sglang's own choice."""
    base = case.ev.baseline
    if base is not None and base.resolved.get("speculative_num_steps"):
        steps = int(base.resolved["speculative_num_steps"])
        draft = int(base.resolved.get("speculative_num_draft_tokens") or steps + 1)
        if steps > int(case.value("speculative_num_steps") or 0):
            return steps, draft, f"the baseline {base.label}"
    auto = case.spec_auto
    if auto is not None and isinstance(auto.value, tuple) and len(auto.value) == 3:
        return int(auto.value[0]), int(auto.value[2]), f"sglang {case.ev.version}'s own choice for this model " \
                                                        f"({auto.where})"
    return None


def _spec_low(case: Case) -> list[str] | None:
    if not case.speculative or case.value("speculative_num_steps") is None:
        return None
    target = _spec_target(case)
    steps, draft = int(case.value("speculative_num_steps")), int(case.value("speculative_num_draft_tokens") or 0)
    if target is None or (steps >= target[0] and draft >= target[1]):
        return None
    out = [f"speculative_num_steps = {steps}, speculative_num_draft_tokens = {draft}: {case.origin('speculative_num_steps')}",
           f"{target[2]} is {target[0]} steps and {target[1]} draft tokens"]
    accept, where = case.accept_length
    if accept:
        out.append(f"accept length {accept:.2f} with {steps} step(s) ({where})")
    return out


def _spec_impact(case: Case) -> tuple[float, str]:
    target = _spec_target(case)
    steps = int(case.value("speculative_num_steps") or 1)
    accept, _ = case.accept_length
    p, how = (_solve_p(accept, steps), f"a per-draft acceptance of {{p:.2f}} read from the accept length {accept:.2f}") \
        if accept else (0.7, "an assumed per-draft acceptance of {p:.2f} (no accept length measured)")
    draft_cost = _draft_cost(case)
    now = _tokens_per_round(p, steps) / (1 + steps * draft_cost)
    then = _tokens_per_round(p, target[0]) / (1 + target[0] * draft_cost)
    lost = max(0.0, 1 - now / then)
    return lost, (how.format(p=p) + f"; {steps} -> {target[0]} steps gives {_tokens_per_round(p, steps):.2f} -> "
                  f"{_tokens_per_round(p, target[0]):.2f} tokens per round, each draft step costing "
                  f"~{draft_cost:.0%} of a verify")


def _draft_cost(case: Case) -> float:
    """One draft step's weight reads over one verify's: the MTP layer and the lm_head it shares."""
    size = getattr(case.roofline, "size", None)
    if size is not None and size.draft_params and size.weight_bytes_per_step:
        draft = (size.draft_params + _embedding(case)) * size.bytes_per_param
        return min(0.5, draft / size.weight_bytes_per_step)
    return 0.05


def _embedding(case: Case) -> int:
    tc = case.text_config
    return int(tc.get("vocab_size") or 0) * int(tc.get("hidden_size") or 0)


def _spec_fix(case: Case) -> Fix:
    target = _spec_target(case)
    changes = [Change(case.option("speculative_num_steps") or "--speculative-num-steps", target[0]),
               Change(case.option("speculative_num_draft_tokens") or "--speculative-num-draft-tokens", target[1])]
    if case.value("speculative_eagle_topk") not in (None, 1):
        changes.append(Change(case.option("speculative_eagle_topk") or "--speculative-eagle-topk", 1))
    avoid = ["more draft tokens than steps + 1 with topk 1: the extra ones are never used"]
    return changes, [], avoid


rule(Rule(
    "speculative-steps-low", "Speculative decoding drafts fewer tokens than it should", ">=0.5",
    ("args", "command", "model_config", "source", "baseline", "decode"),
    when=_spec_low, impact=_spec_impact, fix=_spec_fix,
    sites=lambda case: [case.spec_auto.where] if case.spec_auto is not None else []))


def _accept_low(case: Case) -> list[str] | None:
    accept, where = case.accept_length
    steps = case.value("speculative_num_steps")
    if not case.speculative or not accept or not steps:
        return None
    if accept / (int(steps) + 1) >= 0.5:
        return None
    return [f"accept length {accept:.2f} of a possible {int(steps) + 1} per round ({where})"]


rule(Rule(
    "speculative-accept-low", "Few draft tokens are accepted", ">=0.5", ("args", "decode"),
    when=_accept_low,
    impact=lambda case: (0.15, "each rejected draft costs a draft step and verify work for nothing"),
    fix=lambda case: ([], ["check that the draft (MTP/EAGLE) weights belong to this exact checkpoint and "
                           "quantization; measure with temperature 0 to separate sampling from draft quality"],
                      ["raising --speculative-num-steps: with low acceptance it costs more than it gains"])))


# --------------------------------------------------------------------------- scheduler and caches

def _flag_on(name: str, title_when: str):
    def when(case: Case) -> list[str] | None:
        if case.value(name) is not True:
            return None
        return [f"{name} = True: {case.origin(name)}", title_when]
    return when


def _remove_or_rule(name: str, avoid: list[str]):
    def fix(case: Case) -> Fix:
        if case.asked(name):
            return [Change(case.option(name) or "--" + name.replace("_", "-"), remove=True)], [], avoid
        sites = _resolution_sites(case, name)
        if sites:
            guard = sites[0].guards[-1].condition if sites[0].guards else sites[0].function
            return [], [f"sglang sets it when `{guard}` ({_where(sites[:1])[0]}): change that, not this flag"], avoid
        return [], ["find what sets it: `sgl-kit why " + name + " TARGET`"], avoid
    return fix


rule(Rule(
    "overlap-scheduler-off", "The overlap scheduler is off", _ALL, ("args", "command", "source"),
    when=_flag_on("disable_overlap_schedule", "CPU scheduling of the next batch is no longer hidden behind "
                                              "the GPU's work"),
    impact=lambda case: (0.08, "scheduling, sampling bookkeeping and detokenisation now sit between GPU steps"),
    fix=_remove_or_rule("disable_overlap_schedule", []),
    sites=lambda case: _where(_resolution_sites(case, "disable_overlap_schedule"))))

rule(Rule(
    "radix-cache-off", "The prefix (radix) cache is off", _ALL, ("args", "command", "source"),
    when=_flag_on("disable_radix_cache", "shared prefixes (system prompts, multi-turn history) are prefilled again "
                                         "for every request"),
    impact=lambda case: (0.04, "it costs prefill time (time to first token) on repeated prefixes, not decode"),
    fix=_remove_or_rule("disable_radix_cache", ["--disable-radix-cache with mamba extra_buffer: sglang refuses "
                                                "that combination at startup"]),
    sites=lambda case: _where(_resolution_sites(case, "disable_radix_cache"))))


def _mamba_field(case: Case) -> str | None:
    for name in ("mamba_scheduler_strategy", "mamba_radix_cache_strategy"):
        if case.has(name):
            return name
    return None


def _mamba_no_buffer(case: Case) -> list[str] | None:
    name = _mamba_field(case)
    if name is None or case.value(name) != "no_buffer" or not case.hybrid_linear:
        return None
    out = [f"{name} = 'no_buffer' for a hybrid linear-attention model: {case.origin(name)}"]
    if case.value("disable_overlap_schedule") is True:
        out.append("and the overlap scheduler is off, which no_buffer forces without speculative decoding")
    if case.value("disable_radix_cache") is True:
        out.append("and the radix cache is off")
    return out


rule(Rule(
    "mamba-no-buffer", "Mamba state caching runs in no_buffer mode", ">=0.5.10",
    ("args", "command", "model_config", "source"),
    when=_mamba_no_buffer,
    impact=lambda case: (0.08, "no_buffer cannot keep state snapshots: sglang then turns off overlap scheduling or "
                               "the prefix cache"),
    fix=lambda case: ([Change(case.option(_mamba_field(case)) or "--mamba-scheduler-strategy", "extra_buffer")], [],
                      ["extra_buffer together with --disable-radix-cache: sglang refuses it at startup"]),
    sites=lambda case: _where(_resolution_sites(case, _mamba_field(case) or ""))))


def _max_running_48(case: Case) -> list[str] | None:
    if not case.speculative or case.value("max_running_requests") != 48 or case.asked("max_running_requests"):
        return None
    sites = _resolution_sites(case, "max_running_requests")
    if case.ev.tree is not None and not sites:
        return None
    return ["max_running_requests = 48, not asked for: speculative decoding sets it"
            + (f" ({_where(sites[:1])[0]})" if sites else "")]


rule(Rule(
    "max-running-requests-48", "Speculative decoding capped concurrent requests at 48", ">=0.5",
    ("args", "command", "source"),
    when=_max_running_48,
    impact=lambda case: (0.0, "a single stream is not affected; above 48 concurrent requests the rest queue"),
    fix=lambda case: ([], [f"if you serve more than 48 streams at once, set "
                           f"{case.option('max_running_requests') or '--max-running-requests'} and "
                           f"{case.option('cuda_graph_max_bs') or '--cuda-graph-max-bs'} together"],
                      ["a higher --max-running-requests alone: batches above cuda_graph_max_bs decode eagerly"]),
    sites=lambda case: _where(_resolution_sites(case, "max_running_requests"))))


def _vlm_site(case: Case, name: str) -> list:
    return [s for s in _resolution_sites(case, name)
            if "multimodal" in (s.rule + s.function + " ".join(g.text for g in s.guards)).lower()
            or "vlm" in (s.rule + s.function).lower()]


def _mem_vlm(case: Case) -> list[str] | None:
    sites = _vlm_site(case, "mem_fraction_static")
    if not sites or case.asked("mem_fraction_static"):
        return None
    return [f"mem_fraction_static = {case.value('mem_fraction_static')}, lowered for a vision-language model at "
            f"{_where(sites[:1])[0]} ({sites[0].function})"]


rule(Rule(
    "mem-fraction-lowered-for-vlm", "GPU memory for the KV cache was lowered because the model counts as a VLM",
    ">=0.5", ("args", "command", "model_config", "source"),
    when=_mem_vlm,
    impact=lambda case: (0.01, "a smaller KV cache: fewer concurrent requests fit; a single stream is unaffected"),
    fix=lambda case: ([Change(case.option("mem_fraction_static") or "--mem-fraction-static",
                              round(min(0.9, float(case.value("mem_fraction_static") or 0.8) / 0.85), 2))],
                      ["only for text-only use: the vision encoder needs that memory for images"],
                      ["pushing it above ~0.9: CUDA graph capture then runs out of memory"]),
    sites=lambda case: _where(_vlm_site(case, "mem_fraction_static"))))


def _sglang_says(case: Case, function: str, **parameters):
    """The value sglang's own ``function`` returns for these arguments, read statically (None: unknown)."""
    from kit.provenance import choice

    if case.ev.tree is None:
        return None
    found = choice(case.ev.tree, function, {}, None, parameters=parameters)
    return found if found is not None and found.known else None


def _chunked_vlm(case: Case) -> list[str] | None:
    archs = (case.ev.model_config or {}).get("architectures") or []
    if not archs or case.asked("chunked_prefill_size"):
        return None
    multimodal = _sglang_says(case, "is_multimodal_model", model_architectures=archs)
    supported = _sglang_says(case, "is_multimodal_chunked_prefill_supported", model_architectures=archs)
    if multimodal is None or supported is None or not multimodal.value or supported.value:
        return None
    out = [f"{archs[0]} is multimodal to sglang {case.ev.version} ({multimodal.where}) and its chunked prefill is "
           f"not supported ({supported.where}): the model runner sets chunked_prefill_size = -1 at startup"]
    runtime = [s for s in (case.explain("chunked_prefill_size").sites if case.explain("chunked_prefill_size") else [])
               if s.function.endswith("model_specific_adjustment")]
    if runtime:
        out[0] += f" ({_where(runtime[:1])[0]})"
    notice = [n for n in case.ev.notices if "chunked-prefill-size" in n]
    if notice:
        out.append(f"the log says so: {notice[0].strip()[:160]}")
    return out


rule(Rule(
    "chunked-prefill-off-for-vlm", "Chunked prefill is off because the model counts as a VLM", ">=0.5",
    ("args", "command", "model_config", "source"),
    when=_chunked_vlm,
    impact=lambda case: (0.03, "a long prompt is prefilled in one piece: running decodes stall behind it"),
    fix=lambda case: ([], ["sglang forces it for this architecture whatever the flag says; keep prompts short, "
                           "or serve a text-only checkpoint of the model if there is one"],
                      ["--chunked-prefill-size N: the model runner overrides it for this architecture"]),
    sites=lambda case: [x.where for x in (_sglang_says(case, "is_multimodal_chunked_prefill_supported",
                                                       model_architectures=(case.ev.model_config or {})
                                                       .get("architectures") or []),) if x is not None]))

