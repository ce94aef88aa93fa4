"""The lab's throughput model: how long each forward takes and how many tokens it yields.

A scenario (``kit/data/scenarios/<name>.yaml``) holds the parameters and says where each
comes from. :func:`throughput_model` turns a scenario and a server's *effective* arguments (the
ones SGLang resolved, not the flags typed) into a :class:`ThroughputModel`, so the speed follows
what the server would really run, by sglang's own mechanisms: speculative steps and the decode
CUDA graph set the round (verify runs in the decode graph); the prefill (piecewise) graph sets
prefill time only; custom all-reduce against NCCL sets the all-reduce time of each forward, when
the scenario models it (an ``allreduce`` section).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError, LabError

__all__ = ["MACHINE_ENV", "SCENARIO_ENV", "Scenario", "machine_fixes", "ThroughputModel", "allreduce_ms", "custom_all_reduce_on", "load_scenario",
           "custom_all_reduce_runs", "prefill_replay", "scenario_names",
           "throughput_model"]

SCENARIO_ENV = "SGL_KIT_LAB_SCENARIO"
# Changes to the machine the lab stands in for (comma-separated keys of the scenario's
# ``machine.fixes``, e.g. ``p2p-unavailable``): a BIOS or driver change cannot happen here.
MACHINE_ENV = "SGL_KIT_LAB_MACHINE"
DEFAULT_SCENARIO = "incident"
_SCENARIOS = Path(__file__).resolve().parent.parent / "data" / "scenarios"


@dataclass(frozen=True)
class Scenario:
    """A scenario file, as loaded: its name, title, notice and raw parameters."""

    name: str
    title: str
    notice: str
    params: Mapping[str, Any]
    path: str

    def __repr__(self) -> str:
        return f"<Scenario {self.name}: {self.title}>"

    @property
    def calibration(self) -> Mapping[str, Any]:
        return self.params.get("calibration") or {}


def scenario_names() -> list[str]:
    return sorted(p.stem for p in _SCENARIOS.glob("*.yaml"))


def load_scenario(name_or_path: str | None = None) -> Scenario:
    """A scenario by name (``incident``), by path, or from ``$SGL_KIT_LAB_SCENARIO``."""
    import yaml

    from kit._data import load_yaml

    spec = name_or_path or os.environ.get(SCENARIO_ENV) or DEFAULT_SCENARIO
    path = Path(spec) if spec.endswith((".yaml", ".yml", ".json")) else _SCENARIOS / f"{spec}.yaml"
    if not path.is_file():
        raise LabError(f"no lab scenario {spec!r} (looked for {path})",
                       hint=f"use one of {', '.join(scenario_names())}, or a path to a scenario file")
    # the kit's own scenarios with libyaml; a user's file with the loader whose errors people know
    data = load_yaml(path) if path.parent == _SCENARIOS else yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "decode" not in data or "prefill" not in data:
        raise LabError(f"{path} is not a lab scenario: it needs `decode` and `prefill` sections",
                       hint="copy kit/data/scenarios/incident.yaml and change its numbers")
    return Scenario(str(data.get("name", path.stem)), str(data.get("title", "")),
                    str(data.get("notice", "")).strip(), data, str(path))


def _on_off(table: Mapping[str, float], on: bool, on_key: str, off_key: str) -> float:
    return float(table[on_key] if on else table[off_key])


@dataclass(frozen=True)
class ThroughputModel:
    """Forward times (seconds) and acceptance for one server configuration."""

    round_s: float          # one decode step or speculative round at batch 1
    steps: int              # speculative draft steps per round; 0 without speculative decoding
    draft_tokens: int       # speculative_num_draft_tokens (for spec_proposed_drafts)
    accept_probs: tuple[float, ...]
    jitter: float
    batch_slowdown: float
    prefill_base_s: float
    prefill_per_token_s: float
    max_running: int
    piecewise_cuda_graph: bool  # captured at startup (not turned off)
    cuda_graph: bool
    # With speculative decoding, the extend batch also runs the draft model over the prompt (its
    # "draft prefill") before the first token is streamed; the step count does not enter it.
    draft_extend_base_s: float = 0.0
    draft_extend_per_token_s: float = 0.0
    # Whether the captured prefill graph runs for the target's prefill batches: sglang's own gate decides
    # (kit.provenance.gates, evaluated for the launch when the server starts); None when it was not read.
    prefill_graph_replays: bool | None = None

    @property
    def prefill_in_graph(self) -> bool:
        """Prefill batches run in the prefill graph: it is captured and its gate does not refuse them."""
        return self.piecewise_cuda_graph and self.prefill_graph_replays is not False

    def __repr__(self) -> str:
        return (f"<ThroughputModel {self.expected_tok_s():.1f} tok/s per stream at batch 1: round "
                f"{self.round_s * 1e3:.1f} ms, {self.steps} steps, "
                f"{self.mean_tokens_per_round():.2f} tokens/round>")

    @property
    def speculative(self) -> bool:
        return self.steps > 0

    def mean_tokens_per_round(self) -> float:
        total, chain = 1.0, 1.0
        for p in self.accept_probs:
            chain *= p
            total += chain
        return total

    def expected_tok_s(self, running: int = 1) -> float:
        """Mean decode tok/s of one stream while ``running`` requests decode together."""
        return self.mean_tokens_per_round() / (self.round_s * self.batch_factor(running))

    def batch_factor(self, running: int) -> float:
        return 1.0 + self.batch_slowdown * max(0, running - 1)

    def round_time(self, rng: random.Random, running: int) -> float:
        return self.round_s * self.batch_factor(running) * self._noise(rng)

    def accepted(self, rng: random.Random) -> int:
        """Tokens one round yields: 1 plus the draft tokens accepted before the first rejection."""
        tokens = 1
        for p in self.accept_probs:
            if rng.random() >= p:
                break
            tokens += 1
        return tokens

    def prefill_time(self, rng: random.Random, new_tokens: int, running: int) -> float:
        """Time from admission to the first token: the target's prefill (which samples that token),
        then, with speculative decoding, the draft model's extend over the same tokens. sglang 0.5.11
        streams the token after both (speculative/eagle_worker_v2.py:701-725, forward_batch_generation
        runs target prefill then _draft_extend_for_prefill; managers/scheduler.py:1535-1584 then
        launches the next batch and processes this one's result: process_batch_result_prefill calls
        stream_output, managers/scheduler_output_processor_mixin.py:133-347), so no draft step or
        verify of the first round is in it."""
        tokens = max(0, new_tokens)
        base = self.prefill_base_s + self.prefill_per_token_s * tokens
        if self.steps:
            base += self.draft_extend_base_s + self.draft_extend_per_token_s * tokens
        return base * self.batch_factor(running) * self._noise(rng)

    def _noise(self, rng: random.Random) -> float:
        if not self.jitter:
            return 1.0
        # Log-normal with mean 1, so jitter never changes the modelled average.
        return math.exp(rng.gauss(-0.5 * self.jitter**2, self.jitter))


def throughput_model(scenario: Scenario, args: Mapping[str, Any], prefill_replays: bool | None = None,
                     custom_all_reduce: bool | None = None) -> ThroughputModel:
    """The speed of a server that runs with these effective arguments. ``prefill_replays``: whether the
    prefill graph's gate lets the target's prefill batches replay it (False: captured, never replayed,
    so prefill runs eagerly; see prefill_replay)."""
    dec, pre = scenario.params["decode"], scenario.params["prefill"]
    piecewise = not bool(args.get("disable_piecewise_cuda_graph", False))
    in_graph = piecewise and prefill_replays is not False
    cuda_graph = not bool(args.get("disable_cuda_graph", False))
    steps = int(args.get("speculative_num_steps") or 0) if args.get("speculative_algorithm") else 0
    graph = ("cuda_graph", "eager")
    if steps:
        # Verify (TARGET_VERIFY) runs in the decode graph, never in the piecewise one.
        round_s = _on_off(dec["target_verify_ms"], cuda_graph, *graph) + steps * float(dec["draft_step_ms"])
    else:
        round_s = _on_off(dec["plain_decode_ms"], cuda_graph, *graph)
    round_s += allreduce_ms(scenario, args, steps, custom_all_reduce)
    first, decay = float(dec["first_draft_accept"]), float(dec["accept_decay"])
    probs = tuple(first * decay**i for i in range(steps))
    on_off = ("piecewise_cuda_graph_on", "piecewise_cuda_graph_off")
    per_token = _on_off(pre["ms_per_token"], in_graph, *on_off)
    extend = pre.get("draft_extend") or {}
    return ThroughputModel(
        round_s=round_s / 1e3,
        steps=steps,
        draft_tokens=int(args.get("speculative_num_draft_tokens") or (steps + 1 if steps else 0)),
        accept_probs=probs,
        jitter=float(dec.get("jitter", 0.0)),
        batch_slowdown=float(dec.get("batch_slowdown", 0.0)),
        prefill_base_s=_on_off(pre["base_ms"], in_graph, *on_off) / 1e3,
        prefill_per_token_s=per_token / 1e3,
        max_running=_max_running(dec, args),
        piecewise_cuda_graph=piecewise,
        cuda_graph=cuda_graph,
        draft_extend_base_s=float(extend.get("base_ms", 0.0)) / 1e3 if steps else 0.0,
        draft_extend_per_token_s=per_token * float(extend.get("compute_share", 0.0)) / 1e3 if steps else 0.0,
        prefill_graph_replays=prefill_replays,
    )


def machine_facts(scenario: Scenario) -> dict[str, Any]:
    """What the scenario's machine (as found, or after its applied fixes) says for sglang's checks: peer
    access, NVLink between every pair of GPUs (its topo's links), one node."""
    section = scenario.params.get("allreduce") or {}
    p2p = bool(section.get("p2p", True))
    for fix in machine_fixes(scenario):
        p2p = bool(fix.get("allreduce_p2p", p2p))
    topo = (scenario.params.get("machine") or {}).get("topo") or ""
    rows = [line.split("\t") for line in topo.splitlines() if line.startswith("GPU")]
    links = [cell.strip() for row in rows for cell in row[1:len(rows) + 1] if cell.strip() and cell.strip() != "X"]
    return {"p2p": p2p, "full_nvlink": all(x.startswith("NV") for x in links) if links else None, "same_node": True}


def custom_all_reduce_runs(package_dir: str, scenario: Scenario, args: Mapping[str, Any]) -> bool | None:
    """Whether sglang's custom all-reduce runs for this launch on the scenario's machine, read from
    sglang's own checks (kit.provenance.gates); None when they cannot be read or do not decide."""
    from kit.hosts import LocalHost
    from kit.provenance.gates import gate_chain
    from kit.source import SourceTree

    if int(args.get("tp_size") or 1) < 2:
        return False
    try:
        chain = gate_chain(SourceTree.at(LocalHost(), package_dir), "custom-all-reduce", dict(args), None,
                           facts=machine_facts(scenario), probes=_PROBES["nvidia"])
    except KitError:
        return None
    if chain.blocking is not None:
        return False
    return True if chain.read and not chain.undecided else None


_PROBES = {"nvidia": {"is_cuda": True, "is_hip": False, "is_npu": False, "is_cpu": False, "is_xpu": False,
                      "is_mps": False},
           "amd": {"is_cuda": False, "is_hip": True, "is_npu": False, "is_cpu": False, "is_xpu": False,
                   "is_mps": False}}


def prefill_replay(package_dir: str, args: Mapping[str, Any], model_config: Mapping | None,
                   gpu_vendor: str = "nvidia"):
    """Whether sglang's prefill graph would replay for this launch's text prefill batches, read by
    kit.provenance.gates from the sglang source at ``package_dir``: (replays, the chain). The stand-in
    has no model object: the setup checks that read the loaded model stay unknown and are taken to pass;
    every check the arguments decide is read. (None, None) when the source cannot be read."""
    from kit.hosts import LocalHost
    from kit.provenance.gates import gate_chain
    from kit.source import SourceTree

    try:
        tree = SourceTree.at(LocalHost(), package_dir)
        chain = gate_chain(tree, "prefill-graph", dict(args), dict(model_config or {}) or None,
                           probes=_PROBES[gpu_vendor])
    except KitError:
        return None, None
    if not chain.read:
        return None, chain
    gate = [s for s in chain.steps if s.stage == "gate"]
    return not any(s.verdict == "refuses" for s in gate), chain


def machine_fixes(scenario: Scenario, applied: str | None = None) -> list[Mapping[str, Any]]:
    """The scenario's machine fixes that are applied (``applied``, else ``$SGL_KIT_LAB_MACHINE``)."""
    names = [n.strip() for n in (os.environ.get(MACHINE_ENV, "") if applied is None else applied).split(",")
             if n.strip()]
    known = (scenario.params.get("machine") or {}).get("fixes") or {}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise LabError(f"the lab scenario {scenario.name!r} has no machine fix {', '.join(unknown)}",
                       hint=f"its machine fixes: {', '.join(known) or '(none)'}")
    return [known[n] for n in names]


def custom_all_reduce_on(scenario: Scenario, args: Mapping[str, Any]) -> bool:
    """Whether sglang's custom all-reduce runs: not disabled by the flag, tp > 1, and the scenario's
    GPUs pass its P2P check (custom_all_reduce_utils.py:474-480 turns it off at startup otherwise),
    as found or after a machine fix that enables peer access."""
    section = scenario.params.get("allreduce") or {}
    tp = int(args.get("tp_size") or 1)
    p2p = bool(section.get("p2p", True))
    for fix in machine_fixes(scenario):
        p2p = bool(fix.get("allreduce_p2p", p2p))
    return tp > 1 and not args.get("disable_custom_all_reduce") and p2p


def allreduce_ms(scenario: Scenario, args: Mapping[str, Any], steps: int, custom: bool | None = None) -> float:
    """The all-reduce time of one round (0 when the scenario does not model it): each forward
    all-reduces a fixed number of times, at the custom kernel's or NCCL's latency. ``custom``: whether
    sglang's custom all-reduce runs, as its gate chain says (custom_all_reduce_runs); None: the
    scenario's own view (custom_all_reduce_on)."""
    section = scenario.params.get("allreduce")
    if not section or int(args.get("tp_size") or 1) < 2:
        return 0.0
    count = int(section["per_verify"]) + steps * int(section.get("per_draft", 0))
    on = custom_all_reduce_on(scenario, args) if custom is None else custom
    latency = float(section["custom_us"] if on else section["nccl_us"])
    return count * latency / 1e3


def _max_running(dec: Mapping[str, Any], args: Mapping[str, Any]) -> int:
    """The cap on running requests: the scenario's override, the args' value, else its default."""
    if dec.get("max_running_requests"):
        return int(dec["max_running_requests"])
    value = args.get("max_running_requests")
    if isinstance(value, int) and value > 0:
        return value
    return int(dec.get("default_max_running_requests") or 256)
