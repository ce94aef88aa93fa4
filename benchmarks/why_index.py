"""`why`, `args` and `doctor` with and without the persistent index of the sglang tree, side by side.

Each row is one whole `sgl-kit` process, as an engineer runs it, timed as the median of
``--repeat`` runs (wall seconds, and the CPU seconds of the process in brackets: on a shared
machine the CPU time is the steadier number). Columns:

- before: the kit at ``--before`` (a git revision, default HEAD), copied out with `git archive`;
- off: this kit with ``SGL_KIT_INDEX=0``;
- cold: this kit with an empty cache (the index is built by that run);
- warm: this kit again, the index read back.

Rows: `why` on a local 0.5.11 tree (with the incident's log and config.json), `why` over SSH to
a real sshd on 127.0.0.1 (snapshot cold and warm), `args parse`, the offline doctor over the
incident's files, and, with ``--lab``, `why`, `args show` and `doctor` against a running lab,
here and over SSH (the same lab reached through the sshd, as a GPU box is).
The floor: `grep -rn` and `sed -n` over SSH to the same sshd, as one `ssh` process each, and as
one request on a connection already open (the kit's helper: what a warm `why` pays per question).

The SSH rows are timed again with the connection kept between processes (``, kept connection``:
the first run leaves a keeper, kit.hosts.kept; the others run with SGL_KIT_SSH_PERSIST=0).
Then, per sglang tree (0.5.11 and 0.5.23): the index file's size and the CPU seconds of the
`why` that builds it cold. The load average is printed before and after: the machine may be shared.

    .venv/bin/python benchmarks/why_index.py [--repeat 3] [--before HEAD] [--lab PORT] [--no-ssh]
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
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

DATA = ROOT / "tests" / "data" / "provenance"
LOG = DATA / "incident-0.5.11.log"
CONFIG = DATA / "qwen3.6-27b" / "config.json"
FLAG = "disable_piecewise_cuda_graph"


def _timed(argv: list[str], env: dict, expect: str | None = None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # Not from the checkout: `python -m` puts the working directory first on sys.path.
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0 or (expect is not None and expect not in proc.stdout):
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}\n"
                         f"{proc.stdout[:1000]}")
    return wall, cpu


class Kit:
    """How to run one kit: this checkout, or a revision copied out with `git archive`."""

    def __init__(self, name: str, source: Path | None, env: dict) -> None:
        self.name, self.source, self.env = name, source, env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kit.cli", *args]

    def environ(self, cache: Path, **extra: str) -> dict:
        # Each process connects on its own unless a row asks for the kept connection (kit.hosts.kept).
        env = {**os.environ, "SGL_KIT_SSH_PERSIST": "0", **self.env, "SGL_KIT_CACHE": str(cache), **extra}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed kit has its bytecode
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source) + os.pathsep + env.get("PYTHONPATH", "")
        return env


def _revision(ref: str, work: Path) -> Path:
    out = work / f"kit-{ref.replace('/', '_')}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "kit"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def _on_open_connection(server, argv: list[str], repeat: int) -> list[tuple[float, float]]:
    """One command as one request on an SSH connection already open (its helper started): wall and
    the CPU seconds of this process, per request."""
    from kit.target import connect

    out = []
    with connect(server.alias, config_file=str(server.ssh_config)) as host:
        host.run(["true"], timeout=60)  # connect and start the helper first
        for _ in range(repeat):
            cpu0, start = time.process_time(), time.perf_counter()
            res = host.run(argv, timeout=60)
            out.append((time.perf_counter() - start, time.process_time() - cpu0))
            if not res.stdout:
                raise SystemExit(f"{argv} printed nothing over SSH: {res.stderr[-500:]}")
    return out


def _kept_rows(kit: Kit, work: Path, commands: dict, repeat: int) -> dict[str, dict]:
    """The SSH rows again with the connection kept between processes (kit.hosts.kept): the first run
    connects and leaves the keeper, the timed ones go through it. Index warm."""
    from kit.hosts.kept import disconnect

    out = {}
    runtime = work / "runtime"
    os.environ["SGL_KIT_RUNTIME_DIR"] = str(runtime)  # so disconnect() below finds this run's keepers
    for label, (argv, expect) in commands.items():
        if "SSH" not in label:
            continue
        cache = work / f"cache-kept-{label.split()[0]}"
        _seed_cache(cache)
        env = kit.environ(cache, SGL_KIT_SSH_PERSIST="120", SGL_KIT_RUNTIME_DIR=str(runtime))
        _timed(kit.argv(*argv), env, expect)  # connects, builds the index, leaves the keeper
        deadline = time.monotonic() + 30
        while not list(runtime.glob("ssh-*.sock")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the keeper listens once its helper answered
        cells = [_timed(kit.argv(*argv), env, expect) for _ in range(repeat)]
        out[f"{label}, kept connection"] = {"before": [], "off": [], "cold": [], "warm": cells}
        disconnect()
        shutil.rmtree(cache, ignore_errors=True)
    return out


def _index_sizes(kit: Kit, work: Path, trees: dict[str, str]) -> list[str]:
    """Per tree: the index file's size and the CPU seconds of the `why` that builds it cold."""
    rows = []
    for version, pkg in trees.items():
        cache = work / f"cache-size-{version}"
        _seed_cache(cache)
        argv = ["--json", "why", FLAG, "local", "--package-dir", pkg, "--cuda"]
        if version == "0.5.11":
            argv += ["--log", str(LOG), "--model-config", str(CONFIG)]
        wall, cpu = _timed(kit.argv(*argv), kit.environ(cache))
        files = sorted((cache / "index").glob("*.json"))
        size = sum(f.stat().st_size for f in files)
        warm = _timed(kit.argv(*argv), kit.environ(cache))
        rows.append(f"  sglang {version}: index {size / 1024:.0f} KiB in {len(files)} file(s); `why` building it "
                    f"cold {wall:.2f} s wall ({cpu:.2f} CPU), warm {warm[0]:.2f} s ({warm[1]:.2f} CPU)")
        shutil.rmtree(cache, ignore_errors=True)
    return rows


def _seed_cache(cache: Path) -> None:
    """A kit cache with the wheels and trees of the real one (so `--sglang 0.5.11` reads offline), and
    nothing else: no index, no snapshots."""
    from kit._paths import cache_dir

    real = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for name in ("wheels", "trees"):
        if (real / name).exists() and not (cache / name).exists():
            (cache / name).symlink_to(real / name)


def _median(values: list[tuple[float, float]]) -> str:
    if not values:
        return "-"
    wall = statistics.median(v[0] for v in values)
    cpu = statistics.median(v[1] for v in values)
    return f"{wall:5.2f} ({cpu:4.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default="HEAD", help="git revision to compare with (default: HEAD)")
    parser.add_argument("--lab", type=int, metavar="PORT", help="also time against a running lab on this port")
    parser.add_argument("--no-ssh", action="store_true", help="skip the SSH rows")
    args = parser.parse_args()

    from kit.source import install_package_source

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="kit-bench-index-"))
    pkg = install_package_source("sglang", "0.5.11", prefix=str(work / "env"))
    pkg23 = install_package_source("sglang", "0.5.23", prefix=str(work / "env23"))
    pycache = work / "pycache"
    kits = {
        "before": Kit("before", _revision(args.before, work), {"PYTHONPYCACHEPREFIX": str(pycache / "before")}),
        "off": Kit("off", None, {"SGL_KIT_INDEX": "0", "PYTHONPYCACHEPREFIX": str(pycache / "now")}),
        "cold": Kit("cold", None, {"PYTHONPYCACHEPREFIX": str(pycache / "now")}),
        "warm": Kit("warm", None, {"PYTHONPYCACHEPREFIX": str(pycache / "now")}),
    }
    why_local = ["--json", "why", FLAG, "local", "--package-dir", pkg, "--log", str(LOG), "--model-config", str(CONFIG)]
    rows: dict[str, list] = {}
    factory = server = None
    if not args.no_ssh:
        from conftest import make_sshd_factory

        factory = make_sshd_factory(work)
        server = factory.start()
    try:
        commands = {
            "why local 0.5.11": (why_local, '"sglang/srt/server_args.py:1230"'),
            "args parse LOG": (["--json", "args", "parse", str(LOG), "--package-dir", pkg], None),
            "doctor --log --sglang (offline)": (["--json", "doctor", "--log", str(LOG), "--model-config", str(CONFIG),
                                                "--sglang", "0.5.11"], None),
        }
        if server is not None:
            commands["why over SSH"] = (["--json", "why", FLAG, server.alias, "--package-dir", pkg, "--log", str(LOG),
                                         "--model-config", str(CONFIG), "--ssh-config", str(server.ssh_config)],
                                        '"sglang/srt/server_args.py:1230"')
        if args.lab:
            commands["why lab"] = (["--json", "why", FLAG, "lab", "--port", str(args.lab)], None)
            commands["args show lab"] = (["--json", "args", "show", "lab", "--port", str(args.lab)], None)
            commands["doctor lab"] = (["--json", "doctor", "lab", "--port", str(args.lab)], None)
            if server is not None:
                over = [server.alias, "--port", str(args.lab), "--ssh-config", str(server.ssh_config)]
                commands["why lab over SSH"] = (["--json", "why", FLAG, *over], None)
                commands["doctor lab over SSH"] = (["--json", "doctor", *over], None)
        for label, (argv, expect) in commands.items():
            for name in ("before", "off", "cold", "warm"):
                rows.setdefault(label, {})[name] = []
            for i in range(args.repeat):
                for name, kit in kits.items():
                    if name == "warm":
                        continue
                    cache = work / f"cache-{name}-{label.split()[0]}-{i}"
                    _seed_cache(cache)
                    env = kit.environ(cache)
                    if name == "before" or name == "off":
                        _timed(kit.argv(*argv), env, expect)  # warm the snapshot (SSH) as the others have it
                        rows[label][name].append(_timed(kit.argv(*argv), env, expect))
                    else:
                        rows[label]["cold"].append(_timed(kit.argv(*argv), env, expect))
                        rows[label]["warm"].append(_timed(kit.argv(*argv), env, expect))
                    shutil.rmtree(cache, ignore_errors=True)
        if server is not None:
            # cold over SSH: empty cache, so the snapshot is copied and the index built by this run.
            cold_ssh = {"before": [], "cold": []}
            argv = commands["why over SSH"][0]
            for i in range(args.repeat):
                for name in ("before", "cold"):
                    cache = work / f"cache-sshcold-{name}-{i}"
                    _seed_cache(cache)
                    cold_ssh[name].append(_timed(kits[name].argv(*argv), kits[name].environ(cache)))
                    shutil.rmtree(cache, ignore_errors=True)
            rows["why over SSH, cold snapshot"] = {"before": cold_ssh["before"], "off": [], "cold": cold_ssh["cold"],
                                                   "warm": []}
            ssh = ["ssh", "-F", str(server.ssh_config), server.alias]
            floor = {"grep -rn over SSH": [*ssh, f"grep -rn {FLAG} {pkg}/srt/server_args.py"],
                     "sed -n over SSH": [*ssh, f"sed -n 1190,1240p {pkg}/srt/server_args.py"]}
            for label, argv in floor.items():
                rows[label] = {"before": [_timed(argv, dict(os.environ)) for _ in range(args.repeat)],
                               "off": [], "cold": [], "warm": []}
            rows.update(_kept_rows(kits["warm"], work, commands, args.repeat))
            opened = {"grep -rn, open connection": ["grep", "-rn", FLAG, f"{pkg}/srt/server_args.py"],
                      "sed -n, open connection": ["sed", "-n", "1190,1240p", f"{pkg}/srt/server_args.py"]}
            for label, argv in opened.items():
                rows[label] = {"before": _on_open_connection(server, argv, args.repeat), "off": [], "cold": [],
                               "warm": []}
        sizes = _index_sizes(kits["cold"], work, {"0.5.11": pkg, "0.5.23": pkg23})
    finally:
        if factory is not None:
            factory.stop_all()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nwall seconds (CPU seconds: user+sys of the process), median of {args.repeat}; before = {args.before}; "
          f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")
    print(f"{'':34} {'before':>13} {'index off':>13} {'index cold':>13} {'index warm':>13}")
    for label, cells in rows.items():
        print(f"{label:34} " + " ".join(f"{_median(cells[n]):>13}" for n in ("before", "off", "cold", "warm")))
    print("(the floor rows are in the first column: they do not depend on the kit)")
    print("\nthe index per tree:")
    print("\n".join(sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
