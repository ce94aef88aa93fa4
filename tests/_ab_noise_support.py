"""A/A comparisons under load that changes on purpose: the same server as both arms, with a CPU burner
started and stopped between blocks (or between the two runs of a sequential comparison), and the
verdicts counted. Shared by tests/test_bench_interleave.py and benchmarks/ab_noise.py.

A verdict (improved or regressed) on an A/A comparison is false by construction: both arms are the same
server. Each trial draws its burner schedule from its own seed, so a failing trial can be run again.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kit.bench import compare, compare_live
from kit.bench.config import BenchConfig
from kit.errors import BenchError

FALSE = ("improved", "regressed")


class Burner:
    """``n`` processes that spin on a CPU each, started and stopped on demand; always stopped at exit."""

    def __init__(self, n: int = 2) -> None:
        self.n, self.procs = n, []

    @property
    def on(self) -> bool:
        return bool(self.procs)

    def set(self, on: bool) -> None:
        if on and not self.procs:
            self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        elif not on and self.procs:
            for p in self.procs:
                p.kill()
            for p in self.procs:
                p.wait(timeout=10)
            self.procs = []

    def __enter__(self) -> Burner:
        return self

    def __exit__(self, *exc) -> None:
        self.set(False)


def schedule(seed: int, blocks: int, *, alternate: bool = False) -> list[bool]:
    """The burner's state before each block: it changes at about half the block boundaries (drawn from
    ``seed``), or, with ``alternate``, at every one (on for every other block, from the second)."""
    if alternate:
        return [k % 2 == 1 for k in range(blocks)]
    rng = random.Random(seed)
    state, out = rng.random() < 0.5, []
    for _ in range(blocks):
        out.append(state)
        if rng.random() < 0.5:
            state = not state
    return out


@dataclass
class Trial:
    method: str
    decode: str
    ttft: str
    burner: list = field(default_factory=list)

    @property
    def false_verdicts(self) -> list[str]:
        return [m for m, v in (("decode", self.decode), ("ttft", self.ttft)) if v in FALSE]


def interleaved_trial(url_a: str, url_b: str, seed: int, out: Path, burner: Burner | None, *, requests: int = 3,
                      max_tokens: int = 16, input_len: int = 32, alternate: bool = False,
                      **options) -> tuple[Trial, object]:
    """One comparison in interleaved blocks, the burner set before each block by the schedule (no burner:
    a quiet machine)."""
    plan = schedule(seed, 64, alternate=alternate) if burner is not None else [False] * 64
    seen = []

    def between(k: int) -> None:
        if burner is not None:
            burner.set(plan[k])
        seen.append(plan[k])

    # No warm-up request per block: both arms are servers that keep running (nothing is relaunched).
    cfg = BenchConfig(requests=requests, max_tokens=max_tokens, input_len=input_len, warmup=0, seed=seed * 1000,
                      server_metrics_interval=0)
    result = compare_live(url_a, url_b, config=cfg, out_dir=out, between=between, **options)
    if burner is not None:
        burner.set(False)
    return Trial("interleaved", _word(result.decode), _word(result.ttft), seen), result


def sequential_trial(url_a: str, url_b: str, seed: int, out: Path, burner: Burner, *, requests: int = 10,
                     max_tokens: int = 16, input_len: int = 32) -> tuple[Trial, object]:
    """Two runs one after the other, as `sgl-kit bench compare A.jsonl B.jsonl` compares them; the burner's
    state may change between them (by the same schedule as the blocks)."""
    from kit.bench import bench

    plan = schedule(seed, 2)
    runs = []
    for k, url in enumerate((url_a, url_b)):
        burner.set(plan[k])
        cfg = BenchConfig(requests=requests, max_tokens=max_tokens, input_len=input_len, warmup=1,
                          seed=seed * 1000 + k, server_metrics_interval=0)
        runs.append(bench(url, out=out / f"{'AB'[k]}.jsonl", config=cfg, progress=None))
    burner.set(False)
    decode, ttft = _or_none(compare, *runs), _or_none(compare, *runs, metric="ttft_ms")
    return Trial("sequential", _word(decode), _word(ttft), plan), (decode, ttft)


def _or_none(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except BenchError:  # too few requests with the metric (a decode that arrived in one read)
        return None


def _word(c) -> str:
    return c.verdict if c is not None else "not measured"


def false_rate(trials: list[Trial]) -> tuple[int, int]:
    """(trials with a false verdict on either metric, trials)."""
    return sum(1 for t in trials if t.false_verdicts), len(trials)


def timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - t0
