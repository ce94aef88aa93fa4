"""Secrets planted in every input the kit reads, then every output it gives grepped for them: the table.

The sweep of ``tests/test_secret_sweep.py`` (``tests/_secret_sweep.py``): one value per kind of secret
(detect-secrets' detectors, the kit's own rules, secret-named flags and variables, URL passwords) planted
in a launch command, an environment file, a server log, a saved ``/server_info``, an issue body, the live
lab's flags and environment, the kit's own environment and arguments, and a notebook that prints its
environment; then every ``sgl-kit`` command that reads them, the guided notebook 02_config against the lab
and ``sgl-kit report``, each with a temporary HOME, kit cache and working directory. Every stdout, stderr
and file written is grepped for each value (plain, JSON- and HTML-escaped, URL-encoded, base64 at each
alignment, a piece of it). Printed: one row per planted value, kind | where planted | under | places
checked | survivors; then the commands with their time, and any survivor by place.

    .venv/bin/python benchmarks/secret_sweep.py [--keep DIR]

Exit status 1 when a value survives or a command that masked something does not say how many.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import _secret_sweep as sweep_support  # noqa: E402
from _lab_support import free_port  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", help="directory to run in and keep (default: a temporary one, removed)")
    opts = ap.parse_args()
    root = Path(opts.keep or tempfile.mkdtemp(prefix="secret-sweep-"))
    start = time.perf_counter()
    try:
        sweep = sweep_support.prepare(root, free_port(), free_port())
        sweep_support.run_all(sweep)
        checked = sweep_support.places(sweep)
        found = sweep_support.survivors(sweep, checked)
        unsaid = sweep_support.unsaid(sweep)
        print(sweep_support.table(sweep, found, len(checked)))
        print(f"\n{len(sweep.secrets)} values planted in {len({p.where for p in sweep.secrets})} places; "
              f"{len(checked)} places checked ({len(sweep.outputs)} commands' stdout and stderr, "
              f"{len(checked) - 2 * len(sweep.outputs)} files); {len(found)} survivors; "
              f"{time.perf_counter() - start:.0f} s")
        print("\ncommands:")
        for o in sweep.outputs:
            print(f"  {o.seconds:6.1f} s  exit {o.code}  {o.name}")
        for s in found:
            print(f"SURVIVOR {s.planted.kind} from {s.planted.where} ({s.planted.name}) in {s.place} as {s.form}")
        for name in unsaid:
            print(f"UNSAID {name}: masked something without saying how many")
        return 1 if found or unsaid else 0
    finally:
        if not opts.keep:
            sweep_support.cleanup(root)


if __name__ == "__main__":
    sys.exit(main())
