"""How long ``summarize_trace`` takes on a 200 MB trace, and how much memory it holds (budget: 30 s, bounded).

The trace: the real torch-profiler output of a small CPU loop (made here by the sglang 0.5.11
dry-run environment's torch, steps named as sglang names them), its events repeated with
shifted times until the file holds --mb megabytes of JSON. Side by side, each in a fresh
child process: ``summarize_trace`` (streamed), and ``json.load`` of the whole file, the way
a reader that loads it whole would start. Each child reports wall time and peak RSS.

``--kernels N`` adds, inside each step, N GPU kernels and one NCCL all-reduce WRITTEN HERE (no GPU on
this machine): the summary keeps two floats per kernel for the GPU idle gaps and a tuple per
communication kernel, so this measures how memory grows with GPU events.

    .venv/bin/python benchmarks/trace_summary.py [--mb 200] [--gz] [--kernels N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_metrics_trace import MAKE_TRACE  # noqa: E402

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
t = time.perf_counter()
if sys.argv[1] == "stream":
    from kit.metrics.trace import summarize_trace
    s = summarize_trace(sys.argv[2])
    n = s.events
else:
    import gzip
    opener = gzip.open if sys.argv[2].endswith(".gz") else open
    with opener(sys.argv[2], "rt") as fh:
        n = len(json.load(fh)["traceEvents"])
print(json.dumps({{"seconds": time.perf_counter() - t, "events": n,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def _gpu(e: dict, kernels: int) -> list[dict]:
    """Written GPU events inside one step annotation (see the module docstring)."""
    if kernels <= 0 or e.get("cat") != "user_annotation" or not str(e.get("name", "")).startswith("step["):
        return []
    width = e["dur"] / (kernels + 2)
    out = [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "pid": 0, "tid": 7,
            "ts": e["ts"] + i * width, "dur": width * 0.8} for i in range(kernels)]
    out.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 20,
                "ts": e["ts"] + kernels * width, "dur": width})
    return out


def make(directory: Path, mb: int, gz: bool, kernels: int = 0) -> Path:
    from kit.dryrun import setup

    env = setup("0.5.11").env
    small = directory / "small-TP-0-DECODE.trace.json.gz"
    script = directory / "make_trace.py"
    script.write_text(MAKE_TRACE)
    subprocess.run([str(env.python), str(script), str(small), "20"], check=True, capture_output=True, timeout=600)
    with gzip.open(small, "rt") as fh:
        doc = json.load(fh)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)
    big = directory / ("big-TP-0-DECODE.trace.json" + (".gz" if gz else ""))
    opener = gzip.open if gz else open
    written, copy = 0, 0
    with opener(big, "wt") as out:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        out.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        while written < mb * 1_000_000:
            for e in events:
                shifted = dict(e, ts=e["ts"] + copy * span)
                for one in [shifted, *_gpu(shifted, kernels)]:
                    line = ("" if first else ",\n") + json.dumps(one)
                    first = False
                    out.write(line)
                    written += len(line)
            copy += 1
        out.write("\n]}\n")
    return big


def child(mode: str, path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), mode, str(path)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--gz", action="store_true", help="write the big trace gzipped, as sglang does")
    ap.add_argument("--kernels", type=int, default=0, help="written GPU kernels per step (default: 0)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        t = time.perf_counter()
        big = make(Path(tmp), opts.mb, opts.gz, opts.kernels)
        print(f"{big.name}: {big.stat().st_size / 1e6:.0f} MB on disk, made in {time.perf_counter() - t:.1f}s")
        stream, whole = child("stream", big), child("whole", big)
    print(f"\n{'':<26} {'seconds':>8} {'peak RSS MB':>12} {'events':>10}")
    for name, r in (("summarize_trace (stream)", stream), ("json.load (whole)", whole)):
        print(f"{name:<26} {r['seconds']:>8.1f} {r['peak_rss_mb']:>12.0f} {r['events']:>10}")
    ok = stream["seconds"] <= 30
    print(f"\n{opts.mb} MB: {stream['seconds']:.1f}s, {'within' if ok else 'OVER'} the 30 s budget; "
          f"peak RSS {stream['peak_rss_mb']:.0f} MB streamed against {whole['peak_rss_mb']:.0f} MB loaded whole")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
