"""Snapshot of a whole sglang package over SSH: cold (one tar transfer) and warm (fingerprint only).

Also compares reading one function from the remote tree with reading it from
the local snapshot, which is what the snapshot is for.

    .venv/bin/python benchmarks/snapshot.py [--version 0.5.11] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import make_sshd_factory  # noqa: E402

from kit.hosts import SSHHost  # noqa: E402
from kit.source import SourceTree, install_package_source  # noqa: E402

FUNCTION = "ServerArgs._handle_piecewise_cuda_graph"


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.5.11")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kit-bench-snap-"))
    pkg = install_package_source("sglang", args.version, prefix=str(work / "env"))
    factory = make_sshd_factory(work)
    server = factory.start()
    rows, info = [], None
    try:
        with SSHHost(server.alias, config_file=str(server.ssh_config), allow_agent=False,
                     look_for_keys=False) as host:
            tree = SourceTree.at(host, pkg)
            colds, warms = [], []
            for i in range(args.repeat):
                cache = work / f"cache{i}"
                seconds, local = _timed(lambda c=cache: tree.snapshot(cache_dir=c))
                colds.append(seconds)
                info = local.snapshot_info
                assert not info.warm and info.transferred_bytes > 0
                seconds, again = _timed(lambda c=cache: tree.snapshot(cache_dir=c))
                assert again.snapshot_info.warm and again.snapshot_info.transferred_bytes == 0
                warms.append(seconds)
                if i < args.repeat - 1:
                    shutil.rmtree(cache)
            remote_fn = [_timed(lambda: SourceTree.at(host, pkg).function(FUNCTION))[0] for _ in range(5)]
            local_fn = [_timed(lambda: local.function(FUNCTION))[0] for _ in range(5)]
            rows = [
                ("snapshot, cold (tar over one channel)", statistics.median(colds)),
                ("snapshot, warm (fingerprint only)", statistics.median(warms)),
                (f"function({FUNCTION}) on the remote tree", statistics.median(remote_fn)),
                (f"function({FUNCTION}) on the snapshot", statistics.median(local_fn)),
            ]
    finally:
        factory.stop_all()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nsglang {args.version} over SSH on 127.0.0.1 (median of {args.repeat} cold/warm pairs)")
    print(f"  files: {info.files}, transferred: {info.transferred_bytes / 2**20:.1f} MiB (gzip tar)")
    for name, seconds in rows:
        print(f"  {name:70} {seconds * 1000:9.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
