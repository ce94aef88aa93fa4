"""``sgl-kit capture TARGET -o DIR``: a live server's evidence, once and read-only, kept as a case."""

from __future__ import annotations

import sys

from .common import common_options, console, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "capture", help="keep everything the doctor reads from a live server in a case directory (read-only)",
        usage="sgl-kit capture TARGET -o DIR [--pid PID | --port PORT] [--interval SEC] [--piece-timeout SEC] "
              "[--redact-host] [--raw] [--prometheus URL [--since 2h]] [--force] [--json]",
        description="Collect, once and read-only, what the doctor reads from the SGLang server at TARGET into a "
                    "case directory: /server_info, /model_info, /v1/loads?include=all, /health and "
                    "/health_generate (each where its release serves it, read from its source; a note for those "
                    "it lacks), two /metrics pages some seconds apart, the log's first and last lines, the "
                    "launch and environment, nvidia-smi and topo, check_env, the model's config.json, one "
                    "replayable /generate body, the source lines every finding cites (with the file's hash), "
                    "and findings.json: the doctor's answer now. case.yaml says when, from where, the sglang "
                    "version and its hashes, what each file is and what could not be collected, with its error. "
                    "Secrets are removed before anything is written (--raw keeps them, with a warning). Nothing "
                    "on the server is changed. Replay it anywhere with `sgl-kit doctor --case DIR`.",
        epilog="examples:\n  sgl-kit capture lab -o out/case\n"
               "  sgl-kit capture gpu-box -o incident-0412 --redact-host\n"
               "  sgl-kit capture gpu-box -o incident-0412 --prometheus http://prom:9090 --since 2h\n"
               "  sgl-kit doctor --case incident-0412 --compare      # later, anywhere, offline",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("target", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias")
    p.add_argument("-o", "--output", metavar="DIR", required=True, help="the case directory to write (new or empty)")
    p.add_argument("--pid", type=int, help="the SGLang server's process id, when the target runs several")
    p.add_argument("--port", type=int, help="the SGLang server's HTTP port, when the target runs several")
    p.add_argument("--interval", type=float, default=5.0, metavar="SEC",
                   help="seconds between the two /metrics pages (default: 5)")
    p.add_argument("--piece-timeout", type=float, default=20.0, metavar="SEC",
                   help="timeout of each piece: an HTTP request or a command (default: 20; check_env gets 60)")
    p.add_argument("--redact-host", action="store_true",
                   help="also replace the target, the server's URL and host names in the files by placeholders")
    p.add_argument("--raw", action="store_true",
                   help="keep secrets as they are (NOT for sharing: the output says so)")
    p.add_argument("--prometheus", metavar="URL", help="also keep the Prometheus series the doctor's runtime rules "
                                                      "read (credentials from the environment, as for doctor)")
    p.add_argument("--since", default="2h", help="with --prometheus: how far back (default: 2h)")
    p.add_argument("--force", action="store_true", help="capture over a case already in DIR (its files are replaced)")
    p.set_defaults(func=cmd_capture)
    common_options(p)


def cmd_capture(args) -> int:
    from kit.case import capture

    from .common import host_for

    err = console(stderr=True)
    if args.interval < 0 or args.piece_timeout <= 0:
        from kit.errors import UsageError

        raise UsageError("--interval is 0 or more seconds and --piece-timeout more than 0",
                         hint="e.g. --interval 5 --piece-timeout 20")
    if args.raw:
        err.print("[bold red]warning:[/] --raw: secrets are kept in the case as they are; do not share it")

    def progress(text: str) -> None:
        if not args.json:
            err.print(f"capture: {text}", highlight=False)

    with host_for(args) as host:
        result = capture(args.target, args.output, host=host, pid=args.pid, port=args.port, interval=args.interval,
                         timeout=args.piece_timeout, raw=args.raw, redact_host=args.redact_host,
                         prometheus=args.prometheus, since=args.since, force=args.force, progress=progress)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + f"\nnext: sgl-kit doctor --case {args.output} --compare   "
                                            f"(offline, anywhere)\n      sgl-kit report --case {args.output}\n")
    return 0
