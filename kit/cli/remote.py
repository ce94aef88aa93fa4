"""``sgl-kit run``, ``source`` and ``grep``: commands and SGLang's source on the target."""

from __future__ import annotations

import re
import sys

from kit.errors import CommandTimeout, UsageError

from .common import common_options, console, emit_json, host_for, server_options, tree_for

__all__ = ["register"]


def register(sub) -> None:
    _register_run(sub)
    register_forward(sub)
    _register_disconnect(sub)


def _register_disconnect(sub) -> None:
    p = sub.add_parser(
        "disconnect", help="close the SSH connections kept for the next command",
        usage="sgl-kit disconnect [TARGET] [SSH options]",
        description="A command that reaches a host over SSH leaves its connection open for the next one, "
                    "as OpenSSH's ControlPersist does: a small keeper process holds it and the kit's helper for "
                    "SGL_KIT_SSH_PERSIST seconds (default 600) after the last command, so the next `why` or "
                    "`doctor` starts without a handshake or a login. This closes the one kept for TARGET (with the "
                    "same SSH options), or every one of this user's without TARGET. SGL_KIT_SSH_PERSIST=0 keeps "
                    "none.")
    p.add_argument("target", nargs="?", help="the SSH target whose kept connection to close (default: all)")
    p.set_defaults(func=cmd_disconnect)
    common_options(p)


def _register_run(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a command on the target",
        usage="sgl-kit run TARGET [options] -- CMD...",
        description="Run CMD on TARGET. One argument runs under /bin/sh -c; several are "
        "executed directly, with no shell. Output streams as it comes. "
        "Everything after -- is the command.",
    )
    p.add_argument("target")
    p.set_defaults(func=cmd_run)
    common_options(p)

    p = sub.add_parser(
        "source",
        help="read sglang source lines on the target",
        description="Print lines of the sglang source installed on TARGET, like "
        "`sed -n 'A,Bp'` but found by path or by function name.",
    )
    p.add_argument("target")
    p.add_argument("path", nargs="?", help="PATH[:START-END], relative to the package (srt/server_args.py)")
    p.add_argument("--function", "-f", metavar="QUALNAME",
                   help="a def or class by qualified name, e.g. ServerArgs._handle_piecewise_cuda_graph")
    p.add_argument("--mark", metavar="REGEX", action="append", default=[],
                   help="mark lines matching REGEX (repeatable)")
    p.set_defaults(func=cmd_source)
    server_options(p)
    common_options(p)

    p = sub.add_parser(
        "grep",
        help="search the sglang source on the target",
        description="grep -rn over the package source; the pattern never passes a shell.",
    )
    p.add_argument("target")
    p.add_argument("pattern")
    p.add_argument("--glob", default="*.py", help="file name pattern (default: *.py)")
    p.add_argument("--fixed", "-F", action="store_true", help="pattern is a fixed string")
    p.add_argument("--ignore-case", "-I", action="store_true")
    p.add_argument("--max", type=int, default=1000, help="stop after this many matches")
    p.set_defaults(func=cmd_grep)
    server_options(p)
    common_options(p)


def cmd_run(args) -> int:
    cmd = args.cmd
    if not cmd:
        raise UsageError("no command given", hint="write it after --, e.g. sgl-kit run TARGET -- uname -a")
    command = cmd[0] if len(cmd) == 1 else cmd
    with host_for(args) as host:
        if args.json:
            result = host.run(command, timeout=args.timeout)
            emit_json({"command": result.command, "host": result.host, "exited": result.exited,
                       "stdout": result.stdout, "stderr": result.stderr, "duration": result.duration})
            return result.exited
        with host.stream(command, timeout=args.timeout) as stream:
            for name, data in stream:
                out = sys.stdout.buffer if name == "stdout" else sys.stderr.buffer
                out.write(data)
                out.flush()
        if stream.timed_out:
            raise CommandTimeout(stream.command, args.timeout, host=host.name)
        return stream.exited if stream.exited is not None else 1


_RANGE = re.compile(r"^(?P<path>.+?):(?P<start>\d+)(?:-(?P<end>\d+))?$")


def split_path(spec: str) -> tuple[str, int | None, int | None]:
    """``PATH[:START[-END]]`` as (path, start, end)."""
    m = _RANGE.match(spec)
    if not m:
        return spec, None, None
    start = int(m["start"])
    return m["path"], start, int(m["end"]) if m["end"] else start


def cmd_source(args) -> int:
    if not args.function and not args.path:
        raise UsageError("give a PATH[:START-END] or --function QUALNAME",
                         hint="e.g. sgl-kit source TARGET srt/server_args.py:1222-1260")
    with host_for(args) as host:
        tree = tree_for(host, args)
        if args.function:
            snippet = tree.function(args.function, path=args.path)
        else:
            path, start, end = split_path(args.path)
            snippet = tree.read(path, start, end)
        for pattern in args.mark:
            for line in snippet.find(pattern):
                snippet.mark(line, pattern)
        if args.json:
            emit_json(snippet.to_dict())
        else:
            console().print(snippet)
    return 0


def cmd_grep(args) -> int:
    with host_for(args) as host:
        tree = tree_for(host, args)
        result = tree.grep(args.pattern, glob=args.glob, fixed=args.fixed, ignore_case=args.ignore_case,
                           max_matches=args.max)
        matches = list(result.matches)
        if args.json:
            emit_json({"pattern": args.pattern, "truncated": result.truncated,
                       "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in matches]})
        else:
            out = sys.stdout
            for m in matches:
                out.write(f"{m.path}:{m.line}: {m.text}\n")
            if result.truncated:
                sys.stderr.write(f"(stopped after {len(matches)} matches; raise --max)\n")
    return 0 if matches else 1


def register_forward(sub) -> None:
    p = sub.add_parser(
        "forward", help="hold a port forward to a server on the target open, until Ctrl-C",
        usage="sgl-kit forward TARGET [--port PORT] [--local-port PORT]",
        description="Forward a port on 127.0.0.1 here to the SGLang server (or the lab) on TARGET over SSH, and "
                    "keep it open until Ctrl-C, so a browser, curl or `sgl-kit bench http://127.0.0.1:PORT` "
                    "can reach a server that listens only on the target's loopback.")
    p.add_argument("target")
    p.add_argument("--port", type=int, help="the server's port on the target (default: the one SGLang server "
                                            "found there, else 30000)")
    p.add_argument("--local-port", type=int, default=0, help="the port here (default: a free one)")
    p.set_defaults(func=cmd_forward)
    common_options(p)


def cmd_forward(args) -> int:
    import threading
    import time

    opened = host_for(args)
    host = opened.__enter__()
    try:
        port = args.port or _only_server_port(host) or 30000
        local = host.forward(port, "127.0.0.1", args.local_port)
        if local == port and host.name == "local":
            sys.stdout.write(f"{args.target} is this machine: the server is at http://127.0.0.1:{port} already\n")
            return 0
        sys.stdout.write(f"http://127.0.0.1:{local} -> {host.name}, 127.0.0.1:{port} (Ctrl-C to stop)\n")
        sys.stdout.flush()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            sys.stdout.write("forward closed\n")
        return 0
    finally:
        # Ctrl-C ends the command at once: the connection is closed in the background for up to 5 s (a channel
        # a client left open may hold it); the process exits either way and the OS closes what is left
        closer = threading.Thread(target=opened.__exit__, args=(None, None, None), daemon=True)
        closer.start()
        closer.join(5)


def _only_server_port(host) -> int | None:
    from kit.target import discover

    ports = {s.port for s in discover(host)}
    return ports.pop() if len(ports) == 1 else None


def cmd_disconnect(args) -> int:
    from kit.hosts.kept import disconnect, kept, key_options, socket_path
    from kit.target import parse_target

    if args.target is None:
        closed = disconnect()
        sys.stdout.write(f"closed {len(closed)} kept SSH connection(s)\n" if closed else
                         "no kept SSH connection to close\n")
        return 0
    spec = parse_target(args.target)
    if spec["kind"] != "ssh":
        raise UsageError(f"{args.target} is not reached over SSH: there is no kept connection to close",
                         hint="give an SSH target (an alias, user@host, ssh://...), or no target to close them all")
    from .common import ssh_options

    options = {**ssh_options(args), **{k: spec[k] for k in ("port", "user") if spec[k] is not None}}
    path = socket_path(key_options(spec["host"], **options))
    closed = disconnect([path]) if path is not None and path in kept() else []
    sys.stdout.write(f"closed the kept connection to {args.target}\n" if closed else
                     f"no kept connection to {args.target} (with these SSH options)\n")
    return 0
