"""The rules about CUDA graphs, speculative decoding, the scheduler and caches (kit.doctor.rulebase
says what a rule is; kit.doctor.rules_hw holds those about the machine, the release and the baseline).

Each rule says what it affects (``affects``: parts of serving) and estimates how much from
this case's evidence: the roofline's byte split, the ``Decode batch`` lines, a benchmark. Where
there is no defensible number it says "not estimated", and what would let it estimate.
"""

from __future__ import annotations

from kit._text import short_path
from kit.errors import KitError

from .case import Case
from .limits import prefix_reuse
from .result import Change
from .rulebase import ALL_VERSIONS as _ALL
from .rulebase import Fix, Impact, Rule, not_estimated, rule
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
        out.append(f"rule '{s.rule}' fired at {short_path(s.where)}: "
                   f"`{s.guards[-1].condition if s.guards else s.value_text}`" + (f" ({why[0]})" if why else ""))
    rest = [f"{s.rule} ({s.status})" for s in chain if not s.fired]
    if rest:
        out.append("the other rules of the chain, in order: " + "; ".join(rest))
    from .fast_paths import chain as gate_chain

    restored = gate_chain(case, "prefill-graph", restored=True)
    if restored is not None and restored.blocking is not None:
        out.append(f"turned back on, it would be captured and never replayed: {restored.sentence()}")
    if exp is not None and not any(s.fired for s in chain):
        out.append(f"no rule of sglang {case.ev.version}'s chain was found to fire: "
                   f"`sgl-kit why {name}` shows every site")
        if case.ev.model_config is None:
            blind = [s.rule for s in chain if s.status == "unknown" and _reads_config(s)]
            if blind:
                out.append(f"without the model's config.json these rules stay unknown: {'; '.join(blind)}; pass "
                           "--model-config FILE (the config.json beside the weights of the logged model_path, or the "
                           "one on the model's public page)")
    return out


def _own_branch(site, field: str) -> bool:
    """The escape's own branch (``if self.enforce_...:``), not one of the rules it skips."""
    return any(g.kind == "if" and not g.negated and field in g.text for g in site.guards)


def _reads_config(site) -> bool:
    """A site whose guards read the model's config (is_multimodal, hf_config, get_model_config ...)."""
    text = " ".join([g.text for g in site.guards] + [site.rule or ""] + list(site.evidence or []))
    return any(k in text for k in ("model_config", "hf_config", "is_multimodal", "architectures", "config.json"))


def _prefill_impact(case: Case) -> Impact:
    """Whether the prefill graph would run for this launch if it were on is read from this version's
    source (kit.doctor.fast_paths, kit.provenance.gates): every refusal of its setup and of its per-batch
    gate, evaluated against the launch with the switch flipped. A refusal that holds for every request
    makes the fix worth nothing here, read from the source; otherwise its gain on time to first token is
    not estimated, and the measurement that would tell is named."""
    from .fast_paths import chain

    restored = chain(case, "prefill-graph", restored=True)
    ttft = (case.ev.bench or {}).get("ttft_ms")
    would = [f"time to first token with {case.option('enforce_piecewise_cuda_graph') or 'the graph on'} "
             "against this launch (sgl-kit bench on both, or notebook 04)"]
    measured = f"; the measured time to first token is {ttft:.0f} ms ({case.ev.bench['source']}), the most it " \
               "could lower" if ttft else ""
    if restored is not None and restored.blocking is not None:
        block = restored.blocking
        facts = "; ".join(f for f in restored.facts if "capture_hidden_mode" in f) if "capture_hidden_mode" in \
            block.text else ""
        return Impact(0.0, "from the source",
                      f"restoring it buys nothing here: in sglang {case.ev.version} {block.function} refuses "
                      f"{restored.batch} at {block.where} (`{block.text}`)" + (f": {facts}" if facts else "")
                      + "; the graph would be captured (time and memory at startup) and never replayed",
                      "time to first token", (f"{block.where}: {block.text}",))
    if restored is not None and restored.read:
        open_ = "; ".join(f"`{s.text}` ({s.where}: {s.reason})" for s in restored.undecided[:3])
        return not_estimated(f"it speeds up extend and prefill batches (time to first token, chunked prefill), not "
                             f"decode; in sglang {case.ev.version} no refusal of its gate holds for every request of "
                             f"this launch" + (f", and these cannot be decided from the evidence: {open_}" if open_ else "")
                             + measured, "time to first token", *would,
                             "the server's log after the change: sglang logs the capture's end, or which check "
                             "disabled it")
    return not_estimated("it covers extend and prefill batches; whether it would run for this launch was not read "
                         f"({'; '.join(restored.notes) if restored is not None else 'no sglang source'}){measured}",
                         "time to first token", *would)


def _prefill_fix(case: Case) -> Fix:
    from kit.provenance import escapes

    from .fast_paths import chain as gate_chain

    name = _prefill_field(case)
    changes, advice, avoid = [], [], []
    switch = next((f for f in _PREFILL_SWITCHES if case.asked(f)), None)
    if switch is not None:
        return [Change(case.option(switch) or "--" + switch.replace("_", "-"), remove=True)], [], []
    restored = gate_chain(case, "prefill-graph", restored=True)
    exp = case.explain(name)
    found = escapes(case.ev.tree, exp) if exp is not None else []
    chain = [s for s in exp.sites if s.rule] if exp is not None else []
    if restored is not None and restored.blocking is not None:
        block = restored.blocking
        advice.append(f"restoring it would not help in sglang {case.ev.version}: {block.function} refuses "
                      f"{restored.batch} at {block.where} (`{block.text}`); no flag of this release changes that")
        advice += _prefill_later(case)
        if found:
            avoid.append(f"{_escape_risk(case, found[0], chain)}; here it would also capture a graph that never "
                         "replays")
        return [], advice, avoid + _language_only(case)
    if not found and chain and not any(s.fired for s in chain):
        # No rule was found to fire (a guard the evidence cannot decide): an early return before every
        # rule of the chain is the escape whichever of them fired.
        found = [e for e in escapes(case.ev.tree, exp, sites=chain)
                 if all(any(g.kind == "early return" and e.field in g.text for g in s.guards)
                        for s in chain if not _own_branch(s, e.field))]
        if found:
            advice.append(f"{found[0].option} returns early ({found[0].where}) before every rule of the chain, so it "
                          "holds whichever rule fired")
    if found:
        changes.append(Change(found[0].option))
        advice.append(f"its risk: {_escape_risk(case, found[0], chain)}; the lasting way is a release that keeps "
                      "the prefill graph for this model without it (sgl-kit upgrade-diff)")
    elif name == "cuda_graph_config.prefill.backend" and case.option("cuda_graph_backend_prefill"):
        changes.append(Change(case.option("cuda_graph_backend_prefill"), "breakable"))
    else:
        advice.append(f"sglang {case.ev.version} has no flag that skips the rule that fired; "
                      "change what the rule tests, or upgrade to a release that keeps the prefill graph")
    return changes, advice, avoid + _language_only(case)


def _language_only(case: Case) -> list[str]:
    from kit.provenance import refusals

    if "language_only" not in case.fields or case.ev.tree is None:
        return []
    refused = [r for r in refusals(case.ev.tree, case.ev.args, {"language_only": True},
                                   case.ev.model_config) if r.status == "fired"]
    if not refused:
        return []
    return [f"--language-only: sglang {case.ev.version} refuses it at startup without "
            f"--encoder-urls ({refused[0].where}: \"{refused[0].message[:90]}\")"]


def _prefill_checks(case: Case) -> list[tuple[Change, str]]:
    """The switch back on, when the source says the graph would not replay: a prediction to measure."""
    from kit.provenance import escapes

    from .fast_paths import chain as gate_chain

    restored = gate_chain(case, "prefill-graph", restored=True)
    name = _prefill_field(case)
    exp = case.explain(name) if name else None
    if restored is None or restored.blocking is None or exp is None:
        return []
    found = escapes(case.ev.tree, exp)
    if not found:
        return []
    block = restored.blocking
    return [(Change(found[0].option), f"{block.function} refuses {restored.batch} at {block.where} "
                                      f"(`{block.text}`)")]


def _escape_risk(case: Case, escape, chain) -> str:
    """What the escape skips: every rule of the chain, whatever each of them protects."""
    spec = next((f for f in (case.flags or []) if f.name == escape.option), None)
    said = f" (its help: \"{spec.help.strip()}\")" if spec is not None and spec.help else ""
    rules = [s.rule for s in chain if s.rule and not _own_branch(s, escape.field)]
    listed = "; ".join(rules[:5]) + (f"; and {len(rules) - 5} more" if len(rules) > 5 else "")
    skipped = f" ({len(rules)} here: {listed})" if rules else ""
    return (f"{escape.option}{said} returns at {escape.where} before every rule of the chain{skipped}: the graph "
            "stays on wherever any of them would turn it off, for speed or for correctness")


def _prefill_later(case: Case) -> list[str]:
    """What later releases of sglang do with this refusal, from kit/data/fast_path_history.yaml."""
    from kit._data import DATA, load_yaml

    from .rulebase import version_in

    history = (load_yaml(DATA / "fast_path_history.yaml") or {}).get("prefill-graph") or []
    algo = str(case.value("speculative_algorithm") or "").upper()
    out = []
    for entry in history:
        if entry.get("when") == "speculative" and not case.speculative:
            continue
        if version_in(case.ev.version, entry["versions"]):
            continue
        if entry.get("verdict") != "replays" or not _later_than(entry["versions"], case.ev.version):
            continue
        how = f" with {entry['flag']}" if entry.get("flag") else ""
        out.append(f"from sglang {entry['first']}{how} the {algo or 'speculative'} target's prefill graph replays: "
                   f"{entry['what']} ({entry['site']} in {entry['first']}; {entry['source']})")
    return out


def _later_than(spec: str, version: str | None) -> bool:
    """Whether every release of ``spec`` comes after ``version`` (its lower bounds are all above it)."""
    from kit._versions import parse, specifier

    spec_set, here = specifier(spec), parse(version)
    low = [parse(s.version) for s in spec_set or () if s.operator in (">=", ">")]
    return bool(low) and here is not None and None not in low and min(low) > here


rule(Rule(
    "prefill-cuda-graph-off", "The prefill (piecewise) CUDA graph is off",
    ">=0.5.10", ("args",),
    when=_prefill_off, impact=_prefill_impact, fix=_prefill_fix,
    sites=lambda case: _where(s for s in case.fired(_prefill_field(case) or "") if s.rule),
    affects=("prefill/extend",), covers=lambda case: {_prefill_field(case) or "disable_piecewise_cuda_graph"},
    gpu_only=True, checks=_prefill_checks,
    uses=("command", "model_config", "source", "bench", "version")))


def _decode_field(case: Case) -> str | None:
    if case.has("cuda_graph_config.decode.backend"):
        return "cuda_graph_config.decode.backend"
    return "disable_cuda_graph" if case.has("disable_cuda_graph") else None


def _decode_off(case: Case) -> list[str] | None:
    name = _decode_field(case)
    if name is None or not _is_disabled(case.value(name)):
        return None
    if case.value("disaggregation_mode") == "prefill":
        return None  # a prefill server of a PD split runs no decode step: its decode graph is never used
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


def _decode_impact(case: Case) -> Impact:
    graphs = (case.ev.decode or {}).get("cuda_graph")
    seen = f"; the Decode batch lines confirm `cuda graph: {graphs}`" if graphs is not None else ""
    return not_estimated("every decode (and verify) step then launches each kernel from Python; the cost is the "
                         "launch gaps, which the roofline does not count and no input here measures" + seen,
                         "decode tok/s", "a benchmark with the decode graph on and off (sgl-kit bench)",
                         "the Decode batch lines' gen throughput at batch 1 before and after")


rule(Rule(
    "decode-cuda-graph-off", "Decode runs without CUDA graphs", _ALL, ("args",),
    when=_decode_off, impact=_decode_impact,
    fix=_decode_fix, sites=lambda case: _where(_resolution_sites(case, _decode_field(case) or "")),
    affects=("decode step", "verify"), covers=lambda case: {_decode_field(case) or "disable_cuda_graph"},
    gpu_only=True,
    uses=("command", "source", "decode", "version")))


def _graph_bs_ceiling(case: Case) -> list[str] | None:
    decode = case.ev.decode or {}
    limit = case.value("cuda_graph_max_bs") or case.value("cuda_graph_max_bs_decode")  # 0.5.19+: _decode
    if not limit or decode.get("cuda_graph") not in (False, "mixed"):
        return None
    graph = _decode_field(case)
    if graph is not None and _is_disabled(case.value(graph)):
        return None  # no batch runs in a decode graph: decode-cuda-graph-off speaks of it, not the ceiling
    return [f"Decode batch lines show `cuda graph: False` ({case.ev.sources.get('decode', 'the log')}) while "
            f"cuda_graph_max_bs = {limit}: batches larger than that run eagerly",
            f"max_running_requests = {case.value('max_running_requests')}"]


def _graph_bs_impact(case: Case) -> Impact:
    return not_estimated(f"batches above cuda_graph_max_bs decode eagerly ({case.ev.sources.get('decode', 'the log')}"
                         "); under load this feeds on itself (github.com/sgl-project/sglang/issues/33483); a single "
                         "stream is unaffected", "throughput under load",
                         "a load benchmark at the concurrency served (sgl-kit bench --concurrency N) with "
                         "--cuda-graph-max-bs raised")


def _graph_bs_fix(case: Case) -> Fix:
    return ([Change(case.option("cuda_graph_max_bs") or case.option("cuda_graph_max_bs_decode") or "--cuda-graph-max-bs",
                    case.value("max_running_requests") or 2 * (case.value("cuda_graph_max_bs")
                                                               or case.value("cuda_graph_max_bs_decode") or 32))],
            [], ["raising --max-running-requests further: it admits more than the graphs cover"])


rule(Rule(
    "decode-batches-above-graph-ceiling", "Decode batches outgrow the captured CUDA graphs", _ALL,
    ("args", "decode"),
    when=_graph_bs_ceiling, impact=_graph_bs_impact, fix=_graph_bs_fix,
    affects=("decode step", "queueing"), covers=lambda case: {"cuda_graph_max_bs"},
    gpu_only=True,
    uses=("source",)))



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
        return int(auto.value[0]), int(auto.value[2]), _auto_words(case, auto)
    return None


def _auto_words(case: Case, auto) -> str:
    """What sglang's automatic choice is for this launch: a value for this architecture (a condition of the
    function named it), or the fallback it returns when none of its conditions matched."""
    guards = auto.site.guards if auto.site is not None else []
    arch = ((case.ev.model_config or {}).get("architectures") or ["this model"])[0]
    if guards and all(g.negated for g in guards):
        return (f"sglang {case.ev.version}'s default when the launch sets no steps ({auto.function}, {auto.where}: "
                f"the fallback it returns when none of its {len(guards)} conditions matches, not a value chosen for "
                f"{arch})")
    return f"sglang {case.ev.version}'s choice for {arch} when the launch sets no steps ({auto.where})"


def _spec_low(case: Case) -> list[str] | None:
    if not case.speculative or case.value("speculative_num_steps") is None:
        return None
    target = _spec_target(case)
    steps, draft = int(case.value("speculative_num_steps")), int(case.value("speculative_num_draft_tokens") or 0)
    if target is None or (steps >= target[0] and draft >= target[1]):
        return None
    stated = case.value("speculative_num_draft_tokens")
    tokens = f"speculative_num_draft_tokens = {draft}" if stated is not None else \
        "speculative_num_draft_tokens not set (sglang derives it from the steps)"
    out = [f"speculative_num_steps = {steps}: {case.origin('speculative_num_steps')}; {tokens}",
           f"{target[2]} is {target[0]} steps and {target[1]} draft tokens"]
    accept, where = case.accept_length
    if accept:
        out.append(f"accept length {accept:.2f} with {steps} step(s) ({where})")
    cost = _reserve(case, draft or steps + 1, target[1])
    if cost is not None:
        out.append(cost[1])
    return out


def _reserve(case: Case, now: int, then: int):
    """(ReserveCost, its sentence) for a hybrid model, else None (kit.doctor.spec_cost)."""
    from .spec_cost import reserve_cost

    if not case.hybrid_linear or then <= now:
        return None
    cost = reserve_cost(case, now, then)
    profile = case.gpu_profile()
    gib = profile.memory_mib / 1024 if profile is not None and getattr(profile, "memory_mib", None) else None
    return cost, cost.sentence(now, then, gib), cost.short(now, then)


def _spec_impact(case: Case) -> Impact:
    """Modelled: the measured accept length gives the per-draft acceptance p (a geometric chain, the
    same p for every draft); the roofline's bytes give a draft step's cost against a verify's."""
    target = _spec_target(case)
    steps = int(case.value("speculative_num_steps") or 1)
    accept, where = case.accept_length
    cost, cost_how = _draft_cost(case)
    if cost is None:
        return not_estimated(f"a draft step's cost against a verify is not known ({cost_how})", "decode tok/s",
                             "the model's config.json (its MTP fields) or the draft model's", "a benchmark")

    def lost(p: float) -> float:
        now = _tokens_per_round(p, steps) / (1 + steps * cost)
        then = _tokens_per_round(p, target[0]) / (1 + target[0] * cost)
        return max(0.0, 1 - now / then)

    if not accept:
        examples = ", ".join(f"p {p:g}: {lost(p):.0%}" for p in (0.5, 0.7, 0.9))
        return _with_cost(case, not_estimated(f"it depends on the per-draft acceptance, which nothing here measured ({examples} for "
                             f"{steps} -> {target[0]} steps, each draft step costing {cost:.1%} of a verify)",
                             "decode tok/s", "the Decode batch lines' `accept len` (the server's log after a few "
                             "requests)", "a benchmark (sgl-kit bench, then --bench FILE)"))
    p = _solve_p(accept, steps)
    return _with_cost(case, Impact(lost(p), "modelled",
                  f"a per-draft acceptance of {p:.2f} read from the accept length {accept:.2f}; {steps} -> "
                  f"{target[0]} steps gives {_tokens_per_round(p, steps):.2f} -> {_tokens_per_round(p, target[0]):.2f}"
                  f" tokens per round, each draft step costing {cost:.1%} of a verify ({cost_how}); assumes the "
                  "same acceptance for every draft position",
                  "decode tok/s", (f"accept length {accept:.2f} ({where})", f"draft/verify bytes {cost:.3f}"),
                  bounded=False))


def _with_cost(case: Case, impact: Impact) -> Impact:
    """The gain's estimate with the memory the change costs beside it (hybrid models: kit.doctor.spec_cost)."""
    from dataclasses import replace

    target = _spec_target(case)
    draft = int(case.value("speculative_num_draft_tokens") or int(case.value("speculative_num_steps") or 0) + 1)
    found = _reserve(case, draft, target[1]) if target is not None else None
    if found is None:
        return impact
    head, sep, tail = impact.reason.partition("; would tell: ")
    return replace(impact, reason=f"{head}; {found[2]}{sep}{tail}")


def _draft_cost(case: Case) -> tuple[float | None, str]:
    """One draft step's reads over one verify's, from the roofline's byte split."""
    roof = case.roofline
    if roof is not None and roof.draft_bytes_per_step and roof.bytes_per_step:
        return roof.draft_bytes_per_step / roof.bytes_per_step, "the roofline's bytes: the MTP layer and lm_head " \
                                                                "against the verify's weights, KV and state"
    return None, "the roofline has no draft step size: no model config, or no MTP fields in it"


def _spec_fix(case: Case) -> Fix:
    target = _spec_target(case)
    changes = [Change(case.option("speculative_num_steps") or "--speculative-num-steps", target[0]),
               Change(case.option("speculative_num_draft_tokens") or "--speculative-num-draft-tokens", target[1])]
    if case.value("speculative_eagle_topk") not in (None, 1):
        changes.append(Change(case.option("speculative_eagle_topk") or "--speculative-eagle-topk", 1))
    avoid = ["more draft tokens than steps + 1 with topk 1: the extra ones are never used"]
    advice = []
    draft = int(case.value("speculative_num_draft_tokens") or int(case.value("speculative_num_steps") or 0) + 1)
    found = _reserve(case, draft, target[1])
    if found is not None and found[0].delta is not None:
        cost = found[0]
        option = case.option("max_running_requests") or "--max-running-requests"
        advice.append(f"weigh the memory: the intermediate-state reserve is running requests x draft tokens x "
                      f"{cost.per_req:,} bytes per GPU ({cost.requests} x {target[1]} here); where the KV cache or "
                      f"the mamba pool then runs full (kv-pool-full, requests queued), a lower {option} shrinks it")
    return changes, advice, avoid


rule(Rule(
    "speculative-steps-low", "Speculative decoding drafts fewer tokens than it should", ">=0.5",
    ("args",),
    when=_spec_low, impact=_spec_impact, fix=_spec_fix,
    sites=lambda case: [case.spec_auto.where] if case.spec_auto is not None else [],
    affects=("draft", "verify"), covers=lambda case: {"speculative_num_steps", "speculative_num_draft_tokens"},
    uses=("baseline", "command", "decode", "bench", "model_config", "source", "hardware", "version", "capacity", "environ")))


def _accept_low(case: Case) -> list[str] | None:
    accept, where = case.accept_length
    steps = case.value("speculative_num_steps")
    if not case.speculative or not accept or not steps:
        return None
    if accept / (int(steps) + 1) >= 0.5:
        return None
    return [f"accept length {accept:.2f} of a possible {int(steps) + 1} per round ({where})"]


rule(Rule(
    "speculative-accept-low", "Few draft tokens are accepted", _ALL, ("args", "decode|bench"),
    when=_accept_low, impact=lambda case: _accept_impact(case),
    fix=lambda case: ([], ["check that the draft (MTP/EAGLE) weights belong to this exact checkpoint and "
                           "quantization; measure with temperature 0 to separate sampling from draft quality"],
                      ["raising --speculative-num-steps: with low acceptance it costs more than it gains"]),
    affects=("draft", "verify"), covers=lambda case: set()))


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
    "overlap-scheduler-off", "The overlap scheduler is off", _ALL, ("args",),
    when=_flag_on("disable_overlap_schedule", "CPU scheduling of the next batch is no longer hidden behind "
                                              "the GPU's work"),
    impact=lambda case: not_estimated("scheduling, sampling bookkeeping and detokenisation now sit between GPU "
                                      "steps; their CPU time is not in any input here", "decode tok/s",
                                      "a benchmark with and without it (sgl-kit bench)",
                                      "the Decode batch lines' gen throughput against the roofline"),
    affects=("scheduling",), covers=lambda case: {"disable_overlap_schedule"},
    fix=_remove_or_rule("disable_overlap_schedule", []),
    sites=lambda case: _where(_resolution_sites(case, "disable_overlap_schedule")),
    uses=("command", "source", "version")))

def _no_reuse(case: Case) -> str | None:
    """The workload's prompts share no prefix (measured): the prefix cache has nothing to keep for it."""
    reuse = prefix_reuse(case)
    if reuse is None or reuse["share"] >= 0.05:
        return None
    return (f"the workload's prompts share {reuse['share']:.0%} of their length with an earlier prompt "
            f"({reuse['basis']}, {case.ev.bench['source']}): the cache has nothing to reuse for this load")


rule(Rule(
    "radix-cache-off", "The prefix (radix) cache is off", _ALL, ("args",),
    when=_flag_on("disable_radix_cache", "shared prefixes (system prompts, multi-turn history) are prefilled again "
                                         "for every request"),
    impact=lambda case: not_estimated("it costs prefill time on repeated prefixes (system prompts, multi-turn "
                                      "history), not decode", "time to first token",
                                      "the share of prompt tokens served from cache: the Prefill batch lines' "
                                      "#cached-token with the cache on"),
    affects=("prefill/extend",), covers=lambda case: {"disable_radix_cache"},
    fix=_remove_or_rule("disable_radix_cache", ["--disable-radix-cache with mamba extra_buffer: sglang refuses "
                                                "that combination at startup"]),
    sites=lambda case: _where(_resolution_sites(case, "disable_radix_cache")),
    applies=lambda case: _no_reuse(case),
    uses=("bench", "command", "source", "version")))


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
    ("args",),
    when=_mamba_no_buffer,
    impact=lambda case: not_estimated("no_buffer cannot keep state snapshots: sglang then turns off overlap "
                                      "scheduling or the prefix cache; their cost is that of those findings",
                                      "decode tok/s", "a benchmark with extra_buffer (sgl-kit bench)"),
    affects=("scheduling", "prefill/extend"), covers=lambda case: {_mamba_field(case) or "mamba_scheduler_strategy"},
    fix=lambda case: ([Change(case.option(_mamba_field(case)) or "--mamba-scheduler-strategy", "extra_buffer")], [],
                      ["extra_buffer together with --disable-radix-cache: sglang refuses it at startup"]),
    sites=lambda case: _where(_resolution_sites(case, _mamba_field(case) or "")),
    uses=("command", "model_config", "source", "version")))


def _speculative_cap(case: Case) -> list[str] | None:
    if not case.speculative or case.value("max_running_requests") != 48 or case.asked("max_running_requests"):
        return None
    sites = _resolution_sites(case, "max_running_requests")
    if case.ev.tree is not None and not sites:
        return None
    where = ""
    if len(sites) == 1:
        where = f" ({_where(sites)[0]})"
    elif sites:
        where = (f" (one of {', '.join(_where(sites))}: the kit could not decide from the evidence which of "
                 "them ran)")
    return ["max_running_requests = 48, not asked for: speculative decoding sets it" + where]


rule(Rule(
    "speculative-capped-running-requests", "Speculative decoding capped concurrent requests at 48", ">=0.5",
    ("args",),
    when=_speculative_cap,
    impact=lambda case: _queue_impact(case, 48),
    affects=("queueing",), covers=lambda case: {"max_running_requests"},
    fix=lambda case: ([], [f"if you serve more than 48 streams at once, set "
                           f"{case.option('max_running_requests') or '--max-running-requests'} and "
                           f"{case.option('cuda_graph_max_bs') or case.option('cuda_graph_max_bs_decode') or '--cuda-graph-max-bs'} together"],
                      ["a higher --max-running-requests alone: batches above cuda_graph_max_bs decode eagerly"]),
    sites=lambda case: _where(_resolution_sites(case, "max_running_requests")),
    uses=("command", "source", "version", "bench")))


def _vlm_site(case: Case, name: str) -> list:
    return [s for s in _resolution_sites(case, name)
            if "multimodal" in (s.rule + s.function + " ".join(g.text for g in s.guards)).lower()
            or "vlm" in (s.rule + s.function).lower()]


def _not_read(case: Case, name: str) -> str:
    """Why the evidence has no value for a field sglang computes at startup."""
    return case.unknown(name) or ("the evidence has the launch command, not the server's resolved arguments; sglang "
                                  "computes it at startup" if case.value(name) is None else "")


def _mem_vlm(case: Case) -> list[str] | None:
    sites = _vlm_site(case, "mem_fraction_static")
    if not sites or case.asked("mem_fraction_static"):
        return None
    value = case.value("mem_fraction_static")
    if value is None or case.unknown("mem_fraction_static"):  # never a finding built on a value not read
        out = [f"mem_fraction_static: its value was not read ({_not_read(case, 'mem_fraction_static')}); sglang "
               f"lowers it for a vision-language model at {_where(sites[:1])[0]} ({sites[0].function}), after the "
               "launch command: the server's server_args log line or /server_info tells the value it runs with"]
    else:
        out = [f"mem_fraction_static = {value}, lowered for a vision-language model at "
               f"{_where(sites[:1])[0]} ({sites[0].function})"]
    factor, how = _vlm_factor(case)
    if factor is not None:
        out.append(f"sglang's own factor is {factor:.4f}: {how}")
    return out


rule(Rule(
    "mem-fraction-lowered-for-vlm", "GPU memory for the KV cache was lowered because the model counts as a VLM",
    ">=0.5", ("args",),
    when=_mem_vlm,
    impact=lambda case: not_estimated("a smaller KV cache: fewer concurrent requests and shorter contexts fit; "
                                      "a single stream is unaffected", "throughput under load",
                                      "the Decode batch lines' token usage and #queue-req under the real load"),
    fix=lambda case: _mem_vlm_fix(case),
    affects=("queueing",), covers=lambda case: {"mem_fraction_static"},
    sites=lambda case: _where(_vlm_site(case, "mem_fraction_static")),
    uses=("command", "model_config", "source", "version")))


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
    ("args", "model_config"),
    when=_chunked_vlm,
    impact=lambda case: not_estimated("a long prompt is prefilled in one piece: running decodes stall behind it; "
                                      "how long depends on the prompts served", "time to first token",
                                      "the prompt lengths served and the Prefill batch lines' timing"),
    affects=("prefill/extend", "scheduling"), covers=lambda case: {"chunked_prefill_size"},
    fix=lambda case: ([], ["sglang forces it for this architecture whatever the flag says; keep prompts short, "
                           "or serve a text-only checkpoint of the model if there is one"],
                      ["--chunked-prefill-size N: the model runner overrides it for this architecture"]),
    sites=lambda case: [x.where for x in (_sglang_says(case, "is_multimodal_chunked_prefill_supported",
                                                       model_architectures=(case.ev.model_config or {})
                                                       .get("architectures") or []),) if x is not None],
    uses=("command", "source", "version", "notices")))



# --------------------------------------------------------------------------- impact functions shared above

def _accept_impact(case: Case) -> Impact:
    """Modelled: the draft steps whose tokens are rejected, as a share of the round's reads."""
    accept, where = case.accept_length
    steps = int(case.value("speculative_num_steps") or 1)
    cost, how = _draft_cost(case)
    if cost is None:
        return not_estimated(f"each rejected draft costs a draft step and verify work for nothing; {how}",
                             "decode tok/s", "the model's config.json (its MTP fields)")
    wasted = max(0.0, steps - (accept - 1)) * cost / (1 + steps * cost)
    return Impact(wasted, "modelled", f"{steps - (accept - 1):.2f} of {steps} draft steps per round yield no token; "
                  f"each costs {cost:.1%} of a verify ({how}). Better drafts would also raise the tokens per round, "
                  "which this does not count", "decode tok/s",
                  (f"accept length {accept:.2f} ({where})", f"draft/verify bytes {cost:.3f}"))


def _queue_impact(case: Case, cap: int) -> Impact:
    concurrency = (case.ev.bench or {}).get("concurrency")
    if concurrency:
        if concurrency <= cap:
            return Impact(0.0, "measured", f"the benchmark ran {concurrency} stream(s) at once, within the cap of "
                          f"{cap}: nothing queued", "throughput under load", (f"concurrency {concurrency}",))
        return not_estimated(f"the benchmark ran {concurrency} streams, above the cap of {cap}: the rest queued",
                             "throughput under load", "the Decode batch lines' #queue-req under that load")
    return not_estimated(f"a single stream is not affected; above {cap} concurrent requests the rest queue",
                         "throughput under load", "the concurrency served (a load benchmark, or the Decode batch "
                         "lines' #running-req and #queue-req)")


def _vlm_factor(case: Case) -> tuple[float | None, str]:
    """The factor sglang multiplied mem_fraction_static by, computed by this version's own formula
    (``adjust_mem_fraction_for_vlm``, read from its source) and the model's vision_config, with the
    attributes that formula reads: ``getattr(vision_config, "num_hidden_layers", 24)`` finds no
    ``num_hidden_layers`` in a Qwen3.5/3.6 vision config (it has ``depth``), so sglang uses its default, 24."""
    import ast
    import textwrap

    if case.ev.tree is None:
        return None, "no sglang source to read the formula from"
    snippet = None
    for name in ("ServerArgs.adjust_mem_fraction_for_vlm", "adjust_mem_fraction_for_vlm"):
        try:
            snippet = case.ev.tree.function(name)
            break
        except KitError as err:
            why = err.message
    if snippet is None:
        return None, f"adjust_mem_fraction_for_vlm not read: {why}"
    path = short_path(snippet.path)
    where = f"{path}:{snippet.start}-{snippet.end}"
    tree = ast.parse(textwrap.dedent(snippet.text))
    consts, reads, clamp, score = {}, {}, None, None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int | float):
                consts[target] = float(value.value)
            elif isinstance(value, ast.Call) and getattr(value.func, "id", "") == "getattr" and len(value.args) == 3 \
                    and isinstance(value.args[1], ast.Constant) and isinstance(value.args[2], ast.Constant) \
                    and isinstance(value.args[2].value, int | float):
                # the variable, the attribute sglang reads, its default, and the line (in the file)
                reads[target] = (value.args[1].value, float(value.args[2].value), snippet.start + node.lineno - 1)
            elif isinstance(value, ast.Call) and getattr(value.func, "id", "") == "max" and len(value.args) == 2:
                low, inner = value.args
                if isinstance(low, ast.Constant) and isinstance(inner, ast.Call) and \
                        getattr(inner.func, "id", "") == "min" and isinstance(inner.args[0], ast.Constant):
                    clamp = (float(low.value), float(inner.args[0].value))
            elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult) and isinstance(value.left, ast.Name) \
                    and isinstance(value.right, ast.BinOp) and isinstance(value.right.op, ast.Pow) \
                    and isinstance(value.right.left, ast.Name) and value.left.id in reads \
                    and value.right.left.id in reads:
                score = (value.left.id, value.right.left.id)  # layers x hidden ** 2
    need = ("base_mem_fraction_reduction_ratio", "baseline_vit_layers", "baseline_vit_hidden_size", "sensitivity_scale")
    if any(n not in consts for n in need) or clamp is None or score is None:
        return None, f"the formula at {where} is not the one this rule knows (constants {sorted(consts)})"
    vision = (case.ev.model_config or {}).get("vision_config") or {}
    said = []
    values = []
    for var in score:
        attr, default, line = reads[var]
        if attr in vision:
            values.append(float(vision[attr]))
            said.append(f"`{attr}` = {vision[attr]} from config.json's vision_config")
        else:
            values.append(default)
            other = {"num_hidden_layers": "depth"}.get(attr)
            has = f" (it has `{other}` = {vision[other]}, which this line does not read)" if other in vision else ""
            said.append(f"config.json's vision_config has no `{attr}`{has}, so `getattr(vision_config, "
                        f"\"{attr}\", {default:g})` ({path}:{line}) gives {default:g}")
    layers, hidden = values
    ratio = layers * hidden ** 2 / (consts["baseline_vit_layers"] * consts["baseline_vit_hidden_size"] ** 2)
    dynamic = max(clamp[0], min(clamp[1], 1.0 - consts["sensitivity_scale"] * (ratio - 1.0)))
    factor = consts["base_mem_fraction_reduction_ratio"] * dynamic
    other = [n for n in tree.body[0].body if isinstance(n, ast.If) and "vision_config" not in ast.unparse(n.test)] \
        if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    branch = "".join(f"; sglang {case.ev.version or ''} reserves differently when `{ast.unparse(n.test)}` "
                     f"({path}:{snippet.start + n.lineno - 1}), which this does not evaluate" for n in other)
    return factor, (f"{consts['base_mem_fraction_reduction_ratio']:g} x clamp(1 - {consts['sensitivity_scale']:g} x "
                    f"({ratio:.3f} - 1), {clamp[0]:g}, {clamp[1]:g}) = {factor:.4f}: sglang reads a vision tower of "
                    f"{layers:g} layers x {hidden:g} hidden ({'; '.join(said)}) ({where}){branch}")


def _mem_vlm_fix(case: Case) -> Fix:
    option = case.option("mem_fraction_static") or "--mem-fraction-static"
    factor, how = _vlm_factor(case)
    value = case.value("mem_fraction_static")
    only = "only for text-only use: the vision encoder needs that memory for images"
    avoid = ["pushing it above ~0.9: CUDA graph capture then runs out of memory"]
    if factor is None or not value:
        why = how if factor is None else (f"the value it runs with was not read "
                                          f"({_not_read(case, 'mem_fraction_static')})")
        return [], [f"{only}; the value before sglang's adjustment is not computed: {why}"], avoid
    before = round(float(value) / factor, 3)
    return [Change(option, before)], [f"{only}; {before} is {value} / {factor:.4f}, sglang's own factor (above)"], avoid
