"""``sgl-kit``: the kit's functions from a terminal.

Every command takes a TARGET (``local``, ``ssh://user@host:port``,
``user@host`` or an ~/.ssh/config alias) and prints for a person, or JSON
with ``--json`` for scripts. Errors go to stderr with what to do next, and
the exit status is 2 for kit errors, the command's own status for ``run``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence

from .errors import KitError

__all__ = ["build_parser", "main"]

EXAMPLES = """\
examples:
  sgl-kit run gpu-box -- nvidia-smi
  sgl-kit run ssh://root@10.0.0.5:22 -- 'ps aux | grep sglang'
  sgl-kit source gpu-box srt/server_args.py:1222-1260 --python /root/ml-env/bin/python
  sgl-kit source gpu-box --function ServerArgs._handle_piecewise_cuda_graph
  sgl-kit grep gpu-box 'disable_piecewise_cuda_graph ='
"""


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """Options accepted before or after the sub-command."""
    d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    g = parser.add_argument_group("common options")
    g.add_argument("--json", action="store_true", default=d(False), help="print JSON for scripts")
    g.add_argument(
        "--python",
        metavar="PY",
        default=d("python3"),
        help="interpreter on the target whose sglang to read (default: python3)",
    )
    g.add_argument(
        "--package-dir",
        metavar="DIR",
        default=d(None),
        help="sglang package directory on the target (skips --python lookup)",
    )
    g.add_argument(
        "--trust-new-host",
        action="store_true",
        default=d(False),
        help="accept and record an unknown SSH host key (check its fingerprint first)",
    )
    g.add_argument("--identity", "-i", metavar="FILE", default=d(None), help="SSH private key file")
    g.add_argument(
        "--known-hosts",
        metavar="FILE",
        default=d(None),
        help="known_hosts file (default: ~/.ssh/known_hosts or UserKnownHostsFile)",
    )
    g.add_argument("--ssh-config", metavar="FILE", default=d("~/.ssh/config"), help="ssh config file")
    g.add_argument(
        "--timeout",
        type=float,
        metavar="SEC",
        default=d(60.0),
        help="per-command timeout on the target (default: 60)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sgl-kit",
        description="Find out why an SGLang server is slow.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in (_add_run, _add_source, _add_grep):
        _common(register(sub), suppress=True)
    return parser


def _add_run(sub) -> argparse.ArgumentParser:
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
    return p


def _add_source(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "source",
        help="read sglang source lines on the target",
        description="Print lines of the sglang source installed on TARGET, like "
        "`sed -n 'A,Bp'` but found by path or by function name.",
    )
    p.add_argument("target")
    p.add_argument("path", nargs="?", help="PATH[:START-END], relative to the package (srt/server_args.py)")
    p.add_argument(
        "--function",
        "-f",
        metavar="QUALNAME",
        help="a def or class by qualified name, e.g. ServerArgs._handle_piecewise_cuda_graph",
    )
    p.add_argument(
        "--mark", metavar="REGEX", action="append", default=[], help="mark lines matching REGEX (repeatable)"
    )
    p.set_defaults(func=cmd_source)
    return p


def _add_grep(sub) -> argparse.ArgumentParser:
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
    return p


# -- helpers ----------------------------------------------------------------


def _host(args):
    from .target import connect, parse_target

    options = {}
    if parse_target(args.target)["kind"] == "ssh":
        options = {
            "trust_new_host": args.trust_new_host,
            "key_filename": args.identity,
            "known_hosts": args.known_hosts,
            "config_file": args.ssh_config,
            "default_timeout": args.timeout,
        }
    return connect(args.target, **options)


def _tree(host, args):
    from .source import SourceTree

    if args.package_dir:
        return SourceTree.at(host, args.package_dir)
    return SourceTree.locate(host, "sglang", python=args.python)


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# -- commands ---------------------------------------------------------------


def cmd_run(args) -> int:
    cmd = args.cmd
    if not cmd:
        raise KitError("no command given", hint="write it after --, e.g. sgl-kit run TARGET -- uname -a")
    command = cmd[0] if len(cmd) == 1 else cmd
    with _host(args) as host:
        if args.json:
            result = host.run(command, timeout=args.timeout)
            _emit_json(
                {
                    "command": result.command,
                    "host": result.host,
                    "exited": result.exited,
                    "stdout": result.stdout,
                    "stderr": result.stderr,
                    "duration": result.duration,
                }
            )
            return result.exited
        with host.stream(command, timeout=args.timeout) as stream:
            for name, data in stream:
                out = sys.stdout.buffer if name == "stdout" else sys.stderr.buffer
                out.write(data)
                out.flush()
        if stream.timed_out:
            from .errors import CommandTimeout

            raise CommandTimeout(stream.command, args.timeout, host=host.name)
        return stream.exited if stream.exited is not None else 1


_RANGE = re.compile(r"^(?P<path>.+?):(?P<start>\d+)(?:-(?P<end>\d+))?$")


def _split_path(spec: str) -> tuple[str, int | None, int | None]:
    m = _RANGE.match(spec)
    if not m:
        return spec, None, None
    start = int(m["start"])
    return m["path"], start, int(m["end"]) if m["end"] else start


def cmd_source(args) -> int:
    if not args.function and not args.path:
        raise KitError(
            "give a PATH[:START-END] or --function QUALNAME",
            hint="e.g. sgl-kit source TARGET srt/server_args.py:1222-1260",
        )
    with _host(args) as host:
        tree = _tree(host, args)
        if args.function:
            snippet = tree.function(args.function, path=args.path)
        else:
            path, start, end = _split_path(args.path)
            snippet = tree.read(path, start, end)
        for pattern in args.mark:
            for line in snippet.find(pattern):
                snippet.mark(line, pattern)
        if args.json:
            _emit_json(_snippet_dict(snippet))
        else:
            _console().print(snippet)
    return 0


def _snippet_dict(snippet) -> dict:
    return {
        "path": snippet.path,
        "start": snippet.start,
        "end": snippet.end,
        "total_lines": snippet.total_lines,
        "qualname": snippet.qualname,
        "version": snippet.version,
        "host": snippet.host,
        "lines": snippet.lines,
        "marks": {str(k): v for k, v in snippet.marks.items()},
    }


def cmd_grep(args) -> int:
    with _host(args) as host:
        tree = _tree(host, args)
        result = tree.grep(
            args.pattern, glob=args.glob, fixed=args.fixed, ignore_case=args.ignore_case, max_matches=args.max
        )
        matches = list(result.matches)
        if args.json:
            _emit_json(
                {
                    "pattern": args.pattern,
                    "truncated": result.truncated,
                    "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in matches],
                }
            )
        else:
            out = sys.stdout
            for m in matches:
                out.write(f"{m.path}:{m.line}: {m.text}\n")
            if result.truncated:
                sys.stderr.write(f"(stopped after {len(matches)} matches; raise --max)\n")
    return 0 if matches else 1


def _report(exc: KitError) -> None:
    sys.stderr.write(f"sgl-kit: error: {exc.message}\n")
    if exc.hint:
        sys.stderr.write(f"  -> {exc.hint}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a remote command, never our options.
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    args.cmd = rest
    func: Callable = args.func
    try:
        return int(func(args) or 0)
    except KitError as exc:
        _report(exc)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("sgl-kit: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
