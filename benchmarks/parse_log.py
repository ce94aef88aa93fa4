"""How fast `kit.server_args` reads startup logs, and how much memory a big log costs.

Measured side by side in one run:

- one real-size line: the incident's `server_args=ServerArgs(...)` of sglang 0.5.11,
  generated from the real dataclass (368 fields, ~11 kB), parsed N times (median, p95);
- a generated log of --mb megabytes (decode-batch lines, plus a few real lines), parsed
  in a fresh child process each way: `parse_log_file` (streaming), and `parse_log` of the
  whole text read into memory. Each child reports wall time, its peak RSS
  (`resource.getrusage`), and in a second run the peak of Python allocations
  (`tracemalloc`, which slows parsing, so it is not timed). A child that only imports
  the kit gives the RSS baseline.

    .venv/bin/python benchmarks/parse_log.py [--runs 200] [--mb 50] [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _server_args_support import incident_line  # noqa: E402

from kit.hosts import LocalHost  # noqa: E402
from kit.server_args import defaults, parse_log, parse_log_file  # noqa: E402
from kit.source import SourceTree, install_package_source  # noqa: E402

NOISE = (
    "[2026-05-01 10:{m:02d}:{s:02d} TP0] Decode batch. #running-req: 1, #token: {t}, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 37.{s:02d}, #queue-req: 0\n"
)


def _line(source: str | None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        pkg = source or install_package_source("sglang", "0.5.11", prefix=tmp)
        host = LocalHost()
        try:
            return incident_line(defaults(SourceTree.at(host, pkg)))
        finally:
            host.close()


def time_one_line(line: str, runs: int) -> tuple[float, float, int]:
    parse_log(line)  # warm: regex compilation, imports
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        snap = parse_log(line)
        samples.append(time.perf_counter() - start)
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000, len(snap)


def write_log(path: Path, line: str, megabytes: int) -> int:
    """A log of about `megabytes` MB with the real line at 4 places; returns its line count."""
    target, lines, size = megabytes * 1024 * 1024, 0, 0
    marks = {int(target * f) for f in (0.0, 0.3, 0.6, 0.99)}
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            if any(size <= m < size + 200 for m in marks):
                chunk = line + "\n"
            else:
                chunk = NOISE.format(m=lines // 60 % 60, s=lines % 60, t=lines % 40000)
            f.write(chunk)
            size += len(chunk)
            lines += 1
    return lines


def child(mode: str, path: str, traced: bool) -> None:
    """Runs in a fresh interpreter so that peak RSS belongs to this one parse."""
    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    if mode == "stream":
        snap = parse_log_file(path)
    elif mode == "whole-text":
        snap = parse_log(Path(path).read_text(encoding="utf-8"))
    else:
        snap = None
    seconds = time.perf_counter() - start
    peak_py = tracemalloc.get_traced_memory()[1] if traced else None
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rss_mb": rss_kb / 1024,
                "py_peak_mb": peak_py and peak_py / 2**20,
                "fields": len(snap) if snap else 0,
            }
        )
    )


def run_child(mode: str, path: Path, traced: bool) -> dict:
    argv = [sys.executable, __file__, "--child", mode, str(path)] + (["--traced"] if traced else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--source", help="an unpacked .../site-packages/sglang of 0.5.11")
    args = ap.parse_args()

    line = _line(args.source)
    median, p95, fields = time_one_line(line, args.runs)
    print(
        f"one 0.5.11 line: {len(line):,} chars, {fields} fields: median {median:.2f} ms, p95 {p95:.2f} ms ({args.runs} runs)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server.log"
        count = write_log(path, line, args.mb)
        size = path.stat().st_size / 2**20
        print(f"generated log: {size:.1f} MB, {count:,} lines, 4 server_args lines")
        print(f"{'mode':<12} {'time s':>8} {'MB/s':>8} {'peak RSS MB':>12} {'py peak MB':>11}")
        for mode in ("baseline", "stream", "whole-text"):
            timed, traced = run_child(mode, path, False), run_child(mode, path, True)
            speed = f"{size / timed['seconds']:.0f}" if mode != "baseline" else "-"
            print(
                f"{mode:<12} {timed['seconds']:>8.2f} {speed:>8} {timed['rss_mb']:>12.1f} {traced['py_peak_mb']:>11.1f}"
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], "--traced" in sys.argv)
    else:
        main()
