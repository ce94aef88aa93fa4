"""What `sgl-kit upgrade-diff` costs: the incident's launch under two sglang releases, cold and warm.

For each pair of releases (0.5.11 -> 0.5.23, 0.5.12 -> 0.5.18 by default):

- cold: `sgl-kit upgrade-diff ...` as a new process when no warm dry-run worker runs (it starts one per
  release, both at once: sglang's import is most of it);
- warm CLI: the same command again, the workers now warm (median of --repeat runs);
- warm in-process: `kit.upgrade.upgrade_diff(...)` called again in one process (median of --repeat);
- what it found: settings changed / renamed, asked flags that no longer parse.

The workers live in a throw-away run directory (SGL_KIT_DRYRUN_RUN_DIR), so the ones a user has
running are neither used nor stopped. A release whose dry-run environment is missing is reported
with the command that builds it, not timed.

Usage: python benchmarks/upgrade.py [--pair 0.5.11:0.5.23] [--pair ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kit.dryrun as dryrun  # noqa: E402
from kit.upgrade import upgrade_diff  # noqa: E402

MODEL = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b"
PAIRS = ("0.5.11:0.5.23", "0.5.12:0.5.18")
# `sgl-kit` with the upgrade-diff group, whether or not kit/cli/__init__.py registers it yet.
CLI = ("import sys, kit.cli; from kit.cli import upgrade\n"
       "kit.cli.GROUPS = kit.cli.GROUPS if upgrade in kit.cli.GROUPS else (*kit.cli.GROUPS, upgrade)\n"
       "sys.exit(kit.cli.main(sys.argv[1:]))")


def _flags() -> list[str]:
    return json.loads((ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json").read_text())["argv"]


def _cli(old: str, new: str) -> tuple[float, int]:
    argv = [sys.executable, "-c", CLI, "upgrade-diff", "--from", old, "--to", new, "--model", str(MODEL),
            "--gpu", "a6000", "--tp", "2", "--json", "--", *_flags()]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"upgrade-diff failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.monotonic() - started, proc.returncode


def bench_pair(old: str, new: str, repeat: int) -> dict:
    missing = [v for v in (old, new) if not dryrun.environment(v).ready]
    if missing:
        return {"pair": f"{old} -> {new}", "missing": [f"sgl-kit dryrun setup --sglang {v}" for v in missing]}
    dryrun.stop_workers()
    cold, _ = _cli(old, new)
    warm_cli = statistics.median(_cli(old, new)[0] for _ in range(repeat))
    times = []
    for _ in range(repeat):
        started = time.monotonic()
        diff = upgrade_diff(_flags(), [old, new], model=MODEL, gpu="a6000", tp=2)
        times.append(time.monotonic() - started)
    renamed = sum(r.kind == "renamed" for r in diff.rows)
    return {"pair": f"{old} -> {new}", "cold": cold, "warm_cli": warm_cli, "warm": statistics.median(times),
            "changed": len(diff.rows) - renamed, "renamed": renamed, "unparsed": len(diff.unparsed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", action="append", help="FROM:TO (repeatable; default: " + ", ".join(PAIRS) + ")")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per pair (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sgl-kit-upgrade-bench-") as run_dir:
        os.environ["SGL_KIT_DRYRUN_RUN_DIR"] = run_dir
        try:
            rows = [bench_pair(*pair.split(":"), args.repeat) for pair in args.pair or PAIRS]
        finally:
            dryrun.stop_workers()
    print(f"sgl-kit upgrade-diff, the incident's launch (Qwen3.6-27B, 2x RTX A6000), {os.cpu_count()} cores")
    print(f"{'PAIR':<18} {'COLD CLI':>9} {'WARM CLI':>9} {'WARM IN-PROCESS':>16}  FOUND")
    for row in rows:
        if "missing" in row:
            print(f"{row['pair']:<18} not set up: {'; '.join(row['missing'])}")
            continue
        found = f"{row['changed']} changed, {row['renamed']} renamed, {row['unparsed']} flag(s) no longer parse"
        print(f"{row['pair']:<18} {row['cold']:>8.1f}s {row['warm_cli']:>8.2f}s {row['warm']:>15.2f}s  {found}")
    print("cold: no warm worker running (the command starts one per release, at once); warm: the workers up, "
          f"median of {args.repeat}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
