"""`sgl-kit bench` and `sgl-kit bench compare` on two real launches of the real sglang 0.5.11 CPU server.

A server of the test's own (``own_real_server``, tests/_real_server_support.py) is benched as it runs,
relaunched through the kit (`sgl-kit lab restart -- FLAGS`) with a smaller chunked prefill, benched
again, and the two runs compared. What the kit counts is checked against what each server counts itself (its
`sglang:generation_tokens_total` and `sglang:prompt_tokens_total`, which restart from zero with
the new process), and the verdict against its own interval.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _real_server_support import START_TIMEOUT, metric_total

from kit.bench import BenchRun
from kit.lab.real import default_flags

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) * 2 + 600)]
REQUESTS, MAX_TOKENS = 6, 32


def _counts(url: str) -> tuple[float, float]:
    return metric_total(url, "sglang:generation_tokens_total"), metric_total(url, "sglang:prompt_tokens_total")


def _kit(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kit.cli", *argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def _bench(url: str, out) -> tuple[BenchRun, tuple[float, float]]:
    """One CLI run, and the server's own token counts over it."""
    before = _counts(url)
    _kit("bench", url, "-n", str(REQUESTS), "--max-tokens", str(MAX_TOKENS), "--input-len", "16", "--warmup", "0",
         "--out", str(out))
    after = _counts(url)
    return BenchRun.load(out), (after[0] - before[0], after[1] - before[1])


def test_bench_compare_of_two_real_launches(own_real_server, tmp_path):
    mine = own_real_server
    run_a, counted_a = _bench(mine.url, tmp_path / "a.jsonl")
    flags = [*default_flags(), "--chunked-prefill-size", "64"]
    _kit("lab", "restart", "--dir", mine.lab_dir, "--wait", str(int(START_TIMEOUT)), "--", *flags,
         timeout=START_TIMEOUT + 120)
    relaunched = mine.server()
    assert relaunched.server_info()["chunked_prefill_size"] == 64  # the second launch is what runs
    run_b, counted_b = _bench(mine.url, tmp_path / "b.jsonl")
    for run, (gen, prompt) in ((run_a, counted_a), (run_b, counted_b)):
        ok = [r for r in run.results if r.ok]
        assert len(ok) == REQUESTS and all(r.count_source == "server" for r in ok)
        # the kit's counts are the server's: each request's own meta_info, and the server's counters
        assert {r.output_tokens for r in ok} == {MAX_TOKENS}
        assert gen == sum(r.output_tokens for r in run.results) == run.totals["output_tokens"]
        assert prompt == sum(r.prompt_tokens for r in run.results)
    proc = _kit("bench", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--json")
    c = json.loads(proc.stdout)
    # a request whose decode tokens arrived at once (2 shared cores: the client reads late) has no rate, and
    # says why; the comparison is over the others
    for run in (run_a, run_b):
        assert all((r.decode_tok_s is None) == bool(r.decode_note) for r in run.results if r.ok)
    rates_a = [r.decode_tok_s for r in run_a.results if r.ok and r.decode_tok_s is not None]
    rates_b = [r.decode_tok_s for r in run_b.results if r.ok and r.decode_tok_s is not None]
    assert (c["n_a"], c["n_b"]) == (len(rates_a), len(rates_b))
    assert c["mean_a"] == pytest.approx(sum(rates_a) / len(rates_a))
    assert c["mean_b"] == pytest.approx(sum(rates_b) / len(rates_b))
    assert c["diff"] == pytest.approx(c["mean_b"] - c["mean_a"]) and c["ci_low"] <= c["ci_high"]
    # the verdict follows its interval: no speedup claimed inside the noise
    if c["ci_low"] <= 0 <= c["ci_high"]:
        assert c["verdict"] == "no significant change"
    else:
        assert c["verdict"] == ("improved" if c["ci_low"] > 0 else "regressed") or "minimum effect" in c["reason"]
    text = _kit("bench", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")).stdout
    assert f"verdict: {c['verdict']}" in text and f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]" in text
    print(f"bench compare on two real launches: A {c['mean_a']:.1f} tok/s, B {c['mean_b']:.1f} tok/s, "
          f"B-A {c['diff']:+.1f} [{c['ci_low']:+.1f}, {c['ci_high']:+.1f}]: {c['verdict']}; server counted "
          f"{counted_a[0]:.0f}/{counted_b[0]:.0f} generated and {counted_a[1]:.0f}/{counted_b[1]:.0f} prompt tokens, "
          f"the kit {run_a.totals['output_tokens']}/{run_b.totals['output_tokens']} and "
          f"{sum(r.prompt_tokens for r in run_a.results)}/{sum(r.prompt_tokens for r in run_b.results)}")
