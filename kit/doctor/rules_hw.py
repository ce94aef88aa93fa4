"""Rules about the machine and the release: GPU links, NCCL, the attention backend,
and every difference from a known-good baseline. They register into kit.doctor.rules.RULES."""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from .case import Case
from .result import Change
from .rulebase import Fix, Impact, Rule, not_estimated, rule
from .rulebase import resolution_sites as _resolution_sites
from .rulebase import where as _where

# --------------------------------------------------------------------------- which GPUs TP uses

def _tp_gpus(case: Case) -> tuple[list[str], str]:
    return case.tp_gpus()


def _worst(topo, gpus: list[str]) -> tuple[int, str]:
    from kit.hardware import link_rank

    pairs = [(link_rank(topo.link(a, b)), topo.link(a, b) or "?") for a, b in itertools.combinations(gpus, 2)]
    return max(pairs) if pairs else (0, "")


def _tp_topology(case: Case) -> list[str] | None:
    hw = case.ev.hardware
    topo = getattr(hw, "topology", None)
    if topo is None or case.tp < 2:
        return None
    used, how = _tp_gpus(case)
    if len(used) != case.tp or any(g not in topo.gpus for g in used):
        return None
    worst, link = _worst(topo, used)
    best = min((_worst(topo, list(c)) + (list(c),) for c in itertools.combinations(topo.gpus, case.tp)),
               key=lambda t: t[0])
    if worst < 3 or best[0] >= worst:  # PHB (3) and beyond cross the CPU; only flag when better exists
        return None
    return [f"tensor parallel ranks run on {', '.join(used)} ({how}); their worst link is {link}",
            f"{', '.join(best[2])} are joined by {best[1]}"]


def _tp_topology_fix(case: Case) -> Fix:
    topo = case.ev.hardware.topology
    best = min((_worst(topo, list(c)) + (list(c),) for c in itertools.combinations(topo.gpus, case.tp)),
               key=lambda t: t[0])
    ids = ",".join(g[3:] for g in best[2])
    return [Change(setenv=("CUDA_VISIBLE_DEVICES", ids))], [
        "nvidia-smi numbers GPUs by PCI bus; set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees"], []


rule(Rule(
    "tp-across-slow-link", "Tensor parallelism crosses a slow link while a closer group of GPUs exists", ">=0.4",
    ("topology",),
    when=_tp_topology,
    impact=lambda case: _allreduce_impact(case, "through the CPU's root complex (PHB/NODE/SYS) each all-reduce "
                                                "waits longer than over NVLink or a PCIe switch"),
    fix=_tp_topology_fix, affects=("all-reduce",), covers=lambda case: {"base_gpu_id"},
    uses=("args", "environ", "hardware", "model_config")))


def _nccl_p2p_disabled(case: Case) -> list[str] | None:
    value = (case.ev.environ or {}).get("NCCL_P2P_DISABLE")
    if value in (None, "", "0") or case.tp < 2:
        return None
    out = [f"NCCL_P2P_DISABLE={value} in the server's environment ({case.ev.sources.get('environ', 'environ')})"]
    p2p = getattr(case.ev.hardware, "p2p", None)
    used, _ = _tp_gpus(case)
    if p2p is not None and len(used) > 1 and all(p2p.supported(a, b) for a, b in itertools.combinations(used, 2)):
        out.append(f"yet {_p2p_said(p2p)} peer access OK between {', '.join(used)}")
    return out


rule(Rule(
    "nccl-p2p-disabled", "NCCL peer-to-peer is switched off for a tensor-parallel server", ">=0.4",
    ("environ",),
    when=_nccl_p2p_disabled,
    impact=lambda case: _allreduce_impact(case, "NCCL's all-reduce traffic then bounces through host memory "
                                                "instead of GPU to GPU"),
    affects=("all-reduce",), covers=lambda case: set(),
    fix=lambda case: ([Change(unset="NCCL_P2P_DISABLE")],
                      ["if it was set to stop a hang, check IOMMU/ACS in the BIOS (`iommu=pt`) instead"],
                      ["NCCL_P2P_DISABLE=1 as a fix for NCCL hangs: it hides the cause and costs every step"]),
    uses=("args", "p2p", "hardware", "model_config")))


def _p2p_missing(case: Case) -> list[str] | None:
    p2p = getattr(case.ev.hardware, "p2p", None)
    if p2p is None or case.tp < 2:
        return None
    used, how = _tp_gpus(case)
    bad = [f"{a}-{b}: {p2p.status.get(f'{a}-{b}') or p2p.status.get(f'{b}-{a}')}"
           for a, b in itertools.combinations(used, 2) if p2p.supported(a, b) is False]
    if not bad:
        return None
    if not p2p.basis.startswith("nvidia-smi"):
        return [f"no peer access between TP ranks ({how}): {p2p.basis}",
                "not read on the box: `nvidia-smi topo -p2p r` would confirm it"]
    return [f"nvidia-smi topo -p2p: no peer access between TP ranks ({'; '.join(bad)}) ({how})"]


def _p2p_said(p2p) -> str:
    """Who says what of peer access: nvidia-smi read on the box, or the GPU model's known capabilities."""
    return "nvidia-smi topo -p2p reports" if p2p.basis.startswith("nvidia-smi") else "the GPU model gives"


def _p2p_statuses(case: Case) -> set[str]:
    p2p = getattr(case.ev.hardware, "p2p", None)
    used, _ = _tp_gpus(case)
    return {p2p.status.get(f"{a}-{b}") or p2p.status.get(f"{b}-{a}") or "?"
            for a, b in itertools.combinations(used, 2) if p2p.supported(a, b) is False} if p2p else set()


def _with_p2p(case: Case):
    """sglang's custom all-reduce chain on this machine with peer access working (and the flag off)."""
    from .fast_paths import chain

    return chain(case, "custom-all-reduce", changes={"disable_custom_all_reduce": False}, facts={"p2p": True})


def _p2p_impact(case: Case) -> Impact:
    after = _with_p2p(case)
    if after is not None and after.blocking is not None and "p2p" not in after.blocking.text.lower():
        return _ar_buys_nothing(case, after, "with peer access working")
    return _custom_ar_impact(case, "without P2P, sglang's custom all-reduce turns itself off at startup and NCCL "
                                   "copies through host memory", p2p=False)


def _p2p_fix(case: Case) -> Fix:
    statuses = _p2p_statuses(case)
    after = _with_p2p(case)
    if after is not None and after.blocking is not None and "p2p" not in after.blocking.text.lower():
        return [], [f"peer access alone would not turn sglang's custom all-reduce on here: {after.sentence()}"], []
    p2p = case.ev.hardware.p2p
    if "GNS" in statuses and not p2p.basis.startswith("nvidia-smi"):
        return [], ["GPUs whose driver offers peer access (workstation or data-center boards), or NVLink, would let "
                    "sglang's custom all-reduce run (the estimate is what that would buy)"], \
            ["looking for a BIOS setting: NVIDIA's driver withholds peer access on this GPU model; patched "
             "open kernel modules that lift it exist, unsupported by NVIDIA"]
    if "GNS" in statuses:
        # nothing to prescribe on this machine: the estimate says what GPUs with peer access would buy
        return [], [], ["looking for a BIOS or driver setting: nvidia-smi reports GNS (GPU not supported) between "
                        "these GPUs, the GPU itself offers no peer access; GPUs that do would (the estimate is what "
                        "that would buy)"]
    return [], ["enable peer access: IOMMU passthrough (`iommu=pt`) or ACS off in the BIOS; on consumer cards P2P "
                "may be blocked by the driver"], []


rule(Rule(
    "p2p-unavailable", "GPUs used by tensor parallelism cannot reach each other peer to peer", ">=0.4",
    ("p2p",),
    when=_p2p_missing, impact=_p2p_impact, fix=_p2p_fix,
    sites=lambda case: _p2p_check_site(case), affects=("all-reduce",), covers=lambda case: set(),
    uses=("args", "environ", "hardware", "bench", "decode", "model_config", "source", "topology", "version")))


def _custom_ar_off(case: Case) -> list[str] | None:
    if case.value("disable_custom_all_reduce") is not True or case.tp < 2:
        return None
    out = [f"disable_custom_all_reduce = True with tp_size {case.tp}: {case.origin('disable_custom_all_reduce')}"]
    p2p = getattr(case.ev.hardware, "p2p", None)
    used, _ = _tp_gpus(case)
    if p2p is not None and len(used) > 1 and all(p2p.supported(a, b) for a, b in itertools.combinations(used, 2)):
        out.append(f"{_p2p_said(p2p)} peer access OK between {', '.join(used)} "
                   f"({case.ev.sources.get('p2p', 'topo -p2p')}): the custom kernel's P2P check would pass"
                   + (f" ({_p2p_check_site(case)[0]})" if _p2p_check_site(case) else ""))
    return out


def _without_flag(case: Case):
    from .fast_paths import chain

    return chain(case, "custom-all-reduce", changes={"disable_custom_all_reduce": False})


def _custom_ar_fix(case: Case) -> Fix:
    after = _without_flag(case)
    if after is not None and after.blocking is not None:
        return [], [f"turning it back on would not make it run here: {after.sentence()}"], []
    if case.asked("disable_custom_all_reduce"):
        return [Change(case.option("disable_custom_all_reduce") or "--disable-custom-all-reduce", remove=True)], [], \
            ["removing it where P2P is unavailable: the custom kernel needs peer access"]
    return [], ["sglang turned it off; see the site it names"], []


rule(Rule(
    "custom-all-reduce-off", "Custom all-reduce is off with tensor parallelism", ">=0.4",
    ("args",),
    when=_custom_ar_off,
    impact=lambda case: _custom_ar_off_impact(case),
    fix=_custom_ar_fix, sites=lambda case: _where(_resolution_sites(case, "disable_custom_all_reduce")),
    affects=("all-reduce",), covers=lambda case: {"disable_custom_all_reduce"},
    uses=("command", "source", "version", "environ", "p2p", "topology", "hardware")))


_ALLREDUCE = Path(__file__).resolve().parent.parent / "data" / "allreduce.yaml"


@lru_cache(maxsize=1)
def allreduce_latency() -> dict:
    """kit/data/allreduce.yaml: public small all-reduce latencies, NCCL against the custom kernel."""
    from kit._data import load_yaml

    return dict(load_yaml(_ALLREDUCE))


def _custom_ar_off_impact(case: Case) -> Impact:
    after = _without_flag(case)
    if after is not None and after.blocking is not None:
        return _ar_buys_nothing(case, after, "without the flag")
    if after is not None and after.undecided:
        open_ = "; ".join(f"`{s.text}` ({s.where}: {s.reason})" for s in after.undecided[:2])
        return not_estimated(f"whether sglang would run its custom all-reduce without the flag is not decided by the "
                             f"evidence: {open_}", "decode tok/s", "`nvidia-smi topo -m` (NVLink between the GPUs)",
                             "`nvidia-smi topo -p2p r` (peer access)")
    return _custom_ar_impact(case, "small all-reduces at batch 1 are latency-bound, and NCCL's take longer than "
                                   "sglang's one-shot custom kernel")


def _ar_buys_nothing(case: Case, after, how: str) -> Impact:
    block = after.blocking
    return Impact(0.0, "from the source", f"{how}, sglang {case.ev.version} would still not run its custom all-reduce: "
                  f"{block.function} returns at {block.where} (`{block.text}`)"
                  + (f", and logs {block.message!r}" if block.message else ""), "decode tok/s",
                  (f"{block.where}: {block.text}", f"tp_size {case.tp}", f"{_links(case)}"))


def _links(case: Case) -> str:
    from .fast_paths import machine_facts

    facts = machine_facts(case)
    nv = {True: "NVLink between every pair", False: "not NVLink between every pair", None: "links not read"}
    return f"{nv[facts['full_nvlink']]} ({case.ev.sources.get('topology', 'no nvidia-smi topo -m')})"


def _custom_ar_impact(case: Case, why: str, p2p: bool = True) -> Impact:
    """Modelled: the fix turns sglang's custom all-reduce on, so each all-reduce of a round saves NCCL's
    latency less the custom kernel's (public numbers, kit/data/allreduce.yaml); the count per round is
    2 per layer for the verify (or decode step) plus 2 per draft step, from config.json; the round time
    is the measured decode rate's (accept length / tok/s)."""
    layers = int(case.text_config.get("num_hidden_layers") or 0)
    steps = int(case.value("speculative_num_steps") or 0) if case.speculative else 0
    draft_layers = int(case.text_config.get("mtp_num_hidden_layers") or case.text_config.get(
        "num_nextn_predict_layers") or 0) if steps else 0
    measured, where = case.measured_tok_s
    accept, accept_where = case.accept_length if steps else (1.0, "one token per decode step")
    lat = allreduce_latency()
    fallback = _allreduce_impact(case, why)
    if not layers or not measured or not accept:
        missing = [what for what, have in (("num_hidden_layers in config.json", layers),
                                           ("a measured decode rate", measured),
                                           ("the accept length", accept)) if not have]
        return replace(fallback, reason=fallback.reason
                       + f" (to model it from this evidence, the kit needs: {', '.join(missing)})")
    count = 2 * layers + steps * 2 * draft_layers
    round_ms = accept / measured * 1e3
    saved_ms = count * (lat["nccl_us"] - lat["custom_us"]) / 1e3
    share = min(1.0, saved_ms / round_ms)
    inputs = (f"{count} all-reduces per round (2 x {layers} layers" + (f" + {steps} draft steps x 2 x {draft_layers}"
              if steps else "") + ", config.json)",
              f"NCCL {lat['nccl_us']:g} us against the custom kernel's {lat['custom_us']:g} us per "
              f"{lat['message_bytes'] // 1024} KB all-reduce, measured on {_measured_on(lat)} ({lat['source']}); "
              f"here: {case.tp} ranks, {_links(case)}{'' if p2p else ', no peer access'}: that they hold here is an "
              "assumption" + ("" if p2p else "; without peer access NCCL copies through host memory, slower than the "
                                             "measured peer-to-peer NCCL, so the saving is likely larger"),
              f"a round of {round_ms:.1f} ms (accept length {accept:.2f} from {accept_where or 'decode'} / "
              f"{measured:.1f} tok/s from {where})")
    return Impact(share, "modelled", why + f"; the custom kernel would save {saved_ms:.2f} ms of each {round_ms:.1f} "
                  f"ms round (a public check: {lat['check']['what']}, {lat['check']['source']}: +7.1% to +12.5%)",
                  "decode tok/s", inputs)


def _measured_on(lat: dict) -> str:
    c = lat.get("conditions") or {}
    return f"{c.get('gpus', '?')}, {c.get('ranks', '?')} ranks over {c.get('link', '?')}, NCCL with peer access"


def _allreduce_impact(case: Case, why: str) -> Impact:
    """Not estimated: the all-reduce count per step is known from the config, its latency on these
    GPUs is not in the evidence."""
    layers = int(case.text_config.get("num_hidden_layers") or 0)
    count = f"; with tp_size {case.tp}, each decode step all-reduces twice per layer (attention and MLP outputs): " \
            f"{2 * layers} times for {layers} layers" if layers else ""
    return not_estimated(why + count, "decode tok/s",
                         "the all-reduce latency at this size on these GPUs (nccl-tests all_reduce_perf -b 8K -e 64K, "
                         "with and without the change)", "a benchmark after the change (notebook 04)")


def _p2p_check_site(case: Case) -> list[str]:
    """Where this version's custom all-reduce turns itself off without P2P: the check of its gate chain
    whose message names P2P (read from the source, whatever the string literals are split into)."""
    from .fast_paths import chain

    found = chain(case, "custom-all-reduce", changes={"disable_custom_all_reduce": False})
    steps = [s for s in (found.steps if found is not None else []) if "P2P" in s.message or "p2p" in s.text]
    return [steps[0].where] if steps else []


# --------------------------------------------------------------------------- the attention backend

# Compute capability each backend needs: sglang's attention registry asserts these at startup.
_BACKEND_SM = {
    "fa3": (80, 90), "flashmla": (90, 90), "cutlass_mla": (100, 129), "trtllm_mla": (100, 109),
    "trtllm_mha": (100, 109), "fa4": (90, 129),
}


def _attention(case: Case) -> list[str] | None:
    backend = case.value("attention_backend") or case.value("decode_attention_backend")
    profile = case.gpu_profile()
    if not backend:
        return None
    if backend == "torch_native":
        return [f"attention_backend = 'torch_native': {case.origin('attention_backend')}"]
    if profile is None or profile.sm is None or backend not in _BACKEND_SM:
        return None  # no SM (an AMD profile names a gfx target): these backends are CUDA-only checks
    low, high = _BACKEND_SM[backend]
    if low <= profile.sm <= high:
        return None
    return [f"attention_backend = {backend!r}, which needs SM {low}-{high}; {profile.name} is SM{profile.sm}",
            f"{case.origin('attention_backend')}"]


def _attention_fix(case: Case) -> Fix:
    option = case.option("attention_backend") or "--attention-backend"
    if case.asked("attention_backend"):
        return [Change(option, remove=True)], ["let sglang choose: it picks per model and GPU"], []
    return [Change(option, "flashinfer")], [], []


rule(Rule(
    "attention-backend-mismatch", "The attention backend does not suit this GPU", ">=0.5",
    ("args", "hardware"),
    when=_attention,
    impact=lambda case: not_estimated("torch_native is a reference implementation; a backend built for another SM "
                                      "fails its startup check or falls back", "decode tok/s",
                                      "a benchmark with sglang's own choice of backend (sgl-kit bench)"),
    fix=_attention_fix, sites=lambda case: _where(_resolution_sites(case, "attention_backend")),
    affects=("decode step", "prefill/extend"), covers=lambda case: {"attention_backend"},
    gpu_only=True,
    uses=("command", "source", "version")))


# --------------------------------------------------------------------------- the baseline

# Fields that name the deployment, not how it runs.
_NOT_PERFORMANCE = {"model_path", "tokenizer_path", "served_model_name", "host", "port", "random_seed",
                    "log_level", "log_requests", "api_key", "file_storage_path", "download_dir", "device",
                    "trust_remote_code", "tensor_parallel_size", "enable_metrics", "base_gpu_id"}


def baseline_rows(case: Case) -> list:
    """The launch_diff rows of baseline -> this server that no other rule speaks of."""
    if case.ev.baseline is None or not case.ev.args:
        return []
    from kit.server_args import LaunchSide, launch_diff

    mine = LaunchSide("this server", "log", case.ev.args, "the server", explicit=case.ev.explicit,
                      defaults=case.cli_defaults or None)
    diff = launch_diff(case.ev.baseline, mine)
    rows = [r for r in diff.shown if r.flag.split(".")[0] not in _NOT_PERFORMANCE | case.covered
            and not (r.flag in _workarounds(case) and r.b is True)]
    if case.ev.baseline.kind == "command" and "not resolved" in case.ev.baseline.method:
        # A command read over the defaults says what was asked, not what sglang resolved: compare asks.
        rows = [r for r in rows if r.group == "asked"]
    return rows


def _workarounds(case: Case) -> set[str]:
    """Flags that skip sglang's auto-disable rules (``if self.enforce_piecewise_cuda_graph: return``):
    a launch that sets one did so on purpose, so a baseline without it is not the better one."""
    from kit.provenance import escapes

    out = set()
    for name in ("disable_piecewise_cuda_graph", "cuda_graph_config.prefill.backend", "disable_cuda_graph"):
        exp = case.explain(name) if case.has(name) else None
        if exp is not None:
            out |= {e.field for e in escapes(case.ev.tree, exp, sites=exp.sites)}
    return out


def _baseline(case: Case) -> list[str] | None:
    rows = baseline_rows(case)
    if not rows:
        return None
    return [f"{r.flag}: baseline {r.a!r} ({r.a_origin or 'logged'}) -> here {r.b!r} ({r.b_origin or 'logged'})"
            for r in rows]


def _baseline_fix(case: Case) -> Fix:
    changes = []
    for r in baseline_rows(case):
        option = case.option(r.flag)
        if option is None or "." in r.flag:
            continue
        if r.a is True or r.a is False:
            if r.a is True:
                changes.append(Change(option))
            elif case.asked(r.flag):
                changes.append(Change(option, remove=True))
        elif r.a is not None:
            changes.append(Change(option, r.a))
    # Advice, not edits: a difference is not known to be the slower side, so the fixed command keeps it.
    return [], [f"to match the baseline: {c}" for c in changes], []


rule(Rule(
    "differs-from-baseline", "The launch differs from the known-good baseline", ">=0.4", ("baseline",),
    when=_baseline,
    impact=lambda case: not_estimated(f"{len(baseline_rows(case))} difference(s) from a launch known to be fast; "
                                      "their effect is not modelled", "decode tok/s",
                                      "a benchmark of the baseline's launch and of this one (notebook 04)"),
    fix=_baseline_fix, affects=("decode step",), covers=lambda case: set(), after="findings",
    uses=("args", "command", "source")))


# --------------------------------------------------------------------------- quantization against the GPU


def _quant_on_gpu(case: Case):
    """What this release does with the launch's quantization on this GPU (kit.doctor.gpu_support, mined from
    each release's source), with the GPU's tensor formats (kit.hardware_caps)."""
    from kit.hardware_caps import capabilities

    from .gpu_support import runs_on

    method, where = case.quantization()
    profile = case.gpu_profile()
    if not method or profile is None or profile.sm is None or not case.ev.version:
        return None
    facts = runs_on(case.ev.version, method, profile.sm)
    if facts is None:
        return None
    return method, where, profile, facts, capabilities(profile)


def _quant_not_native(case: Case) -> list[str] | None:
    found = _quant_on_gpu(case)
    if found is None:
        return None
    method, where, profile, facts, caps = found
    arch = caps.architecture if caps is not None else None
    if facts["refused"]:
        return [f"quantization {method} ({where}) needs compute capability {facts['min_capability']} in sglang "
                f"{facts['release']} ({facts['site']}); {profile.name} is SM{profile.sm}",
                f"sglang refuses it when the model loads ({facts['check']}): the server does not start"]
    if facts["marlin"]:
        tensor = (f"{arch.name} tensor cores have no FP8 (source: {arch.source})" if arch is not None and not arch.fp8
                  else "this SM range is where sglang takes Marlin's path")
        return [f"quantization {method} ({where}) on {profile.name} (SM{profile.sm}): sglang {facts['release']} "
                f"runs FP8 weights through Marlin's weight-only kernel there ({facts['marlin_site']})",
                f"{tensor}; sglang's own startup warning (srt/layers/quantization/marlin_utils_fp8.py) says "
                "weight-only FP8 \"may degrade performance for compute-heavy workloads\": prefill, not the 1-byte "
                "weight reads of decode"]
    return None


def _quant_sites(case: Case) -> list[str]:
    found = _quant_on_gpu(case)
    facts = found[3] if found else {}
    return [facts[k] for k in ("marlin_site", "site", "check") if facts.get(k)]


def _quant_not_native_fix(case: Case) -> Fix:
    found = _quant_on_gpu(case)
    method, _, profile, facts, _ = found
    if facts["refused"]:
        return [], [f"a checkpoint in a format SM{profile.sm} runs (sglang {facts['release']}: "
                    "`python -m kit.doctor.gpu_support` lists each method's capability), or a GPU of SM "
                    f"{facts['min_capability']} or later"], []
    return [], ["for time to first token: a BF16 checkpoint of the model, or a GPU with FP8 tensor cores (SM 8.9+); "
                "for decode at batch 1 the 1-byte weights are an advantage: measure both (notebook 04)"], \
        ["--quantization fp8 on this GPU expecting FP8 matmuls: the tensor cores cannot run them"]


rule(Rule(
    "quantization-not-native-on-gpu", "The quantization does not run natively on this GPU", ">=0.4",
    ("hardware", "version"),
    when=_quant_not_native,
    impact=lambda case: not_estimated(
        "sglang's source decides the kernel path, not its speed: the cost against BF16 on this GPU depends on the "
        "model and the batch", "time to first token",
        "the same launch with a BF16 checkpoint, benchmarked side by side (notebook 04)"),
    fix=_quant_not_native_fix, sites=lambda case: _quant_sites(case),
    affects=("prefill/extend",), covers=lambda case: {"quantization"},
    uses=("args", "model_config", "source")))
