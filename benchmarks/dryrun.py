"""Dry-run costs and results, measured side by side in one run.

- setup: building the sglang 0.5.11 environment cold (in a throw-away cache, with the
  sglang wheel copied over so no sglang download is timed; pip's own download cache
  is used as it would be on a second machine setup) against the same call when the
  environment is complete; and the environment's size on disk.
- one dry-run: `sgl-kit dryrun ...` end to end as a user runs it (a new process that
  imports sglang), split into sglang's import and `ServerArgs.__post_init__`; and five
  launches in one process (`resolve_many`, one import, a fork per launch) against five
  separate `resolve` calls.
- versions: the incident's new launch under every supported sglang version that is set
  up (`--all-versions` sets them up), with the site that turns piecewise CUDA graphs off.
- the change list of the incident's new launch, exactly as the CLI prints it.

Usage: python benchmarks/dryrun.py [--cold] [--all-versions]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kit.dryrun as dryrun  # noqa: E402
from kit.source import cache_dir  # noqa: E402

SNAPSHOT = ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json"
SGL_KIT = Path(sys.executable).with_name("sgl-kit")


def _new_launch() -> list[str]:
    """The incident's new launch, as recorded in the committed lab snapshot."""
    argv = shlex.split(json.loads(SNAPSHOT.read_text())["made_by"])
    cut = argv.index("--")
    options = argv[2:cut]
    drop = {"--save"}
    kept, skip = [], False
    for tok in options:
        if skip:
            skip = False
        elif tok in drop:
            skip = True
        else:
            kept.append(tok)
    return kept + ["--"] + argv[cut + 1 :]


def _flags(launch: list[str]) -> list[str]:
    return launch[launch.index("--") + 1 :]


def _model() -> Path:
    return ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"


def _du(path: Path) -> str:
    proc = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, timeout=120)
    return proc.stdout.split()[0] if proc.returncode == 0 else "?"


def bench_setup(cold: bool) -> list[tuple[str, str]]:
    rows = []
    if cold:
        with tempfile.TemporaryDirectory(prefix="sgl-kit-cold-") as tmp:
            wheels = Path(tmp) / "wheels"
            wheels.mkdir()
            for wheel in (cache_dir() / "wheels").glob("sglang-0.5.11-*.whl"):
                shutil.copy(wheel, wheels)
            env = dict(os.environ, SGL_KIT_CACHE=tmp)
            t0 = time.perf_counter()
            proc = subprocess.run([str(SGL_KIT), "dryrun", "setup", "--sglang", "0.5.11"], env=env,
                                  capture_output=True, text=True, timeout=3600)
            cold_s = time.perf_counter() - t0
            steps = [line for line in proc.stderr.splitlines() if ": done in" in line]
            rows.append(("setup, cold (fresh cache)", f"{cold_s:.1f} s (exit {proc.returncode})"))
            rows += [("  " + line.split("] ", 1)[1].split(": done")[0], line.rsplit("done in ", 1)[1])
                     for line in steps]
            built = next(Path(tmp, "dryrun").glob("sglang-0.5.11-*"), None)
            rows.append(("  environment size (du -sh)", _du(built) if built else "(not built)"))
    t0 = time.perf_counter()
    report = dryrun.setup("0.5.11")
    rows.append(("setup, cached (environment complete)", f"{time.perf_counter() - t0:.3f} s"))
    rows.append(("environment size (du -sh)", f"{_du(report.env.path)}  {report.env.path}"))
    return rows


def bench_one_dry_run() -> tuple[list[tuple[str, str]], str]:
    launch = _new_launch()
    t0 = time.perf_counter()
    proc = subprocess.run([str(SGL_KIT), "dryrun", *launch], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    result = dryrun.dry_run(_flags(launch), model=_model(), gpu="a6000", tp=2)
    rows = [
        ("one dry-run, `sgl-kit dryrun ...` end to end", f"{wall:.1f} s (exit {proc.returncode})"),
        ("  of which sglang import in the environment", f"{result.import_seconds:.1f} s"),
        ("  of which ServerArgs.__post_init__", f"{result.seconds * 1000:.0f} ms"),
    ]
    return rows, proc.stdout


def bench_batch() -> list[tuple[str, str]]:
    flags = _flags(_new_launch())
    launches = [flags, flags + ["--enforce-piecewise-cuda-graph"], flags + ["--page-size", "16"],
                flags + ["--chunked-prefill-size", "8192"], flags + ["--max-running-requests", "8"]]
    t0 = time.perf_counter()
    dryrun.dry_run_many(launches, model=_model(), gpu="a6000", tp=2)
    batch = time.perf_counter() - t0
    t0 = time.perf_counter()
    for launch in launches:
        dryrun.dry_run(launch, model=_model(), gpu="a6000", tp=2)
    separate = time.perf_counter() - t0
    return [("five launches, one process (resolve_many)", f"{batch:.1f} s"),
            ("five launches, five processes (resolve x5)", f"{separate:.1f} s")]


def bench_versions(all_versions: bool) -> list[tuple[str, ...]]:
    rows = []
    for version in dryrun.supported_versions():
        env = dryrun.environment(version)
        if not env.ready and not all_versions:
            rows.append((version, "not set up (pass --all-versions)", "", "", ""))
            continue
        t0 = time.perf_counter()
        result = dryrun.dry_run(_flags(_new_launch()), model=_model(), gpu="a6000", tp=2, sglang=version,
                                install=all_versions)
        seconds = time.perf_counter() - t0
        piecewise = result.changes_to("disable_piecewise_cuda_graph")
        site = f"{piecewise[0].where} {piecewise[0].function}" if piecewise else "no change"
        silent = "silent" if piecewise and piecewise[0].silent else "-"
        rows.append((version, f"{len(result.changes)} changes", site, silent, f"{seconds:.1f} s"))
    return rows


def _table(rows, heads) -> str:
    widths = [max(len(str(r[i])) for r in [heads, *rows]) for i in range(len(heads))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [heads, *rows]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="also time a cold setup in a throw-away cache")
    parser.add_argument("--all-versions", action="store_true", help="set up every supported version first")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}\n")
    print(_table(bench_setup(args.cold), ("setup", "time")), "\n")
    one, printed = bench_one_dry_run()
    print(_table(one + bench_batch(), ("dry-run", "time")), "\n")
    print(_table(bench_versions(args.all_versions),
                 ("sglang", "changes", "disable_piecewise_cuda_graph set at", "log", "dry-run")), "\n")
    print("the incident's new launch, as `sgl-kit dryrun` prints it:")
    print("$ sgl-kit dryrun " + shlex.join(_new_launch()))
    print(printed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
