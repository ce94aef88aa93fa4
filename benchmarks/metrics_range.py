"""How long a 24-hour range query at 15 s resolution takes to come back and to plot (budget: 2 s).

A real Prometheus (Debian's package) is started on a TSDB backfilled with
``promtool tsdb create-blocks-from openmetrics``: 24 hours at 15 s of the lab's sglang
0.5.11 metric names (the values are a load shape made up by this script for timing, with
one restart, 10 minutes down, in the middle; they say nothing about any real server).
Then, side by side, median of --runs:

- one ``Prometheus.range`` of ``sglang:gen_throughput`` (5,760 points) to a DataFrame;
- the same five panel queries ``timeline()`` asks, one by one;
- ``timeline()`` whole: the panels, ``up``, one counter for resets, gaps, restarts, segments;
- its figure (``kit.display.metrics_timeline``) built and serialised to JSON, as a notebook
  sends it to the browser;
- the whole path, ``timeline()`` plus the figure, against the 2 s budget.

    .venv/bin/python benchmarks/metrics_range.py [--runs 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _prometheus_support import PROMTOOL, start_prometheus  # noqa: E402

from kit.metrics import Prometheus, timeline  # noqa: E402

STEP = 15
SPAN = 24 * 3600
LABELS = 'engine_type="unified",instance="gpu-box:30000",job="sglang",model_name="Qwen3.6-27B",pp_rank="0",tp_rank="0"'
TOK_LABELS = 'engine_type="unified",instance="gpu-box:30000",job="sglang",model_name="Qwen3.6-27B"'


def openmetrics(end: float) -> str:
    """24 h of the lab's families every 15 s, a restart at the middle (10 minutes without samples)."""
    start = end - SPAN
    times = [start + i * STEP for i in range(SPAN // STEP)]
    down = (start + SPAN / 2, start + SPAN / 2 + 600)
    live = [t for t in times if not down[0] <= t < down[1]]

    def load(t: float) -> float:  # a daily wave of traffic
        return 0.5 + 0.5 * math.sin((t - start) / SPAN * 2 * math.pi)

    gauges = {
        "sglang:gen_throughput": lambda t: (60 if t < down[0] else 38) * (0.3 + load(t)),
        "sglang:spec_accept_length": lambda t: 2.6 if t < down[0] else 1.8,
        "sglang:num_queue_reqs": lambda t: float(int(6 * load(t) ** 3)),
        "sglang:num_running_reqs": lambda t: float(1 + int(7 * load(t))),
        "sglang:token_usage": lambda t: round(0.6 * load(t), 3),
        "sglang:cache_hit_rate": lambda t: 0.4,
    }
    out = []
    for name, value in gauges.items():
        out.append(f"# TYPE {name} gauge")
        out += [f"{name}{{{LABELS}}} {value(t):.4f} {t:.0f}" for t in live]
    out.append("# TYPE sglang:num_requests counter")
    count, prev_down = 0, False
    for t in live:
        if t >= down[1] and not prev_down:
            count, prev_down = 0, True  # the new process counts from zero
        count += int(4 * load(t)) + 1
        out.append(f"sglang:num_requests_total{{{TOK_LABELS}}} {count} {t:.0f}")
    out.append("# TYPE up gauge")
    out += [f'up{{instance="gpu-box:30000",job="sglang"}} {0 if down[0] <= t < down[1] else 1} {t:.0f}' for t in times]
    out.append("# EOF")
    return "\n".join(out) + "\n"


def backfill(directory: Path, end: float) -> Path:
    data = directory / "data"
    text = directory / "24h.om"
    text.write_text(openmetrics(end))
    proc = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(data)],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"promtool failed:\n{proc.stdout}\n{proc.stderr}")
    return data


def timed(func, runs: int):
    seconds, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = func()
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds), max(seconds), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", help="directory to keep the TSDB and the OpenMetrics file in")
    opts = ap.parse_args()
    directory = Path(opts.keep or tempfile.mkdtemp(prefix="metrics-range-"))
    directory.mkdir(parents=True, exist_ok=True)
    end = math.floor(time.time() / 3600) * 3600 - 3600  # whole hours, before the head block
    t = time.perf_counter()
    data = backfill(directory, end)
    print(f"backfilled 24 h at {STEP}s into {data} in {time.perf_counter() - t:.1f}s (promtool)")
    server = start_prometheus(directory / "prom", [], storage=data)
    try:
        prom = Prometheus(server.url, timeout=30)
        start = end - SPAN
        rows = []
        med, worst, res = timed(lambda: prom.range("sglang:gen_throughput", start, end, STEP), opts.runs)
        rows.append(("one range query -> DataFrame", med, worst, len(res.frame)))
        from kit.metrics import PANELS

        med, worst, n = timed(lambda: sum(len(prom.range(m, start, end, STEP).frame) for m in PANELS.values()),
                              opts.runs)
        rows.append((f"{len(PANELS)} panel queries", med, worst, n))
        med, worst, tl = timed(lambda: timeline(prom, since=SPAN, end=end, step=STEP), opts.runs)
        rows.append(("timeline() whole", med, worst, len(tl.frame)))
        med, worst, fig_json = timed(lambda: tl.figure().to_json(), opts.runs)
        rows.append(("figure + to_json", med, worst, len(fig_json)))
        med, worst, _ = timed(lambda: timeline(prom, since=SPAN, end=end, step=STEP).figure().to_json(), opts.runs)
        rows.append(("timeline() + figure (budget 2.00s)", med, worst, len(tl.frame)))
    finally:
        server.stop()
        if not opts.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"\n{'stage':<38} {'median s':>9} {'max s':>8} {'points/bytes':>13}")
    for name, med, worst, n in rows:
        print(f"{name:<38} {med:>9.3f} {worst:>8.3f} {n:>13}")
    print(f"\nrestarts found: {len(tl.restarts)}; " + "; ".join(f"{r.evidence}" for r in tl.restarts))
    verdict = "within" if rows[-1][1] <= 2.0 else "OVER"
    print(f"24 h at {STEP}s, query + plot: {rows[-1][1]:.2f}s median, {verdict} the 2 s budget")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())
