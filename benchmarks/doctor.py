"""`sgl-kit doctor`: how long it takes, and the manual path it replaces, side by side.

Rows (each a fresh `sgl-kit` process, as a person runs it):

- ``doctor lab --baseline old.cmd``, cold: an empty kit cache (``SGL_KIT_CACHE`` is a new
  directory; the lab keeps running from its own directory) and no byte-code of the kit
  (``PYTHONDONTWRITEBYTECODE``, ``__pycache__`` moved aside); then warm: the same again.
- ``doctor --log ... --sglang 0.5.11`` offline, source cached; and with the sglang source not
  yet cached (``pip download --no-deps`` of the wheel, which needs the package index).

The manual path is counted from what the doctor reads: each command it runs on the target
(``ps``, ``/proc``, ``nvidia-smi`` x3, the log, ``/server_info``, ``pip show``) is one command a
person types, and each source location it cites or evaluates (the sites of its findings and
the guard lines on the way) is one ``sed -n`` read. The incident's engineer made "dozens of SSH
commands and sed -n reads" by hand.

Usage: python benchmarks/doctor.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SGL_KIT = str(Path(sys.executable).parent / "sgl-kit")
LOG = ROOT / "tests" / "data" / "provenance" / "incident-0.5.11.log"
CONFIG = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
TOPO = ROOT / "tests" / "data" / "hardware" / "topo_2x_rtx5090_pcie_phb_tabs.txt"


def timed(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    return time.perf_counter() - start, proc


def hide_bytecode() -> list[tuple[Path, Path]]:
    moved = []
    for cache in (ROOT / "kit").rglob("__pycache__"):
        target = cache.with_name("__pycache__.bench-aside")
        cache.rename(target)
        moved.append((target, cache))
    return moved


def restore(moved: list[tuple[Path, Path]]) -> None:
    for aside, original in moved:
        if original.exists():
            shutil.rmtree(original)
        aside.rename(original)


def manual_count(env: dict, baseline: str) -> dict:
    """Commands on the target and source reads the doctor's answer rests on."""
    code = f"""
import json, kit.hosts.base as base
runs = []
original = base.Host.run
def run(self, argv, *a, **k):
    runs.append(" ".join(map(str, argv))[:60])
    return original(self, argv, *a, **k)
base.Host.run = run
from kit.doctor import doctor
d = doctor("lab", baseline={baseline!r})
sites = {{s for f in d.findings for s in f.sites}}
evidence = sum(len(f.evidence) for f in d.findings)
print(json.dumps({{"runs": runs, "sites": sorted(sites), "evidence": evidence, "findings": len(d.findings)}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def guard_lines(env: dict) -> int:
    """Distinct source lines the prefill and speculative findings evaluated (each a `sed -n` by hand)."""
    code = """
import json
from kit.doctor import from_server, diagnose
from kit.doctor.case import Case
from kit.target import resolve_server
from kit.target import connect
with connect("lab") as host:
    ev = from_server(host, resolve_server(host, "lab"))
case = Case(ev)
lines = set()
for name in ("disable_piecewise_cuda_graph", "speculative_num_steps", "max_running_requests"):
    exp = case.explain(name)
    for s in exp.sites:
        lines.add((s.file, s.line))
        for g in s.guards:
            lines.add((s.file, g.line))
print(len(lines))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="warm runs per row (median)")
    args = parser.parse_args()

    from kit.lab import status as lab_status

    if not lab_status().running:
        print("the lab is not running: `sgl-kit lab up` first", file=sys.stderr)
        return 2
    record = json.loads((ROOT / "kit" / "data" / "resolved" / "incident-old-0.5.11.json").read_text())
    scratch = Path(tempfile.mkdtemp(prefix="sgl-kit-bench-doctor-"))
    baseline = scratch / "old.cmd"
    baseline.write_text("python -m sglang.launch_server " + " ".join(record["argv"]) + "\n")
    lab_dir = os.environ.get("SGL_KIT_LAB_DIR") or str(Path(os.environ.get("SGL_KIT_CACHE", Path.home() / ".cache"
                                                                            / "sglang-investigation-kit")) / "lab")
    env = dict(os.environ, SGL_KIT_LAB_DIR=lab_dir)
    rows = []

    lab_argv = [SGL_KIT, "--json", "doctor", "lab", "--baseline", str(baseline)]
    cold_env = dict(env, SGL_KIT_CACHE=str(scratch / "empty-cache"), PYTHONDONTWRITEBYTECODE="1")
    moved = hide_bytecode()
    try:
        cold, proc = timed(lab_argv, cold_env)
    finally:
        restore(moved)
    assert proc.returncode == 0, proc.stderr
    found = [f["id"] for f in json.loads(proc.stdout)["findings"]]
    warm = statistics.median(timed(lab_argv, env)[0] for _ in range(args.runs))
    rows.append(("doctor lab --baseline old.cmd", cold, warm, "20 / 5", ", ".join(found[:2])))

    files_argv = [SGL_KIT, "--json", "doctor", "--log", str(LOG), "--model-config", str(CONFIG), "--sglang",
                  "0.5.11", "--topo", str(TOPO), "--gpu", "a6000"]
    warm_files = statistics.median(timed(files_argv, env)[0] for _ in range(args.runs))
    uncached, proc = timed(files_argv, dict(env, SGL_KIT_CACHE=str(scratch / "empty-cache-2")))
    note = "source downloaded" if proc.returncode == 0 else "download failed: " + proc.stderr.strip()[-80:]
    rows.append(("doctor --log --sglang 0.5.11 (offline)", uncached, warm_files, "- / 5", note))

    print(f"{'path':42} {'cold s':>8} {'warm s':>8} {'budget s':>9}  notes")
    for name, c, w, budget, extra in rows:
        print(f"{name:42} {c:8.2f} {w:8.2f} {budget:>9}  {extra}")

    counted = manual_count(env, str(baseline))
    reads = guard_lines(env)
    print()
    print("the manual path it replaces (lab target, the incident's new launch):")
    print(f"  commands on the target the doctor ran:     {len(counted['runs'])}  "
          f"({'; '.join(sorted(set(r.split()[0] for r in counted['runs'])))})")
    print(f"  source lines it evaluated (sed -n reads):  {reads}  (sites and their guards, 3 flags)")
    print(f"  findings / evidence lines / cited sites:   {counted['findings']} / {counted['evidence']} / "
          f"{len(counted['sites'])}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
