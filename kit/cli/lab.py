"""``sgl-kit lab up|down|status|restart``: the built-in lab, here or on an SSH host."""

from __future__ import annotations

import argparse
import sys

from .common import common_options, emit_json, host_for, masks_secrets

__all__ = ["register"]


def register(sub) -> None:
    lab = sub.add_parser("lab", help="start, stop or inspect the built-in lab server",
                         description="The lab is a stand-in for the incident's SGLang server (Qwen3.6-27B, "
                                     "TP 2, MTP) that needs no GPU. It runs real sglang 0.5.11 argument "
                                     "handling and a throughput model of the incident.")
    actions = lab.add_subparsers(dest="lab_command", metavar="ACTION")
    actions.required = True
    for name, helptext, func in (("up", "prepare the lab directory and start the server", cmd_lab_up),
                                 ("down", "stop the server the lab started", cmd_lab_down),
                                 ("status", "is the lab running, where, with which command", cmd_lab_status),
                                 ("restart", "stop, then start with new flags (or the same)", cmd_lab_restart)):
        p = actions.add_parser(name, help=helptext, description=helptext + "." + _LAUNCH_HELP.get(name, ""),
                               usage=f"sgl-kit lab {name} [options]" + (" [-- SGLANG_FLAGS...]"
                                                                       if name in ("up", "restart") else ""),
                               epilog=_EXAMPLES.get(name), formatter_class=argparse.RawDescriptionHelpFormatter)
        _lab_options(p, starts=name in ("up", "restart"))
        common_options(p)
        p.set_defaults(func=func)


_LAUNCH_HELP = {
    "up": "\n\nThe launch: --variant NAME is one of the incident's launches (default new, the slow one); flags "
          "after -- are added to it (a flag the variant has takes the value given after --). Flags after -- "
          "with no --variant are the whole launch. `sgl-kit lab status` shows the launch and its command.\n\n"
          "The port: --port N, else $SGL_KIT_LAB_PORT or 30000 when free, else the next free port (the output "
          "says which). Every command that takes the target `lab` finds the lab where it runs.",
    "restart": "\n\nThe launch: --variant NAME with flags after -- added to it (a flag the variant has takes the "
               "value given after --); flags after -- alone are the whole launch; neither is the launch that "
               "ran, again. The port and address stay unless --port or --host say otherwise. The output shows "
               "the launch and its command.",
}
_EXAMPLES = {
    "up": "examples:\n  sgl-kit lab up                                   # the incident's slow launch (variant new)\n"
          "  sgl-kit lab up --variant fixed -- --enable-metrics   # the fixed launch, with /metrics\n"
          "  sgl-kit lab up --port 30010",
    "restart": "examples:\n  sgl-kit lab restart --variant new -- --enable-metrics   # the slow launch, with /metrics\n"
               "  sgl-kit lab restart --variant fixed\n  sgl-kit lab restart --port 30010   # the same launch, elsewhere",
}


def _lab_options(p: argparse.ArgumentParser, starts: bool) -> None:
    p.add_argument("--on", metavar="TARGET", default="local",
                   help="where the lab runs: local (default) or an SSH target, which needs only python3")
    p.add_argument("--dir", metavar="DIR", help="the lab directory (default: $SGL_KIT_LAB_DIR or <kit cache>/lab "
                                                "here, ~/.cache/sglang-investigation-kit/lab on an SSH host)")
    if not starts:
        return
    p.add_argument("--variant", choices=("new", "old", "fixed", "nospec", "nospec_fixed"),
                   help="the incident's launch to reproduce (default: new, the slow one; old: 3 speculative steps; "
                        "fixed: old with --enforce-piecewise-cuda-graph; nospec: no speculative decoding; "
                        "nospec_fixed: nospec with --enforce-piecewise-cuda-graph); flags after -- are added to it")
    p.add_argument("--port", type=int, default=None,
                   help="HTTP port (default: $SGL_KIT_LAB_PORT or 30000 when free, else the next free one)")
    p.add_argument("--host", dest="bind", default=None, help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--scenario", default=None, help="throughput model in kit/data/scenarios (default: incident; "
                                                     "restart: the one that ran)")
    p.add_argument("--wait", type=float, default=None,
                   help="seconds to wait for /health (default: 60; 300 for --engine sglang)")
    p.add_argument("--engine", choices=("stand-in", "sglang"), default=None,
                   help="stand-in: the kit's stand-in of the incident (default); sglang: PyPI's real sglang server "
                        "on CPU with a tiny random model (builds its environment once, ~2.4 GB, on the lab's host: "
                        "reused there when built, else built there with its python3.11, minutes)")
    p.add_argument("--sglang", metavar="VERSION", default=None,
                   help="with --engine sglang: the sglang version (default: 0.5.11, the one verified on CPU)")
    p.add_argument("--model", default=None, choices=("qwen3", "qwen3.5"),
                   help="with --engine sglang: the tiny model (default: qwen3); qwen3.5 is a tiny "
                        "Qwen3_5ForConditionalGeneration, the incident's class (Gated DeltaNet and full attention, "
                        "a vision tower), served text only: its launch always adds --skip-server-warmup (sglang's "
                        "warmup sends a multimodal model an image) and --max-mamba-cache-size 256 (else the "
                        "linear-attention state pool takes most of free memory); its linear-attention layers run on plain-torch "
                        "stand-ins for five CPU sgl-kernel ops (`sgl-kit lab status` lists them)")


def _lab(args):
    from kit.lab.real import lab_for

    args.target = args.on
    host = host_for(args)
    python = args.python if args.python != "python3" or args.on not in ("local", "lab") else "python3"
    engine = getattr(args, "engine", None)
    if engine is None and (getattr(args, "sglang", None) or getattr(args, "model", None)):
        engine = "sglang"
    lab = lab_for(host, directory=args.dir, python=python, engine=engine, sglang=getattr(args, "sglang", None),
                  model=getattr(args, "model", None))
    if getattr(args, "wait", 0) is None:
        args.wait = getattr(lab, "default_wait", 60.0)
    return lab


def _print_status(args, status) -> None:
    if args.json:
        data = status.to_dict()
        if status.reach:
            data["url"] = None  # a forward held by this process, gone when it exits; `reach` says how instead
        emit_json(data)
    else:
        sys.stdout.write(status.to_text() + "\n")


@masks_secrets
def cmd_lab_up(args) -> int:
    lab = _lab(args)
    with lab.host:
        status = lab.up(variant=args.variant, flags=args.cmd or None, port=args.port,
                        host=args.bind or "127.0.0.1", scenario=args.scenario or "incident", timeout=args.wait)
        _print_status(args, status)
    return 0


@masks_secrets
def cmd_lab_down(args) -> int:
    lab = _lab(args)
    with lab.host:
        _print_status(args, lab.down())
    return 0


@masks_secrets
def cmd_lab_status(args) -> int:
    lab = _lab(args)
    with lab.host:
        status = lab.status()
        _print_status(args, status)
    return 0 if status.running else 3


@masks_secrets
def cmd_lab_restart(args) -> int:
    lab = _lab(args)
    options = {"timeout": args.wait}
    if args.scenario:
        options["scenario"] = args.scenario
    if args.port:
        options["port"] = args.port
    if args.bind:
        options["host"] = args.bind
    with lab.host:
        _print_status(args, lab.restart(flags=args.cmd or None, variant=args.variant, **options))
    return 0
