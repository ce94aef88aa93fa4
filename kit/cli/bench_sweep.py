"""``sgl-kit bench sweep TARGET_OR_URL --concurrency 1,2,4,8 [--slo ...]`` and the comparison of two sweeps.

The options are ``sgl-kit bench``'s (kit/cli/bench.py registers them); this module reads the ones a sweep
adds: ``--concurrency`` as a list, ``--slo`` and ``--slo-fraction``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from kit.bench.config import DEFAULT_PORT
from kit.errors import BenchError

from .common import emit_json, host_for, server_for, ssh_options

__all__ = ["DEFAULT_LEVELS", "cmd_compare_sweeps", "cmd_sweep", "concurrency_list", "goodput_of", "is_sweep",
           "one_concurrency", "slo_of"]

DEFAULT_LEVELS = [1, 2, 4, 8]
SLO_HELP = ("a latency objective: KEY=VALUE pairs joined by commas, KEY ttft (time to first token), itl (mean "
            "latency between tokens, per token) or e2e (whole request), VALUE with ms or s, e.g. "
            "ttft=500ms,itl=50ms; prints the goodput: the share of requests that met every objective (failed "
            "ones count as not) and how many such requests a second, as AIPerf and GuideLLM define it")


def concurrency_list(text: str) -> list[int]:
    """``--concurrency``: ``8`` or ``1,2,4,8`` (argparse's type; a bad value is a usage error)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(re.fullmatch(r"\d+", p) and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer or a comma list of them (e.g. 8, or "
                                         "1,2,4,8 for `bench sweep`)")
    levels = [int(p) for p in parts]
    if len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError(f"{text!r} names a concurrency twice")
    return levels


def one_concurrency(levels: list[int] | None) -> int:
    """The concurrency of a plain bench: one value (default 1); a list is for `bench sweep`."""
    if not levels:
        return 1
    if len(levels) > 1:
        raise BenchError(f"a plain bench runs at one concurrency, not {','.join(map(str, levels))}",
                         hint=f"measure each with `sgl-kit bench sweep TARGET_OR_URL --concurrency "
                              f"{','.join(map(str, levels))}`, or give one value: -c {levels[0]}")
    return levels[0]


def slo_of(args):
    """The SLO of ``--slo`` (None without it), read before anything runs, so that a typo costs nothing."""
    from kit.bench import parse_slo

    fraction = getattr(args, "slo_fraction", 0.9)
    if not 0 < fraction <= 1:
        raise BenchError(f"--slo-fraction must be above 0 and at most 1, not {fraction:g}", hint="e.g. 0.9 (90%)")
    return parse_slo(args.slo) if getattr(args, "slo", None) else None


def goodput_of(run, slo):
    """The goodput of a finished plain bench (None without an SLO)."""
    from kit.bench import goodput

    return goodput(run, slo) if slo is not None else None


def is_sweep(path) -> bool:
    """Whether ``path`` is a sweep's manifest (sweep.json) or a directory holding one."""
    from kit.bench.sweeps import is_sweep_path

    return is_sweep_path(path)


def cmd_sweep(args) -> int:
    """``sgl-kit bench sweep TARGET_OR_URL``: one run per concurrency, in order, and the table."""
    from kit.bench.sweeps import MANIFEST, sweep_dir

    if len(args.runs) != 1:
        raise BenchError(f"sweep takes one target, got {len(args.runs)}: {' '.join(args.runs) or 'none'}",
                         hint="sgl-kit bench sweep TARGET_OR_URL --concurrency 1,2,4,8 [--slo ttft=500ms,itl=50ms]")
    slo = slo_of(args)
    levels = args.concurrency or DEFAULT_LEVELS
    args.target = args.runs[0]  # what the target helpers read
    out = Path(args.out) if args.out else sweep_dir()
    options = {"api": args.api, "rate": args.rate, "warmup": args.warmup, "max_tokens": args.max_tokens,
               "ignore_eos": args.ignore_eos, "input_len": args.input_len, "input_len_min": args.input_len_min,
               "prompts_file": args.prompts, "model": args.model, "stall_timeout": args.stall_timeout,
               "server_metrics_interval": args.server_metrics_interval}
    try:
        result = _run(args, levels, out, slo, options)
    except KeyboardInterrupt:
        sys.stderr.write(f"sgl-kit: interrupted; the finished points are in {out / MANIFEST}\n")
        return 130
    limit = result.max_load(fraction=args.slo_fraction) if slo is not None else None
    if args.json:
        emit_json({"sweep": result.to_dict(), "max_load": limit.to_dict() if limit else None})
    else:
        text = result.to_text()
        if limit is not None:
            text += f"\nmost load within the SLO: {limit.why}"
        sys.stdout.write(text + "\n")
    return 0


def _run(args, levels: list[int], out: Path, slo, options: dict):
    """kit.bench.sweep at the target: a URL as it is; the lab's server found once; else --port on the target."""
    from kit.bench import sweep
    from kit.target import parse_target

    common = {"out_dir": out, "slo": slo, "requests": args.requests, "label": args.label, **options}
    if args.target.startswith(("http://", "https://")):
        return sweep(args.target, levels, **common)
    if parse_target(args.target)["kind"] == "lab":
        with host_for(args) as host:
            return sweep(args.target, levels, server=server_for(host, args, required=True), **common)
    return sweep(args.target, levels, port=DEFAULT_PORT if args.port is None else args.port,
                 ssh_options=ssh_options(args), **common)


def cmd_compare_sweeps(path_a, path_b, args) -> int:
    """``sgl-kit bench compare A B`` of two sweeps: where one dominates, and the plot written beside B's manifest."""
    from kit.bench import compare_sweeps

    result = compare_sweeps(path_a, path_b)
    page = result.b.dir / f"compare-{_safe(result.a.name)}-vs-{_safe(result.b.name)}.html"
    result.save_html(page)
    if getattr(args, "json", False):
        emit_json({**result.to_dict(), "html": str(page)})
    else:
        sys.stdout.write(result.to_text() + f"\nthe plot (self-contained HTML): {page}\n")
    return 0


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "sweep"
