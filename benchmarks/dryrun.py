"""Dry-run costs and results, measured side by side in one run.

- setup: building the sglang 0.5.11 environment cold (in a throw-away cache, with the
  sglang wheel copied over so no sglang download is timed; pip's own download cache
  is used as it would be on a second machine setup) against the same call when the
  environment is complete; and the environment's size on disk.
- one dry-run: `sgl-kit dryrun ...` end to end as a user runs it (a new process that
  imports sglang), split into sglang's import and `ServerArgs.__post_init__`; and five
  launches in one process (`dry_run_many`, one import, a fork per launch) against five
  separate `dry_run` calls.
- versions: the incident's new launch under every sglang version the kit knows here
  (`--all-versions` sets them up): status (verified or best-effort), environment size, a cold
  run (a new process importing sglang), a warm one in-process and one through `sgl-kit` (the
  worker already running), and what the prefill CUDA graph resolves to, and where.
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
    proc = subprocess.run([str(SGL_KIT), "dryrun", "--cold", *launch], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    result = dryrun.dry_run(_flags(launch), model=_model(), gpu="a6000", tp=2, warm=False)
    rows = [
        ("one cold dry-run, `sgl-kit dryrun --cold ...` end to end", f"{wall:.1f} s (exit {proc.returncode})"),
        ("  of which sglang import in the environment", f"{result.import_seconds:.1f} s"),
        ("  of which ServerArgs.__post_init__", f"{result.seconds * 1000:.0f} ms"),
    ]
    return rows, proc.stdout


def bench_batch() -> list[tuple[str, str]]:
    flags = _flags(_new_launch())
    launches = [flags, flags + ["--enforce-piecewise-cuda-graph"], flags + ["--page-size", "16"],
                flags + ["--chunked-prefill-size", "8192"], flags + ["--max-running-requests", "8"]]
    t0 = time.perf_counter()
    dryrun.dry_run_many(launches, model=_model(), gpu="a6000", tp=2, warm=False)
    batch = time.perf_counter() - t0
    t0 = time.perf_counter()
    for launch in launches:
        dryrun.dry_run(launch, model=_model(), gpu="a6000", tp=2, warm=False)
    separate = time.perf_counter() - t0
    dryrun.dry_run(launches[0], model=_model(), gpu="a6000", tp=2)  # the worker, started
    t0 = time.perf_counter()
    for launch in launches:
        dryrun.dry_run(launch, model=_model(), gpu="a6000", tp=2)
    warm = time.perf_counter() - t0
    return [("five launches, one cold process (dry_run_many)", f"{batch:.1f} s"),
            ("five launches, five cold processes (dry_run x5)", f"{separate:.1f} s"),
            ("five launches, five warm calls (dry_run x5)", f"{warm:.2f} s")]


def _launch_for(version: str) -> tuple[list[str], str]:
    """The incident's new launch in this version's words: 0.5.2x renamed --mamba-scheduler-strategy,
    and releases before 0.5.10 do not have it (both refuse the 0.5.11 spelling)."""
    flags = _flags(_new_launch())
    probe = dryrun.dry_run(flags, model=_model(), gpu="a6000", tp=2, sglang=version)
    if probe.error is None or probe.error.kind != "arguments" or "--mamba-scheduler-strategy" not in probe.error.message:
        return flags, ""
    renamed = ["--mamba-radix-cache-strategy" if f == "--mamba-scheduler-strategy" else f for f in flags]
    probe = dryrun.dry_run(renamed, model=_model(), gpu="a6000", tp=2, sglang=version)
    if probe.error is None or probe.error.kind != "arguments":
        return renamed, "--mamba-radix-cache-strategy"
    cut = flags.index("--mamba-scheduler-strategy")
    return flags[:cut] + flags[cut + 2 :], "without --mamba-scheduler-strategy"


def _prefill_graph(result) -> str:
    """What the prefill CUDA graph resolves to, in this version's own fields, and where it was decided."""
    final = result.final or result.initial
    config = final.get("cuda_graph_config")
    nested = [c for c in result.changes if c.field == "cuda_graph_config.prefill.backend"]
    if nested:  # 0.5.1x: written in place on the config object
        value, sites = f"cuda_graph_config.prefill.backend={nested[-1].after!r}", nested
    elif isinstance(config, dict) and isinstance(config.get("prefill"), dict):
        value = f"cuda_graph_config.prefill.backend={config['prefill'].get('backend')!r}"
        sites = [c for c in result.changes if c.field == "cuda_graph_config.prefill.backend"]
    elif "disable_piecewise_cuda_graph" in final:
        value = f"disable_piecewise_cuda_graph={final['disable_piecewise_cuda_graph']}"
        sites = result.changes_to("disable_piecewise_cuda_graph")
    elif "enable_piecewise_cuda_graph" in final:
        value = f"enable_piecewise_cuda_graph={final['enable_piecewise_cuda_graph']} (opt-in)"
        sites = result.changes_to("enable_piecewise_cuda_graph")
    else:
        return "?"
    site = f" at {sites[-1].where} {sites[-1].function}" + (" (silent)" if sites[-1].silent else "") if sites else ""
    return value + site


def bench_versions(all_versions: bool) -> list[tuple[str, ...]]:
    """Per version: its status, environment size, a cold run, a warm run in-process and through the CLI."""
    rows = []
    versions = {row.version: row for row in dryrun.versions()}
    for version, row in versions.items():
        env = dryrun.environment(version)
        if not env.ready and not all_versions:
            rows.append((version, row.status, "not set up", "", "", "", "pass --all-versions to set it up"))
            continue
        if not env.ready:
            dryrun.setup(version)
        flags, how = _launch_for(version)
        dryrun.stop_workers(version)
        t0 = time.perf_counter()
        result = dryrun.dry_run(flags, model=_model(), gpu="a6000", tp=2, sglang=version, warm=False)
        cold = time.perf_counter() - t0
        dryrun.dry_run(flags, model=_model(), gpu="a6000", tp=2, sglang=version)  # starts the worker
        t0 = time.perf_counter()
        warm_result = dryrun.dry_run(flags, model=_model(), gpu="a6000", tp=2, sglang=version)
        warm = time.perf_counter() - t0
        argv = [str(SGL_KIT), "dryrun", "--sglang", version, "--model", str(_model().parent), "--gpu", "a6000",
                "--tp", "2", "--", *flags]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        cli = time.perf_counter() - t0
        assert warm_result.warm, warm_result.notes
        error = f"; {result.error.kind} error: {result.error.message[:60]}" if result.error else ""
        rows.append((version, row.status, f"{env.size_bytes() / 1e9:.2f} GB", f"{cold:.1f} s", f"{warm:.2f} s",
                     f"{cli:.2f} s (exit {proc.returncode})",
                     _prefill_graph(result) + (f" [{how}]" if how else "") + error))
    dryrun.stop_workers()
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
    from kit.dryrun._worker import RUN_DIR_ENV

    os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="sgl-kit-bench-run-")  # its own workers, stopped at the end
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}\n")
    print(_table(bench_setup(args.cold), ("setup", "time")), "\n")
    one, printed = bench_one_dry_run()
    print(_table(one + bench_batch(), ("dry-run", "time")), "\n")
    dryrun.stop_workers()
    print(_table(bench_versions(args.all_versions),
                 ("sglang", "status", "env size", "cold", "warm", "warm via CLI", "prefill CUDA graph")), "\n")
    print("the incident's new launch, as `sgl-kit dryrun` prints it:")
    print("$ sgl-kit dryrun " + shlex.join(_new_launch()))
    print(printed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
