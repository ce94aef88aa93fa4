"""How long `explain(tree, "disable_piecewise_cuda_graph", ...)` takes, cold and warm.

Cold: a fresh SourceTree object, nothing read yet (grep, file reads, parsing, evaluation).
Warm: the same tree again; provenance keeps what it read and parsed per tree, so only the
guard evaluation runs. Both are measured side by side in one run, with the number of
host operations (grep, file reads) each needed, since over SSH each is a round trip.

    python benchmarks/why_timing.py                    # installs sglang 0.5.11 source if needed
    python benchmarks/why_timing.py --source DIR       # an unpacked .../site-packages/sglang
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kit.hosts import LocalHost  # noqa: E402
from kit.provenance import explain  # noqa: E402
from kit.server_args import parse_log  # noqa: E402
from kit.source import SourceTree, install_package_source  # noqa: E402

DATA = ROOT / "tests" / "data" / "provenance"
FLAG = "disable_piecewise_cuda_graph"


class CountingTree:
    """A SourceTree that counts the host operations provenance asks of it."""

    def __init__(self, tree: SourceTree) -> None:
        self._tree = tree
        self.reads = 0
        self.greps = 0
        self.version = tree.version
        self.package = tree.package

    def read_text(self, path: str) -> str:
        self.reads += 1
        return self._tree.read_text(path)

    def grep(self, *args, **kwargs):
        self.greps += 1
        return self._tree.grep(*args, **kwargs)

    def files(self, pattern: str = "**/*.py") -> list[str]:
        self.greps += 1
        return self._tree.files(pattern)

    def read(self, path: str, start: int | None = None, end: int | None = None):
        self.reads += 1
        return self._tree.read(path, start, end)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(source: str, runs: int) -> dict[str, list]:
    snapshot = parse_log((DATA / "incident-0.5.11.log").read_text())
    config = DATA / "qwen3.6-27b" / "config.json"
    out: dict[str, list] = {"cold": [], "warm": [], "cold_ops": [], "warm_ops": []}
    for _ in range(runs):
        tree = CountingTree(SourceTree.at(LocalHost(), source))
        out["cold"].append(_timed(lambda t=tree: explain(t, FLAG, snapshot, config)))
        out["cold_ops"].append((tree.greps, tree.reads))
        tree.greps = tree.reads = 0
        out["warm"].append(_timed(lambda t=tree: explain(t, FLAG, snapshot, config)))
        out["warm_ops"].append((tree.greps, tree.reads))
    return out


def report(source: str, result: dict[str, list]) -> str:
    cold, warm = result["cold"], result["warm"]
    greps, reads = result["cold_ops"][0]
    wgreps, wreads = result["warm_ops"][0]
    lines = [
        f"explain(tree, {FLAG!r}, snapshot, config.json) on LocalHost, {source}",
        f"  cold  median {statistics.median(cold):7.3f} s  min {min(cold):7.3f} s  "
        f"({greps} grep/list, {reads} file reads)",
        f"  warm  median {statistics.median(warm):7.3f} s  min {min(warm):7.3f} s  "
        f"({wgreps} grep/list, {wreads} file reads)",
        f"  warm is {statistics.median(cold) / statistics.median(warm):.1f}x faster (n={len(cold)} each)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="sglang package directory (default: install 0.5.11 source)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    source = args.source
    if source is None:
        prefix = Path(tempfile.gettempdir()) / "sgl-kit-bench-0.5.11"
        source = install_package_source("sglang", "0.5.11", prefix=str(prefix))
    print(report(source, measure(source, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
