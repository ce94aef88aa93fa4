"""A/B comparison of two runs: ``compare`` puts a bootstrap confidence interval on B - A in mean decode tok/s."""

from __future__ import annotations

import html
import math
import os
from dataclasses import asdict, dataclass, field

from kit.errors import BenchError

from .results import BenchRun

__all__ = ["SEQUENTIAL_NOTE", "Comparison", "compare"]


@dataclass
class Comparison:
    """B against A: the difference in mean per-request decode tok/s with a bootstrap CI."""

    a: str
    b: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a, tok/s
    ci_low: float
    ci_high: float
    confidence: float
    verdict: str  # improved | regressed | no significant change
    reason: str
    min_effect: float
    resamples: int
    rates_a: list = field(default_factory=list, repr=False)
    rates_b: list = field(default_factory=list, repr=False)
    boot_diffs: list = field(default_factory=list, repr=False)
    metric: str = "decode_tok_s"  # or "ttft_ms": time to first token, where lower is better
    # "sequential runs": two runs one after the other, a bootstrap over their requests; "interleaved blocks":
    # kit/bench/interleave.py, Student's t over paired blocks (rates_a/rates_b are then block means,
    # boot_diffs the pairs' differences)
    method: str = "sequential runs"
    noise_floor: float | None = None  # the A/A floor (interleaved blocks only)
    pairs: int | None = None
    notes: list = field(default_factory=list)

    @property
    def unit(self) -> str:
        return "ms" if self.metric == "ttft_ms" else "tok/s"

    @property
    def rel_diff(self) -> float:
        return self.diff / self.mean_a if self.mean_a else math.nan

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("rates_a", "rates_b", "boot_diffs"):
            d.pop(key)
        if self.method == "interleaved blocks":
            d["block_means_a"], d["block_means_b"], d["pair_diffs"] = self.rates_a, self.rates_b, self.boot_diffs
        d["rel_diff"] = self.rel_diff
        return d

    def to_text(self) -> str:
        pct = self.confidence * 100
        u = self.unit
        what = "blocks" if self.method == "interleaved blocks" else "n"
        text = (f"A {self.a}: {self.mean_a:.3f} {u} ({what}={self.n_a})\n"
                f"B {self.b}: {self.mean_b:.3f} {u} ({what}={self.n_b})\n"
                f"B - A: {self.diff:+.3f} {u} ({self.rel_diff:+.2%}), {pct:g}% CI "
                f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}]\n"
                f"verdict: {self.verdict} ({self.reason})")
        return "\n".join([text, *self.notes])

    def plot(self):
        from kit.display import ab_comparison

        return ab_comparison(self)

    def __repr__(self) -> str:
        return (f"<Comparison {self.verdict}: B-A {self.diff:+.3f} tok/s ({self.rel_diff:+.2%}), "
                f"{self.confidence:.0%} CI [{self.ci_low:+.3f}, {self.ci_high:+.3f}]>")

    def _repr_html_(self) -> str:
        colour = {"improved": "#2e7d32", "regressed": "#c62828"}.get(self.verdict, "#555")
        body = html.escape(self.to_text()).replace("\n", "<br>")
        return f"<div style='border-left:4px solid {colour};padding-left:8px'>{body}</div>"


def compare(a: BenchRun | str | os.PathLike, b: BenchRun | str | os.PathLike, *, confidence: float = 0.95,
            resamples: int = 10_000, min_effect: float = 0.01, seed: int = 0,
            metric: str = "decode_tok_s") -> Comparison:
    """Is B faster than A? Bootstrap CI on mean_b - mean_a of per-request decode tok/s (or, with
    ``metric="ttft_ms"``, of time to first token, where a lower B is the improvement).

    The verdict is ``improved`` or ``regressed`` only when the interval excludes zero *and*
    the difference is at least ``min_effect`` of A's mean (default 1%, about what a client
    can resolve); otherwise ``no significant change``, with the reason.
    """
    import numpy as np

    run_a, run_b = (r if isinstance(r, BenchRun) else BenchRun.load(r) for r in (a, b))
    if metric not in ("decode_tok_s", "ttft_ms"):
        raise BenchError(f"no metric {metric!r} to compare", hint="decode_tok_s or ttft_ms")

    def value(x):
        return x.decode_tok_s if metric == "decode_tok_s" else (x.ttft_s * 1e3 if x.ttft_s is not None else None)

    rates_a, rates_b = (np.asarray([value(x) for x in r.results if x.ok and value(x) is not None])
                        for r in (run_a, run_b))
    for run, rates in ((run_a, rates_a), (run_b, rates_b)):
        if rates.size < 2:
            raise BenchError(f"run {run.name} has {rates.size} successful request(s) with a decode rate",
                             hint="compare runs with at least 2 (better 30+) successful requests")
    if not 0 < confidence < 1:
        raise BenchError(f"confidence must be between 0 and 1, not {confidence}", hint="e.g. 0.95")
    diffs = _bootstrap_diffs(rates_a, rates_b, resamples, np.random.default_rng(seed))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    diff = float(rates_b.mean() - rates_a.mean())
    verdict, reason = _verdict(diff, float(low), float(high), float(rates_a.mean()), min_effect,
                               lower_is_better=metric == "ttft_ms")
    return Comparison(run_a.name, run_b.name, int(rates_a.size), int(rates_b.size), float(rates_a.mean()),
                      float(rates_b.mean()), diff, float(low), float(high), confidence, verdict, reason,
                      min_effect, resamples, rates_a.tolist(), rates_b.tolist(), diffs.tolist(), metric,
                      notes=[SEQUENTIAL_NOTE])


# What a comparison of two finished runs cannot tell apart, said with each one.
SEQUENTIAL_NOTE = ("(two runs measured one after the other: a change in the machine's load between them reads as a "
                   "difference; to compare live servers in interleaved blocks, with a noise floor: "
                   "sgl-kit bench compare URL_A URL_B)")


def _bootstrap_diffs(a, b, resamples: int, rng):
    """Resample each run independently, in blocks so memory stays small."""
    import numpy as np

    out = np.empty(resamples)
    block = max(1, 2_000_000 // max(a.size, b.size))
    for start in range(0, resamples, block):
        n = min(block, resamples - start)
        mean_a = a[rng.integers(0, a.size, (n, a.size))].mean(axis=1)
        mean_b = b[rng.integers(0, b.size, (n, b.size))].mean(axis=1)
        out[start:start + n] = mean_b - mean_a
    return out


def _verdict(diff: float, low: float, high: float, mean_a: float, min_effect: float,
             lower_is_better: bool = False) -> tuple[str, str]:
    if low <= 0 <= high:
        return "no significant change", "the confidence interval contains zero"
    if abs(diff) < min_effect * mean_a:
        return "no significant change", (f"the interval excludes zero but the difference ({diff / mean_a:+.2%}) "
                                         f"is below the {min_effect:.0%} minimum effect")
    word = "improved" if (diff < 0 if lower_is_better else diff > 0) else "regressed"
    return word, f"the whole interval is {'above' if diff > 0 else 'below'} zero"
