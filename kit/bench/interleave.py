"""Interleaved A/B: two arms measured in alternating blocks, the interval from the blocks' differences.

Two runs measured one after the other put any change in the machine's load between them into B - A,
and a bootstrap over their requests (kit/bench/comparison.py) treats that change as part of the
difference. Here the arms run in short blocks that alternate (A, then pairs AB BA AB ..., or pairs in a
random order): each B block is paired with the A block next to it in time, so slow drift cancels within
a pair and faster drift widens the interval instead of becoming the result.

- **The interval** is Student's t over the pairs' differences d_i = mean(B block i) - mean(A block i)
  (``scipy.stats.t``), with n - 1 degrees of freedom for n pairs.
- **The noise floor (A/A).** The baseline's blocks, compared with each other: a_j = A_{j+1} - A_j over
  consecutive A blocks (the first A block is an extra one, for this). The floor is
  ``t * rms(a) / sqrt(n)``: the mean difference n pairs of the *same* launch could show at the same
  confidence. A difference smaller than the floor is "no change detectable here", whatever its interval.
- **How many blocks.** After ``pilot`` pairs, the pairs needed for an interval half-width of
  ``resolution`` of A's mean, ``(t * s_d / (resolution * mean_A))^2`` (Stein's two-stage idea), bounded
  by ``max_pairs`` and by the time ``budget_s``. The verdict is taken once, at the end, never by
  peeking after each pair.
- **The machine.** The load average and CPU steal (``/proc/loadavg``, ``/proc/stat``) of the machine
  that measures, before and after each block, so the output says when the blocks shared a busy machine.

The arms are callables: ``measure(label) -> BenchRun`` and, where an arm is a launch, ``prepare()``
that relaunches into it (called only when the arm changes).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kit._paths import write_json
from kit.errors import BenchError

from .comparison import Comparison

__all__ = ["Arm", "Block", "Interleaved", "compare_live", "interleaved", "machine_load", "paired_comparison",
           "plan_pairs"]

METRICS = ("decode_tok_s", "ttft_ms")


@dataclass
class Arm:
    """One side of the comparison: how to measure a block of it, and (for a launch) how to switch to it."""

    name: str
    measure: Callable[[str], Any]  # label -> kit.bench.BenchRun
    prepare: Callable[[], Any] | None = None  # relaunch into this arm; None: it is always there (a live server)


@dataclass
class Block:
    """One block as measured: which arm, which pair (0: the extra A block of the A/A floor), its means."""

    arm: str  # "A" or "B"
    pair: int
    run: str | None  # its run file
    values: dict  # metric -> the block's mean (None when no request gave it)
    requests_ok: int
    started: float  # epoch seconds
    seconds: float
    prepare_s: float = 0.0  # time spent relaunching into the arm before the block (0 for a live server)
    load_before: dict = field(default_factory=dict)
    load_after: dict = field(default_factory=dict)


def machine_load() -> dict:
    """This machine's 1-minute load average, its CPU count and its cumulative CPU times (for the steal
    share between two readings), from /proc; {} where /proc does not have them."""
    out: dict = {"cpus": os.cpu_count() or 1}
    try:
        out["load1"] = float(Path("/proc/loadavg").read_text().split()[0])
        with open("/proc/stat") as fh:
            cpu = [int(x) for x in fh.readline().split()[1:]]
        out["cpu_total"], out["cpu_steal"] = sum(cpu[:8]), (cpu[7] if len(cpu) > 7 else 0)
        out["cpu_idle"] = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)
    except (OSError, ValueError, IndexError):
        pass
    return out


def _busy_share(before: dict, after: dict) -> tuple[float | None, float | None]:
    """(busy share, steal share) of all CPU time between two readings."""
    total = after.get("cpu_total", 0) - before.get("cpu_total", 0)
    if total <= 0:
        return None, None
    idle = after.get("cpu_idle", 0) - before.get("cpu_idle", 0)
    steal = after.get("cpu_steal", 0) - before.get("cpu_steal", 0)
    return 1 - idle / total, steal / total


def _t(confidence: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf((1 + confidence) / 2, df))


def paired_comparison(blocks: list[Block], metric: str, *, a: str, b: str, confidence: float = 0.95,
                      min_effect: float = 0.01) -> Comparison:
    """B - A from the blocks: Student's t over the pairs' differences, the A/A floor from the A blocks."""
    import numpy as np

    lower_is_better = metric == "ttft_ms"
    pairs = _pairs(blocks, metric)
    diffs = np.asarray([p["B"] - p["A"] for _, p in sorted(pairs.items()) if "A" in p and "B" in p])
    a_means = [blk.values[metric] for blk in sorted(blocks, key=lambda x: x.started)
               if blk.arm == "A" and blk.values.get(metric) is not None]
    b_means = [blk.values[metric] for blk in blocks if blk.arm == "B" and blk.values.get(metric) is not None]
    if diffs.size < 2:
        raise BenchError(f"{diffs.size} complete pair(s) of blocks with a {metric}: too few for an interval",
                         hint="run at least 2 pairs (better 4+) whose requests succeed")
    mean_a = float(np.mean([p["A"] for p in pairs.values() if "A" in p]))
    diff, sd, n = float(diffs.mean()), float(diffs.std(ddof=1)), int(diffs.size)
    half = _t(confidence, n - 1) * sd / math.sqrt(n)
    aa = np.diff(np.asarray(a_means))
    floor = (_t(confidence, aa.size) * float(np.sqrt(np.mean(aa ** 2))) / math.sqrt(n)) if aa.size else None
    low, high = diff - half, diff + half
    verdict, reason = _verdict(diff, low, high, mean_a, min_effect, floor, lower_is_better)
    unit = "ms" if lower_is_better else "tok/s"
    notes = [f"{n} pairs of blocks, interleaved; the interval is Student's t over the pairs' differences "
             f"(sd {sd:.3g} {unit})"]
    if floor is not None:
        notes.append(f"noise floor (A/A, {aa.size} difference(s) between consecutive A blocks): "
                     f"{floor:.3g} {unit} ({floor / mean_a:.1%} of A)" if mean_a else f"noise floor {floor:.3g}")
    return Comparison(a, b, len(a_means), len(b_means), mean_a, mean_a + diff, diff, low, high, confidence, verdict,
                      reason, min_effect, 0, a_means, b_means, diffs.tolist(), metric,
                      method="interleaved blocks", noise_floor=floor, pairs=n, notes=notes)


def _verdict(diff: float, low: float, high: float, mean_a: float, min_effect: float, floor: float | None,
             lower_is_better: bool) -> tuple[str, str]:
    if low <= 0 <= high:
        return "no change detectable here", "the interval over the pairs contains zero"
    if floor is not None and abs(diff) <= floor:
        return "no change detectable here", (f"the difference ({diff:+.3g}) is within the noise floor of the "
                                             f"same launch against itself (±{floor:.3g})")
    if mean_a and abs(diff) < min_effect * abs(mean_a):
        return "no change detectable here", (f"the difference ({diff / mean_a:+.2%}) is below the "
                                             f"{min_effect:.0%} minimum effect")
    word = "improved" if (diff < 0 if lower_is_better else diff > 0) else "regressed"
    return word, f"the whole interval is {'above' if diff > 0 else 'below'} zero and beyond the noise floor"


def plan_pairs(diffs: list[float], mean_a: float, *, confidence: float, resolution: float, pilot: int,
               max_pairs: int, pair_seconds: float, spent_s: float, budget_s: float | None) -> tuple[int, str]:
    """How many pairs in all, from the pilot's differences: (pairs, why)."""
    import numpy as np

    sd = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else math.inf
    want = resolution * abs(mean_a)
    if not want or not math.isfinite(sd):
        needed = max_pairs
    else:
        needed = math.ceil((_t(confidence, max(1, len(diffs) - 1)) * sd / want) ** 2)
    needed = max(pilot, needed)
    why = (f"the pilot's {len(diffs)} pairs vary by {sd:.3g} (sd): {needed} pairs resolve "
           f"{resolution:.0%} of A's mean")
    pairs = min(needed, max_pairs)
    if pairs < needed:
        why += f"; capped at {max_pairs} pairs"
    if budget_s is not None and pair_seconds > 0:
        fit = pilot + int(max(0.0, budget_s - spent_s) // pair_seconds)
        if fit < pairs:
            pairs = max(pilot, fit)
            why += f"; the budget of {budget_s:g} s holds {pairs} (a pair takes about {pair_seconds:.0f} s)"
    return pairs, why


@dataclass
class Interleaved:
    """The blocks as measured and B - A for each metric (kit.bench.Comparison, method "interleaved blocks")."""

    a: str
    b: str
    blocks: list[Block]
    decode: Comparison | None
    ttft: Comparison | None
    plan: str  # why this many pairs
    seconds: float
    order: str
    notes: list[str] = field(default_factory=list)

    @property
    def relaunches(self) -> int:
        return sum(1 for blk in self.blocks if blk.prepare_s)

    def machine(self) -> str:
        """What the machine was doing: the load average's range, the busiest block, any steal."""
        loads = [x.get("load1") for blk in self.blocks for x in (blk.load_before, blk.load_after)
                 if x.get("load1") is not None]
        if not loads:
            return "the machine's load was not read (no /proc here)"
        cpus = self.blocks[0].load_before.get("cpus", 1)
        shares = [_busy_share(blk.load_before, blk.load_after) for blk in self.blocks]
        steal = max((s for _, s in shares if s is not None), default=None)
        text = f"load average {min(loads):.2f} to {max(loads):.2f} on {cpus} CPU(s) across the blocks"
        if max(loads) > cpus:
            text += " (a busy machine: more runnable work than CPUs during some blocks)"
        if max(loads) - min(loads) > 0.5 * cpus:
            text += "; the load changed between blocks, which interleaving spreads over both arms"
        if steal:
            text += f"; CPU steal up to {steal:.1%} of a block's CPU time"
        return text

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "order": self.order, "plan": self.plan, "seconds": self.seconds,
                "relaunches": self.relaunches, "machine": self.machine(), "notes": list(self.notes),
                "decode": self.decode.to_dict() if self.decode else None,
                "ttft": self.ttft.to_dict() if self.ttft else None,
                "blocks": [asdict(blk) for blk in self.blocks]}

    def to_text(self) -> str:
        lines = [f"A {self.a} and B {self.b}, measured in {len(self.blocks)} interleaved blocks "
                 f"({self.order}; {self.seconds:.0f} s, {self.relaunches} relaunch(es))", f"pairs: {self.plan}"]
        for label, c in (("decode tok/s per request", self.decode), ("time to first token", self.ttft)):
            if c is not None:
                lines += [f"{label}:", *("  " + x for x in c.to_text().splitlines())]
        lines.append(f"the machine: {self.machine()}")
        return "\n".join(lines + self.notes)

    def save(self, path: str | os.PathLike) -> Path:
        return write_json(path, self.to_dict())

    def plot(self):
        from kit.display import ab_comparison

        return ab_comparison(self.decode or self.ttft)

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.to_text())}</pre>"

    def __repr__(self) -> str:
        return f"<Interleaved {self.a} vs {self.b}: {self.decode.verdict if self.decode else '-'}>"


def interleaved(arm_a: Arm, arm_b: Arm, *, pilot: int = 3, max_pairs: int = 10, budget_s: float | None = 600.0,
                resolution: float = 0.05, confidence: float = 0.95, min_effect: float = 0.01,
                order: str = "abba", seed: int = 0, say: Callable[[str], None] | None = None,
                between: Callable[[int], None] | None = None) -> Interleaved:
    """Measure A and B in alternating blocks and compare them (the module's docstring says how).

    ``order``: ``abba`` (pairs AB, BA, AB, ...: a relaunch only every other block where the arms are
    launches) or ``random`` (each pair's order drawn with ``seed``). ``between(k)`` is called before
    block k (tests use it to change the machine's load between blocks)."""
    if order not in ("abba", "random"):
        raise BenchError(f"no block order {order!r}", hint="abba or random")
    if pilot < 2 or max_pairs < pilot:
        raise BenchError(f"pilot {pilot} and max_pairs {max_pairs}: need 2 <= pilot <= max_pairs",
                         hint="e.g. pilot=3, max_pairs=10")
    say = say or (lambda text: None)
    rng = random.Random(seed)
    arms = {"A": arm_a, "B": arm_b}
    state = {"current": None, "k": 0}
    blocks: list[Block] = []
    t0 = time.monotonic()

    def run_block(side: str, pair: int) -> None:
        arm = arms[side]
        if between is not None:
            between(state["k"])
        prep = 0.0
        if arm.prepare is not None and state["current"] != side:
            say(f"block {state['k'] + 1}: relaunching into {side} ({arm.name})")
            p0 = time.monotonic()
            arm.prepare()
            prep = time.monotonic() - p0
        state["current"] = side
        before, started, s0 = machine_load(), time.time(), time.monotonic()
        run = arm.measure(f"{side}{pair}")
        seconds = time.monotonic() - s0
        values = _block_values(run)
        blocks.append(Block(side, pair, getattr(run, "path", None), values, run.totals["ok"], started, seconds,
                            prep, before, machine_load()))
        state["k"] += 1
        say(f"block {state['k']}: {side} ({arm.name}) pair {pair or 'A/A'}: "
            + ", ".join(f"{k} {v:.1f}" for k, v in values.items() if v is not None)
            + f" ({seconds:.0f} s)")

    def run_pair(pair: int) -> None:
        first = ("AB" if pair % 2 else "BA") if order == "abba" else rng.choice(("AB", "BA"))
        if order == "abba" and pair == 1:
            first = "AB"
        for side in first:
            run_block(side, pair)

    run_block("A", 0)
    for pair in range(1, pilot + 1):
        run_pair(pair)
    # the pilot's noise in decode tok/s, or in time to first token where no block had a decode rate
    metric = "decode_tok_s" if _pair_diffs(blocks, "decode_tok_s") else "ttft_ms"
    pilot_diffs = _pair_diffs(blocks, metric)
    mean_a = _mean([blk.values.get(metric) for blk in blocks if blk.arm == "A"])
    spent = time.monotonic() - t0
    pairs, why = plan_pairs(pilot_diffs, mean_a or 0.0, confidence=confidence, resolution=resolution,
                            pilot=pilot, max_pairs=max_pairs, pair_seconds=(spent / (pilot + 0.5)),
                            spent_s=spent, budget_s=budget_s)
    say(f"planned {pairs} pairs: {why}")
    for pair in range(pilot + 1, pairs + 1):
        run_pair(pair)
    result = {}
    for m in METRICS:
        try:
            result[m] = paired_comparison(blocks, m, a=arm_a.name, b=arm_b.name, confidence=confidence,
                                          min_effect=min_effect)
        except BenchError:
            result[m] = None
    if result["decode_tok_s"] is None and result["ttft_ms"] is None:
        raise BenchError(f"no metric had two complete pairs of blocks ({len(blocks)} blocks run)",
                         hint="check that the servers answer and stream tokens (sgl-kit bench URL)")
    return Interleaved(arm_a.name, arm_b.name, blocks, result["decode_tok_s"], result["ttft_ms"], why,
                       time.monotonic() - t0, order)


def compare_live(a: Any, b: Any, *, requests: int = 4, max_tokens: int = 64, concurrency: int = 1,
                 config=None, out_dir: str | os.PathLike | None = None, names: tuple[str, str] | None = None,
                 say: Callable[[str], None] | None = None, warm: bool = True, **options) -> Interleaved:
    """Two live servers (URLs or targets, as :func:`kit.bench.bench` takes them) compared in interleaved
    blocks of ``requests`` each, every block the same prompts after ``POST /flush_cache``. Each block's run
    file, and ``compare.json`` with every block and the result, go to ``out_dir`` (default
    ``runs/compare-<time>/``). ``warm``: each arm runs the block's prompts once, unmeasured, first (its run
    file is ``warm-A.jsonl``/``warm-B.jsonl``). ``options`` go to :func:`interleaved`."""
    from .config import BenchConfig
    from .load import bench

    cfg = config or BenchConfig(requests=requests, max_tokens=max_tokens, concurrency=concurrency, warmup=1)
    folder = Path(out_dir) if out_dir else Path("runs") / f"compare-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    folder.mkdir(parents=True, exist_ok=True)
    names = names or (str(a), str(b))

    unflushed: list[str] = []

    def block(target: Any, label: str):
        # Every block sends the same prompts to an emptied prefix cache: the same prompt lengths (so the same
        # prefill shapes) in both arms, and no block finds its prompts in a cache an earlier one warmed.
        run = bench(target, out=folder / f"{label}.jsonl", config=replace(cfg, flush_cache=True), progress=None)
        if run.cache_flush and run.cache_flush != "flushed":
            unflushed.append(f"block {label}: the prefix cache was {run.cache_flush}")
        return run

    def arm(name: str, target: Any) -> Arm:
        return Arm(name, lambda label: block(target, label))

    if warm:
        # A server's first requests of a prompt length pay for it (allocation, compilation): each arm runs
        # the block's prompts once, unmeasured, before the first block.
        for label, target in (("warm-A", a), ("warm-B", b)):
            block(target, label)
    result = interleaved(arm(names[0], a), arm(names[1], b), say=say, **options)
    if unflushed:
        result.notes.append(f"{unflushed[0]} ({len(unflushed)} block(s) in all): a block may have found its "
                            "prompts cached by the one before, so times to first token may mix warm and cold")
    result.notes.append(f"the blocks' run files and compare.json: {folder}")
    result.save(folder / "compare.json")
    return result


def _block_values(run) -> dict:
    summary = run.summary()
    out = {}
    for m in METRICS:
        value = summary.loc[m, "mean"] if m in summary.index else None
        out[m] = None if value is None or value != value else float(value)
    return out


def _pairs(blocks: list[Block], metric: str) -> dict[int, dict]:
    """Each pair's block means by arm ({pair: {"A": mean, "B": mean}}); the extra A block (pair 0) left out."""
    pairs: dict[int, dict] = {}
    for blk in blocks:
        if blk.pair > 0 and blk.values.get(metric) is not None:
            pairs.setdefault(blk.pair, {})[blk.arm] = blk.values[metric]
    return pairs


def _pair_diffs(blocks: list[Block], metric: str) -> list[float]:
    return [p["B"] - p["A"] for _, p in sorted(_pairs(blocks, metric).items()) if "A" in p and "B" in p]


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None
