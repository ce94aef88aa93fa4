"""The offline doctor, before and after a change, side by side in one run.

Each row is a fresh `sgl-kit doctor` process on files, as a person runs it, timed twice per code base:

- cold: the sglang source is on disk, but the kit's persistent index (kit/_index.py: flag tables,
  writes, resolutions) starts empty: the first question about that release pays for reading it;
- warm: the same command again (median of ``--runs``), the index filled by the runs before.

"before" is the kit at ``--before REF`` (a temporary ``git worktree``, run with this venv), "after" is
this checkout. Both read the same sglang sources (the kit's cache, linked into a scratch cache whose
``index/`` is empty), so the difference is the code, not the downloads.

    .venv/bin/python benchmarks/doctor_offline.py --before fea3b7f [--runs 3]

The rows: the pasted incident (a launch command, no server_args line: resolved by the new code), the
0.4.1.post4 DP-attention launch of sglang#2882 (resolved too), and the incident's own log (a server_args
line: read, nothing to resolve).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

ROWS = [
    ("pasted incident (launch, 0.5.11)",
     ["--paste", "tests/data/paste/incident-issue.md", "--model-config", "kit/data/lab/Qwen3.6-27B/config.json"]),
    ("sglang#2882 launch (0.4.1.post4, DP attention)",
     ["--paste", "data/incidents/sglang-2882-dp-attention-slower/issue.md"]),
    ("incident log (server_args line, 0.5.11)",
     ["--log", "tests/data/provenance/incident-0.5.11.log", "--sglang", "0.5.11"]),
]


def scratch_cache(base: Path) -> Path:
    """A cache that shares the kit's downloaded sources but has an empty index."""
    real = Path(os.environ.get("SGL_KIT_CACHE") or Path.home() / ".cache" / "sglang-investigation-kit")
    base.mkdir(parents=True)
    for item in real.iterdir() if real.is_dir() else []:
        if item.name != "index":
            (base / item.name).symlink_to(item)
    return base


def run(code: Path, args: list[str], cache: Path) -> float:
    env = dict(os.environ, SGL_KIT_CACHE=str(cache), PYTHONPATH=str(code))
    start = time.perf_counter()
    proc = subprocess.run([PY, "-m", "kit.cli", "doctor", *args], cwd=code, env=env, capture_output=True, text=True,
                          timeout=900)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{code}: sgl-kit doctor {' '.join(args)} exited {proc.returncode}: {proc.stderr[-400:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the git revision to compare with (e.g. a commit before the change)")
    parser.add_argument("--runs", type=int, default=3, help="warm runs per row and code base (median)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="sgl-kit-bench-offline-"))
    before = scratch / "before"
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(before), args.before],
                       check=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        print(f"cannot check out {args.before!r} into a worktree: {err}", file=sys.stderr)
        return 2
    try:
        results = {}
        for side, code in (("before", before), ("after", ROOT)):
            cache = scratch_cache(scratch / f"cache-{side}")
            for name, argv in ROWS:
                cold = run(code, argv, cache)
                warm = statistics.median(run(code, argv, cache) for _ in range(args.runs))
                results[(side, name)] = (cold, warm)
                print(f"  {side:6} {name}: cold {cold:.2f} s, warm {warm:.2f} s", file=sys.stderr)
        load = os.getloadavg()[0]
        print(f"\nsgl-kit doctor offline, before = {args.before}, after = this checkout "
              f"(load average {load:.1f} on {os.cpu_count()} CPUs)")
        print(f"{'row':48} {'before cold':>12} {'before warm':>12} {'after cold':>11} {'after warm':>11}")
        for name, _ in ROWS:
            bc, bw = results[("before", name)]
            ac, aw = results[("after", name)]
            print(f"{name:48} {bc:11.2f}s {bw:11.2f}s {ac:10.2f}s {aw:10.2f}s")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
