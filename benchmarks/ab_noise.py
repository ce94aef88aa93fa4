"""A/A false verdicts under changing load: today's sequential compare against the interleaved one.

Both arms of every comparison are the *same* server, so any verdict (improved or regressed) is false.
A CPU burner (one process spinning on a core) is started and stopped at random block boundaries, by a
schedule drawn from each trial's seed; the sequential comparison's two runs get the same schedule (its
state may change between them). Printed side by side, on the same machine in one run:

- the lab's stand-in (its fast ``loadtest`` scenario, a thread of this process);
- PyPI's sglang 0.5.11 on CPU with a tiny Qwen3 (the kit's real-server environment, built on first use);
- then a real difference, three times: the default CPU launch against one with 16-token prefill chunks,
  on 200-word prompts (slower to the first token; decode unchanged).

    .venv/bin/python benchmarks/ab_noise.py [--trials 20] [--skip-real]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from _ab_noise_support import Burner, false_rate, interleaved_trial, sequential_trial  # noqa: E402
from _lab_support import AppServer, free_port, variant_fields  # noqa: E402


def trials(url: str, n: int, work: Path, *, max_tokens: int, seed0: int) -> dict:
    inter, seq, t_inter, t_seq = [], [], 0.0, 0.0
    with Burner(1) as burner:
        for k in range(n):
            t0 = time.monotonic()
            inter.append(interleaved_trial(url, url, seed0 + k, work / f"i{k}", burner, requests=2,
                                           max_tokens=max_tokens, input_len=16)[0])
            t1 = time.monotonic()
            seq.append(sequential_trial(url, url, seed0 + k, work / f"s{k}", burner, requests=5,
                                        max_tokens=max_tokens, input_len=16)[0])
            t_inter, t_seq = t_inter + t1 - t0, t_seq + time.monotonic() - t1
            print(f"  trial {k + 1}/{n}: interleaved {inter[-1].decode} / {inter[-1].ttft}; "
                  f"sequential {seq[-1].decode} / {seq[-1].ttft}", flush=True)
    return {"interleaved": (false_rate(inter), t_inter / n), "sequential": (false_rate(seq), t_seq / n)}


def real_servers(work: Path):
    from kit.hosts import LocalHost
    from kit.lab.real import RealLab, default_flags

    labs = []
    for name, extra in (("default", []), ("chunked", ["--chunked-prefill-size", "16"])):
        lab = RealLab(LocalHost(), directory=str(work / f"lab-{name}"), model="qwen3", progress=lambda s: None)
        port = free_port()
        print(f"starting the real sglang server ({name}) on port {port} ...", flush=True)
        lab.up(port=port, flags=[*default_flags(), *extra], timeout=900)
        labs.append((lab, f"http://127.0.0.1:{port}"))
    return labs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--skip-real", action="store_true", help="the lab only")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lab = AppServer(variant_fields("new"), scenario="loadtest")
        print(f"the lab's stand-in: {args.trials} A/A trials", flush=True)
        rows.append(("lab stand-in (loadtest)", trials(f"http://127.0.0.1:{lab.port}", args.trials, work / "lab",
                                                       max_tokens=12, seed0=0)))
        flips = []
        if not args.skip_real:
            labs = real_servers(work)
            try:
                url, chunked = labs[0][1], labs[1][1]
                print(f"sglang 0.5.11 on CPU: {args.trials} A/A trials", flush=True)
                rows.append(("sglang 0.5.11 on CPU", trials(url, args.trials, work / "real", max_tokens=32,
                                                            seed0=100)))
                with Burner(1) as burner:
                    for k in range(3):
                        _, result = interleaved_trial(url, chunked, 500 + k, work / f"diff{k}", burner, requests=2,
                                                      max_tokens=4, input_len=200)
                        flips.append(result)
            finally:
                for server, _ in labs:
                    server.down(timeout=10)
    print(f"\nA/A comparisons with a false verdict (on decode tok/s or time to first token), {args.trials} trials "
          "each, a CPU burner changing between blocks:")
    print(f"{'server':28} {'sequential (before)':>24} {'interleaved (after)':>24}")
    for name, r in rows:
        (sf, sn), st = r["sequential"]
        (inf, inn), it = r["interleaved"]
        print(f"{name:28} {f'{sf}/{sn} ({st:.0f} s each)':>24} {f'{inf}/{inn} ({it:.0f} s each)':>24}")
    for k, result in enumerate(flips, 1):
        d, t = result.decode, result.ttft
        print(f"default vs 16-token prefill chunks, comparison {k}: time to first token {t.diff:+.1f} ms "
              f"CI [{t.ci_low:+.1f}, {t.ci_high:+.1f}] {t.verdict}; decode {d.diff:+.2f} tok/s "
              f"CI [{d.ci_low:+.2f}, {d.ci_high:+.2f}] {d.verdict}" if d else f"comparison {k}: {t.verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
