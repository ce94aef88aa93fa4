"""``sgl-kit lab ...`` and ``sgl-kit args TARGET``: the CLI side of the lab and of discovery.

kit/cli.py calls :func:`add_cli` from ``build_parser`` and :func:`route_args_target` from
``main``; ``cmd_why`` calls :func:`fill_from_discovery` so that ``sgl-kit why FLAG lab``
needs nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_cli", "fill_from_discovery", "route_args_target"]

_ARGS_ACTIONS = ("parse", "diff", "show")


def add_cli(sub, args_actions) -> None:
    """Register ``lab up|down|status|restart`` and ``args show TARGET``."""
    from kit.cli import _common

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
        p = actions.add_parser(name, help=helptext, description=helptext + ".",
                               usage=f"sgl-kit lab {name} [options]" + (" [-- SGLANG_FLAGS...]"
                                                                       if name in ("up", "restart") else ""))
        _lab_options(p, starts=name in ("up", "restart"))
        _common(p, suppress=True)
        p.set_defaults(func=func)
    show = args_actions.add_parser("show", help="effective args of a running server, and where each came from",
                                   description="Find the SGLang server on TARGET (the lab, this machine or an SSH "
                                               "host), and classify every argument it runs with: default, "
                                               "explicit (from its argv), explicit-overridden, or auto-changed "
                                               "(SGLang changed it on its own). `sgl-kit args TARGET` is the same.")
    show.add_argument("target", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias")
    show.add_argument("--pid", type=int, help="which server, when the host runs several")
    show.add_argument("--port", type=int, help="which server, by its HTTP port")
    show.add_argument("--all", action="store_true", help="every field, not only those not at their default")
    _common(show, suppress=True)
    show.set_defaults(func=cmd_args_show)


def _lab_options(p: argparse.ArgumentParser, starts: bool) -> None:
    p.add_argument("--on", metavar="TARGET", default="local",
                   help="where the lab runs: local (default) or an SSH target, which needs only python3")
    p.add_argument("--dir", metavar="DIR", help="the lab directory (default: $SGL_KIT_LAB_DIR or <kit cache>/lab "
                                                "here, ~/.cache/sglang-investigation-kit/lab on an SSH host)")
    if not starts:
        return
    p.add_argument("--variant", choices=("new", "old", "fixed"),
                   help="the incident's launch to reproduce (default: new, the slow one)")
    p.add_argument("--port", type=int, default=None, help="HTTP port (default: 30000)")
    p.add_argument("--host", dest="bind", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--scenario", default="incident", help="throughput model in kit/data/scenarios (default: incident)")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for /health (default: 60)")


_VALUE_OPTIONS = ("--python", "--package-dir", "--identity", "-i", "--known-hosts", "--ssh-config", "--timeout")


def route_args_target(argv: list[str]) -> list[str]:
    """``sgl-kit args lab`` means ``sgl-kit args show lab``: a first word that is no action is a TARGET."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _VALUE_OPTIONS else 1  # common options before the command
    if i + 1 < len(argv) and argv[i] == "args" and argv[i + 1] not in _ARGS_ACTIONS \
            and not argv[i + 1].startswith("-"):
        return argv[:i + 1] + ["show"] + argv[i + 1:]
    return argv


# --------------------------------------------------------------------------- lab commands


def _lab(args):
    from kit.cli import _host

    from .control import Lab

    args.target = args.on
    host = _host(args)
    python = args.python if args.python != "python3" or args.on not in ("local", "lab") else "python3"
    return Lab(host, directory=args.dir, python=python)


def _print_status(args, status) -> None:
    if args.json:
        json.dump(status.to_dict(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(status.to_text() + "\n")


def cmd_lab_up(args) -> int:
    lab = _lab(args)
    with lab.host:
        status = lab.up(variant=args.variant or "new", flags=args.cmd or None, port=args.port or 30000,
                        host=args.bind, scenario=args.scenario, timeout=args.wait)
        _print_status(args, status)
    return 0


def cmd_lab_down(args) -> int:
    lab = _lab(args)
    with lab.host:
        _print_status(args, lab.down())
    return 0


def cmd_lab_status(args) -> int:
    lab = _lab(args)
    with lab.host:
        status = lab.status()
        _print_status(args, status)
    return 0 if status.running else 3


def cmd_lab_restart(args) -> int:
    lab = _lab(args)
    options = {"host": args.bind, "scenario": args.scenario, "timeout": args.wait}
    if args.port:
        options["port"] = args.port
    with lab.host:
        _print_status(args, lab.restart(flags=args.cmd or None, variant=args.variant, **options))
    return 0


# --------------------------------------------------------------------------- args TARGET, why FLAG lab


def _is_lab(target: str) -> bool:
    from kit.target import parse_target

    return parse_target(target)["kind"] == "lab"


def fill_from_discovery(host, args) -> None:
    """For target ``lab``: the sglang source (and, for ``why``, the log) of the running lab, unless given."""
    if not _is_lab(args.target):
        return
    wants_log = hasattr(args, "log")
    if args.package_dir and (args.log if wants_log else True):
        return
    from kit.target import find_server

    server = find_server(host, "lab")
    args.package_dir = args.package_dir or server.sglang_dir
    if wants_log:
        args.log = args.log or server.log_path


def cmd_args_show(args) -> int:
    from kit.cli import _host
    from kit.server_args import classify, defaults
    from kit.target import find_server

    with _host(args) as host:
        server = find_server(host, args.target if _is_lab(args.target) else None, pid=args.pid, port=args.port)
        tree = server.source_tree()
        if host.name != "local":
            tree = tree.snapshot()
        snapshot = server.effective_args()
        frame = classify(snapshot, server.explicit_args(tree), defaults(tree))
    shown = frame if args.all else frame[frame["origin"] != "default"]
    if args.json:
        rows = [{k: _plain(v) for k, v in row.items()} for row in shown.to_dict(orient="records")]
        json.dump({"server": server.to_dict(), "source": snapshot.source, "fields": rows}, sys.stdout, indent=2,
                  default=str)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(_args_text(server, snapshot, shown, len(frame), args))
    return 0


def _plain(value):
    from kit.cli import _plain as plain  # one definition of "JSON-safe cell" for every table

    return plain(value)


def _args_text(server, snapshot, frame, total: int, args) -> str:
    everything = args.all
    head = [f"{'lab stand-in' if server.kind == 'lab' else 'sglang'} {server.sglang_version or '?'}, "
            f"pid {server.pid} on {server.host_name}, {server.url}",
            f"effective args from {snapshot.source or 'the log'}; explicit ones from its argv, read with the flag "
            f"table of {server.sglang_dir}; defaults from that source",
            f"{len(frame)} of {total} fields shown" + ("" if everything else " (those not at their default; --all "
                                                          "for every field)"), ""]
    if frame.empty:
        return "\n".join(head) + "every field is at its default\n"
    cells = [[str(_plain(v)) if _plain(v) is not None else "-" for v in row]
             for row in frame[["flag", "default", "cli", "effective", "origin"]].itertuples(index=False)]
    widths = [min(48, max(len(c[i]) for c in cells + [["flag", "default", "cli", "effective", "origin"]]))
              for i in range(5)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("flag", "default", "cli", "effective", "origin"), widths,
                                                   strict=True))]
    for c in cells:
        lines.append("  ".join(_cut(v, w).ljust(w) for v, w in zip(c, widths, strict=True)))
    auto = [c[0] for c in cells if c[4] == "auto-changed"]
    tail = ["", f"auto-changed (SGLang decided, no flag asked): {', '.join(auto) or 'none'}"]
    if auto:
        tail.append(f"explain one with: sgl-kit why {auto[0]} {args.target}")
    return "\n".join(head + lines + tail) + "\n"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"
