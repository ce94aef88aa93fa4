"""SSH round trips: the kit's SSHHost against the ways people reach a GPU box by hand.

Starts a real sshd on 127.0.0.1 (the test suite's launcher), logs in as the
current user with that user's real login shell and dotfiles, and measures,
side by side in one run, N round trips of:

- ``true``;
- a 40-line read of sglang 0.5.11's ``srt/server_args.py`` (lines 1222-1261),
  the incident's ``sed -n "1222,1260p"``.

for: the kit's SSHHost (persistent helper), the kit's fallback for hosts
without python3 (one channel per command), a fresh ``ssh`` per command, and
OpenSSH ControlMaster multiplexing.

    .venv/bin/python benchmarks/ssh_roundtrip.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import make_sshd_factory  # noqa: E402

from kit.hosts import SSHHost  # noqa: E402
from kit.source import install_package_source  # noqa: E402


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered) * 1000, p95 * 1000


def _time(fn, runs: int) -> list[float]:
    fn()  # warm: connection, helper start, page cache
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _openssh(argv_prefix: list[str], remote: str):
    def call():
        proc = subprocess.run([*argv_prefix, remote], capture_output=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.decode(errors="replace"))
        return proc.stdout
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kit-bench-ssh-"))
    pkg = install_package_source("sglang", "0.5.11", prefix=str(work / "env"))
    source = os.path.join(pkg, "srt", "server_args.py")
    factory = make_sshd_factory(work)
    server = factory.start()
    control = work / "cm-%C"
    base = ["ssh", "-F", str(server.ssh_config)]
    master = [*base, "-o", "ControlMaster=auto", "-o", f"ControlPath={control}", "-o", "ControlPersist=60"]
    sed = f"sed -n '1222,1261p' {shlex.quote(source)}"

    kit = SSHHost(server.alias, config_file=str(server.ssh_config), allow_agent=False, look_for_keys=False)
    fallback = SSHHost(server.alias, config_file=str(server.ssh_config), allow_agent=False,
                       look_for_keys=False, helper_python="/nonexistent/python3")
    assert kit.read_lines(source, 1222, 1261)[0] == fallback.read_lines(source, 1222, 1261)[0]
    assert len(kit.read_lines(source, 1222, 1261)[0]) == 40

    cases = [
        ("kit SSHHost (helper)", lambda: kit.run("true"), lambda: kit.read_lines(source, 1222, 1261)),
        ("kit SSHHost (no-python fallback)", lambda: fallback.run("true"),
         lambda: fallback.read_lines(source, 1222, 1261)),
        ("fresh ssh per command", _openssh([*base, server.alias], "true"), _openssh([*base, server.alias], sed)),
        ("OpenSSH ControlMaster", _openssh([*master, server.alias], "true"),
         _openssh([*master, server.alias], sed)),
    ]
    rows = []
    try:
        for name, run_true, read40 in cases:
            rows.append((name, *_percentiles(_time(run_true, args.runs)), *_percentiles(_time(read40, args.runs))))
            print(f"  measured {name}", file=sys.stderr)
    finally:
        kit.close()
        fallback.close()
        subprocess.run([*master, "-O", "exit", server.alias], capture_output=True, timeout=10)
        factory.stop_all()

    print(f"\nSSH round trips on 127.0.0.1, {args.runs} runs each, login shell {os.environ.get('SHELL', '?')}")
    print(f"{'how':36} {'true p50':>10} {'true p95':>10} {'read40 p50':>11} {'read40 p95':>11}  (ms)")
    for name, tp50, tp95, rp50, rp95 in rows:
        print(f"{name:36} {tp50:10.2f} {tp95:10.2f} {rp50:11.2f} {rp95:11.2f}")
    kit_p50 = rows[0][1]
    print(f"\nkit helper p50 for true: {kit_p50:.2f} ms; "
          f"{rows[3][1] / kit_p50:.1f}x faster than ControlMaster, {rows[2][1] / kit_p50:.1f}x faster than fresh ssh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
