"""``sgl-kit dryrun ...`` and ``sgl-kit why FLAG --dryrun ...``: sglang's own resolution, on CPU.

``why`` adds :func:`add_why_options` and, when ``--dryrun`` is given, hands over to
:func:`cmd_why_dryrun`. Everything after ``--`` on the command line (``args.cmd``) is
sglang's own flags.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from kit.errors import DryRunError, NotGiven

from .common import emit_json, launch_options

__all__ = ["add_why_options", "cmd_why_dryrun", "command_line", "register"]

USAGE = "sgl-kit dryrun [setup|run|gpus|versions|worker [status|stop]] --sglang VERSION " \
        "[--model DIR_OR_CONFIG_JSON] [--gpu GPU] [--tp N] [--env K=V] [--cold] [--json] [--save FILE] " \
        "-- SGLANG_FLAGS..."

DESCRIPTION = """\
Resolve the server arguments sglang would run with, using sglang's own code, on this
machine (no GPU needed): the exact server_args=ServerArgs(...) line, every value sglang
changed on its own during ServerArgs.__post_init__ (with the function and line that
changed it, and whether it logged anything), and any error sglang would stop with.

actions:
  run       (the default) resolve one launch; its flags come after --
  setup     build the dry-run environment for --sglang VERSION (about 1.2 GB, once)
  gpus      list the GPU profiles
  versions  list the sglang versions: "verified" (a hand-pinned package list, tested) or
            "best-effort" (any other 0.5.x from 0.5.6 on: the list is made from the sglang
            wheel's own requirements), and whether each is set up (--released: every release)
  worker    the warm workers: `worker status` (the default) or `worker stop [--sglang V]`

A run goes to a warm worker that keeps sglang imported between calls (started on first use,
it exits after $SGL_KIT_DRYRUN_IDLE seconds idle, default 600); --cold or
SGL_KIT_DRYRUN_WARM=0 runs a new process instead. Both give the same result.

exit status: 0 resolved, 1 sglang would refuse to start, 2 the kit could not do it.
"""

EXAMPLES = """\
examples:
  sgl-kit dryrun setup --sglang 0.5.11
  sgl-kit dryrun --sglang 0.5.11 --model ./config.json --gpu a6000 --tp 2 -- \\
      --speculative-algorithm EAGLE --mamba-scheduler-strategy extra_buffer
  sgl-kit why disable_piecewise_cuda_graph --dryrun --sglang 0.5.11 --gpu a6000 --model ./config.json --tp 2 -- \\
      --speculative-algorithm EAGLE --mamba-scheduler-strategy extra_buffer
"""


def _launch_options(p: argparse.ArgumentParser, *, for_why: bool) -> None:
    g = p.add_argument_group("dry-run" if for_why else "launch")
    g.add_argument("--sglang", metavar="VERSION", default=None,
                   help="the sglang release the target runs (its log, /server_info or `pip show sglang` says); "
                        "required to resolve or set up")
    launch_options(g)
    g.add_argument("--install", action="store_true",
                   help="build the dry-run environment first if it is missing")
    g.add_argument("--cold", action="store_true",
                   help="run in a new process that imports sglang, not in the warm worker "
                        "(also: SGL_KIT_DRYRUN_WARM=0)")
    g.add_argument("--torch-wheel", metavar="FILE", help="setup: install torch from this wheel (a CPU build)")
    g.add_argument("--torch-index-url", metavar="URL",
                   help="setup: an index with the CPU build of torch (default: https://download.pytorch.org/whl/cpu, "
                        "tried when pip finds no CPU build by itself)")
    g.add_argument("--allow-cuda-torch", action="store_true",
                   help="setup: when no CPU build is found, take the package index's torch, the CUDA build "
                        "(several GB with its CUDA libraries; the size is printed)")


def register(sub) -> None:
    p = sub.add_parser("dryrun", help="resolve sglang's effective args for a launch, without a GPU",
                       usage=USAGE, description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", default="run", choices=("run", "setup", "gpus", "versions", "worker"))
    p.add_argument("worker_action", nargs="?", choices=("status", "stop"), metavar="status|stop",
                   help="worker: show the warm workers (default) or stop them")
    _launch_options(p, for_why=False)
    p.add_argument("--released", action="store_true",
                   help="versions: also list every sglang release in range (asks the package index)")
    p.add_argument("--save", metavar="FILE",
                   help="also write the JSON result to FILE, with the command that made it")
    # SUPPRESS keeps `sgl-kit --json dryrun ...` working: the top-level parser owns the default.
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")
    p.set_defaults(func=cmd_dryrun)


def add_why_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dryrun", action="store_true",
                   help="also resolve the launch given after -- with the real sglang code (see "
                        "`sgl-kit dryrun -h`) and check that both readings name the same sites")
    _launch_options(p, for_why=True)


# --------------------------------------------------------------------------- handlers


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise DryRunError(f"--env takes KEY=VALUE, not {pair!r}")
        out[key] = value
    return out


def _progress(step) -> None:
    sys.stderr.write(f"{step}\n")
    sys.stderr.flush()


def _no_version():
    from kit.dryrun import versions

    ready = [v.version for v in versions() if v.state == "ready"]
    raise NotGiven("which sglang release to run is not given: the dry-run runs the target's version, and no "
                   "default stands in for it",
                   hint="add --sglang VERSION: the version in the server's log, its /server_info, or `pip show "
                        "sglang` on the box" + (f" (set up here: {', '.join(ready)})" if ready else ""))


def cmd_dryrun(args) -> int:
    explicit_version = args.sglang
    if args.action in ("run", "setup") and not args.sglang:
        _no_version()
    if args.action == "worker":
        return _worker(args, explicit_version)
    if args.worker_action:
        raise DryRunError(f"`{args.worker_action}` goes with `sgl-kit dryrun worker`, not `{args.action}`")
    action = {"setup": _setup, "gpus": _gpus, "versions": _versions}.get(args.action, _resolve)
    return action(args)


def _setup(args) -> int:
    from kit.dryrun import setup

    report = setup(args.sglang, progress=None if getattr(args, "json", False) else _progress,
                   torch_wheel=args.torch_wheel, torch_index_url=args.torch_index_url,
                   allow_cuda_torch=args.allow_cuda_torch)
    info = report.env.check_info()
    if getattr(args, "json", False):
        emit_json({"version": report.env.version, "path": str(report.env.path), "seconds": report.seconds,
               "cached": report.cached, "check": info,
               "steps": [{"name": s.name, "label": s.label, "state": s.state, "seconds": s.seconds}
                         for s in report.steps]})
        return 0
    versions = info.get("versions", {})
    state = "already set up" if report.cached else f"set up in {report.seconds:.0f}s"
    sys.stdout.write(f"sglang {report.env.version} dry-run environment {state}: {report.env.path}\n")
    sys.stdout.write(f"  python {versions.get('python')}, torch {versions.get('torch')}, "
                     f"transformers {versions.get('transformers')}\n")
    if info.get("probes_missing"):
        sys.stdout.write(f"  note: this sglang lacks probes {', '.join(info['probes_missing'])}; "
                         "they answer as on this machine\n")
    return 0


def _gpus(args) -> int:
    from kit.dryrun import gpu_profiles
    from kit.hardware_caps import capabilities

    profiles = gpu_profiles()
    caps = {k: capabilities(p) for k, p in profiles.items()}
    if getattr(args, "json", False):
        emit_json({k: {**p.to_dict(), "capabilities": caps[k].to_dict() if caps[k] else None}
                   for k, p in profiles.items()})
        return 0
    sys.stdout.write(f"{len(profiles)} GPUs; --gpu takes the key or the name nvidia-smi prints. Figures are datasheet "
                     "peaks (bf16 dense, no sparsity; - where the datasheet gives none); fp8/fp4: tensor formats of "
                     "the architecture; p2p and nvlink: how boards reach each other (kit/data/gpu_capabilities.yaml); "
                     "`--json` adds each source\n")
    for key, p in profiles.items():
        flags = "hopper" if p.hopper else "blackwell" if p.blackwell else ""
        if p.vendor != "nvidia":
            flags = "roofline only: the dry-run does not emulate ROCm"
        flops = f"{p.bf16_tflops:g}" if p.bf16_tflops is not None else "-"
        c = caps[key]
        formats = "/".join(f for f, on in (("fp8", c and c.fp8), ("fp4", c and c.fp4)) if on) or "-"
        links = f"p2p {c.links.p2p}, nvlink {c.links.nvlink}" if c is not None and c.links else "links unknown"
        sys.stdout.write(f"{key:<15} {p.name:<50} {p.arch:<7} {p.memory_mib:>6} MiB  {p.bandwidth_gbs:>6g} GB/s  "
                         f"{flops:>6} TFLOP/s bf16  {formats:<7} {links:<34} {flags}".rstrip() + "\n")
    return 0


def _versions(args) -> int:
    from kit.dryrun import versions

    rows = versions(sizes=True, released=getattr(args, "released", False))
    if getattr(args, "json", False):
        emit_json([row.to_dict() for row in rows])
        return 0
    sys.stdout.write(f"{'VERSION':<14} {'STATUS':<12} ENVIRONMENT\n")
    for row in rows:
        sys.stdout.write(f"{row}\n")
    sys.stdout.write("verified: a hand-pinned package list, resolved by the tests; best-effort: the list is made "
                     "from the wheel's own requirements (kit/data/dryrun/rules.yaml).\n"
                     "Any other sglang 0.5.x from 0.5.6 on is best-effort: sgl-kit dryrun setup --sglang X\n")
    return 0


def _worker(args, version: str | None) -> int:
    from kit.dryrun import stop_workers, workers

    if args.worker_action == "stop":
        stopped = stop_workers(version)
        if getattr(args, "json", False):
            emit_json([w.to_dict() for w in stopped])
            return 0
        for w in stopped:
            state = "stopped" if w.alive else "was not running (cleaned up)"
            sys.stdout.write(f"sglang {w.version} worker pid {w.pid}: {state}\n")
        if not stopped:
            sys.stdout.write("no warm dry-run worker is running\n")
        return 0
    found = workers()
    if getattr(args, "json", False):
        emit_json([w.to_dict() for w in found])
        return 0
    if not found:
        sys.stdout.write("no warm dry-run worker is running (the next dry-run starts one)\n")
    for w in found:
        if not w.alive:
            sys.stdout.write(f"sglang {w.version:<10} pid {w.pid:<8} dead (its state file is left; "
                             "`sgl-kit dryrun worker stop` cleans up)\n")
            continue
        rss = f"{w.rss_bytes / 2**20:.0f} MiB" if w.rss_bytes else "?"
        idle = f"idle {w.idle_seconds:.0f}s of {w.idle_timeout:.0f}s" if w.idle_seconds is not None else "busy"
        old = "" if w.current else "  (older kit code: replaced on next use)"
        sys.stdout.write(f"sglang {w.version:<10} pid {w.pid:<8} {rss:>9}  served {w.served or 0:<4} {idle}  "
                         f"log {w.log}{old}\n")
    return 0


def _resolve(args) -> int:
    from kit.dryrun import dry_run

    result = dry_run(args.cmd, model=args.model, gpu=args.gpu, tp=args.tp, sglang=args.sglang,
                     env=_env_pairs(args.env), install=args.install, warm=False if args.cold else None)
    for note in result.notes:
        sys.stderr.write(f"note: {note}\n")
    data = result.to_dict()
    if args.save:
        _save(args, data)
    if getattr(args, "json", False):
        emit_json(data)
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0 if result.error is None or result.error.kind == "environment" else 1


def command_line(args) -> str:
    """The command that makes this result again, in its canonical spelling."""
    parts = ["sgl-kit", "dryrun", "--sglang", args.sglang]
    parts += ["--model", args.model] if args.model else []
    parts += ["--gpu", args.gpu] + (["--tp", str(args.tp)] if args.tp else [])
    for pair in args.env:
        parts += ["--env", pair]
    parts += ["--save", args.save] if args.save else []
    return shlex.join([*parts, "--", *args.cmd])


def _save(args, data: dict) -> None:
    record = {"made_by": command_line(args), **data}
    path = args.save
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, default=str)
        fh.write("\n")


def cmd_why_dryrun(args) -> int:
    from kit.dryrun import why_with_dryrun

    if not args.sglang:
        _no_version()
    why = why_with_dryrun(args.flag, args.cmd, model=args.model or args.model_config, gpu=args.gpu,
                          tp=args.tp, sglang=args.sglang, env=_env_pairs(args.env), install=args.install)
    if getattr(args, "json", False):
        emit_json(why.to_dict())
    else:
        sys.stdout.write(why.to_text() + "\n")
    return 0 if why.agree else 1
