"""`sgl-kit why` end to end over SSH: cold snapshot, warm snapshot, and no snapshot.

Each row is the wall time of one `sgl-kit why disable_piecewise_cuda_graph TARGET ...`
process against a real sshd on 127.0.0.1, with the incident's log and config.json on
the target, as an engineer would run it:

- cold: an empty kit cache, so the sglang package is copied once (tar over one channel);
- warm: the same cache again, so only the remote fingerprint is checked;
- --no-snapshot: every file provenance needs is read over the connection.

    .venv/bin/python benchmarks/why_ssh.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import make_sshd_factory  # noqa: E402

from kit.source import install_package_source  # noqa: E402

DATA = HERE.parent / "tests" / "data" / "provenance"
SGL_KIT = str(Path(sys.executable).parent / "sgl-kit")


def _why(server, pkg: str, cache: Path, *extra: str) -> tuple[float, float]:
    argv = [SGL_KIT, "--json", "why", "disable_piecewise_cuda_graph", server.alias, "--package-dir", pkg,
            "--log", str(DATA / "incident-0.5.11.log"), "--model-config",
            str(DATA / "qwen3.6-27b" / "config.json"), "--ssh-config", str(server.ssh_config), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SGL_KIT_CACHE": str(cache)})
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0 or '"sglang/srt/server_args.py:1230"' not in proc.stdout:
        raise SystemExit(f"why failed or did not name rule 8:\n{proc.stderr}\n{proc.stdout[:2000]}")
    return seconds, cpu  # cpu: user+sys of the kit's process (the ssh it starts included)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kit-bench-why-"))
    pkg = install_package_source("sglang", "0.5.11", prefix=str(work / "env"))
    factory = make_sshd_factory(work)
    server = factory.start()
    rows: dict[str, list[tuple[float, float]]] = {"cold snapshot": [], "warm snapshot": [], "no snapshot": []}
    try:
        for i in range(args.repeat):
            cache = work / f"cache{i}"
            rows["cold snapshot"].append(_why(server, pkg, cache))
            rows["warm snapshot"].append(_why(server, pkg, cache))
            rows["no snapshot"].append(_why(server, pkg, cache, "--no-snapshot"))
            shutil.rmtree(cache)
    finally:
        factory.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nsgl-kit why disable_piecewise_cuda_graph over SSH on 127.0.0.1, sglang 0.5.11 "
          f"(whole CLI process, median of {args.repeat}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores)")
    for name, values in rows.items():
        walls = [w for w, _ in values]
        cpu = statistics.median(c for _, c in values)
        print(f"  {name:15} {statistics.median(walls):6.2f} s wall (min {min(walls):.2f}, max {max(walls):.2f}), "
              f"{cpu:.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
