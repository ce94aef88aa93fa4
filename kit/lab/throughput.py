"""The lab's throughput model: how long each forward takes and how many tokens it yields.

A scenario (``kit/data/scenarios/<name>.yaml``) holds the parameters and says where each
comes from. :func:`throughput_model` turns a scenario and a server's *effective* arguments (the
ones SGLang resolved, not the flags typed) into a :class:`ThroughputModel`, so the speed follows
what the server would really run: speculative steps, and whether piecewise CUDA graphs
stayed on.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError

__all__ = ["SCENARIO_ENV", "Scenario", "ThroughputModel", "load_scenario", "scenario_names", "throughput_model"]

SCENARIO_ENV = "SGL_KIT_LAB_SCENARIO"
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

    spec = name_or_path or os.environ.get(SCENARIO_ENV) or DEFAULT_SCENARIO
    path = Path(spec) if spec.endswith((".yaml", ".yml", ".json")) else _SCENARIOS / f"{spec}.yaml"
    if not path.is_file():
        raise KitError(f"no lab scenario {spec!r} (looked for {path})",
                       hint=f"use one of {', '.join(scenario_names())}, or a path to a scenario file")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "decode" not in data or "prefill" not in data:
        raise KitError(f"{path} is not a lab scenario: it needs `decode` and `prefill` sections",
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
    piecewise_cuda_graph: bool
    cuda_graph: bool

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
        base = self.prefill_base_s + self.prefill_per_token_s * max(0, new_tokens)
        return base * self.batch_factor(running) * self._noise(rng)

    def _noise(self, rng: random.Random) -> float:
        if not self.jitter:
            return 1.0
        # Log-normal with mean 1, so jitter never changes the modelled average.
        return math.exp(rng.gauss(-0.5 * self.jitter**2, self.jitter))


def throughput_model(scenario: Scenario, args: Mapping[str, Any]) -> ThroughputModel:
    """The speed of a server that runs with these effective arguments."""
    dec, pre = scenario.params["decode"], scenario.params["prefill"]
    piecewise = not bool(args.get("disable_piecewise_cuda_graph", False))
    cuda_graph = not bool(args.get("disable_cuda_graph", False))
    steps = int(args.get("speculative_num_steps") or 0) if args.get("speculative_algorithm") else 0
    if steps:
        on_off = ("piecewise_cuda_graph_on", "piecewise_cuda_graph_off")
        round_s = _on_off(dec["target_verify_ms"], piecewise, *on_off) + steps * float(dec["draft_step_ms"])
    else:
        round_s = _on_off(dec["plain_decode_ms"], cuda_graph, "cuda_graph", "eager")
    first, decay = float(dec["first_draft_accept"]), float(dec["accept_decay"])
    probs = tuple(first * decay**i for i in range(steps))
    on_off = ("piecewise_cuda_graph_on", "piecewise_cuda_graph_off")
    return ThroughputModel(
        round_s=round_s / 1e3,
        steps=steps,
        draft_tokens=int(args.get("speculative_num_draft_tokens") or (steps + 1 if steps else 0)),
        accept_probs=probs,
        jitter=float(dec.get("jitter", 0.0)),
        batch_slowdown=float(dec.get("batch_slowdown", 0.0)),
        prefill_base_s=_on_off(pre["base_ms"], piecewise, *on_off) / 1e3,
        prefill_per_token_s=_on_off(pre["ms_per_token"], piecewise, *on_off) / 1e3,
        max_running=_max_running(dec, args),
        piecewise_cuda_graph=piecewise,
        cuda_graph=cuda_graph,
    )


def _max_running(dec: Mapping[str, Any], args: Mapping[str, Any]) -> int:
    """The cap on running requests: the scenario's override, the args' value, else its default."""
    if dec.get("max_running_requests"):
        return int(dec["max_running_requests"])
    value = args.get("max_running_requests")
    if isinstance(value, int) and value > 0:
        return value
    return int(dec.get("default_max_running_requests") or 256)
