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
    for register in (_add_run, _add_source, _add_grep, _add_why):
        _common(register(sub), suppress=True)
    from .lab.cli import add_cli as _add_lab  # registers `lab ...` and `args [show] TARGET`

    _add_lab(sub, _add_args(sub))
    from .bench import add_cli as _add_bench  # registers `bench` and `bench compare`

    _common(_add_bench(sub), suppress=True)
    from .dryrun import add_cli as _add_dryrun  # registers `dryrun` (setup, run, gpus, versions)

    _add_dryrun(sub)
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


def _add_why(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "why", help="explain why a server flag has its value",
        usage="sgl-kit why FLAG [TARGET] [--package-dir DIR] [--log FILE] [--model-config FILE] [--json]",
        description="Find every place in the target's sglang source that assigns FLAG, the conditions "
                    "guarding each, and, given the server's log, which of them fired. Paths given to "
                    "--log and --model-config are read on the target. Without --model-config, the "
                    "config.json under the log's model_path is used when the target has it.")
    p.add_argument("flag", help="a ServerArgs field or flag, e.g. disable_piecewise_cuda_graph or "
                                "cuda_graph_config.prefill.backend")
    p.add_argument("target", nargs="?", default="local", help="where sglang is installed (default: local)")
    p.add_argument("--log", metavar="FILE", help="server log holding the server_args=... line")
    p.add_argument("--model-config", metavar="FILE", help="the model's config.json")
    p.add_argument("--no-snapshot", action="store_true",
                   help="read the remote source file by file instead of copying it once to the local cache")
    from .dryrun import add_why_options  # --dryrun and the launch it resolves

    add_why_options(p)
    p.set_defaults(func=cmd_why)
    return p


def _add_args(sub):
    p = sub.add_parser("args", help="parse or compare effective server arguments",
                       description="Read server_args from logs, /server_info JSON or launch commands.")
    inner = p.add_subparsers(dest="args_command", metavar="ACTION")
    inner.required = True
    parse = inner.add_parser("parse", help="the server_args=... of a log file",
                             description="Print every field of the last server_args line in LOGFILE "
                                         "(- for stdin). Lines cut off mid-field still give the fields "
                                         "before the cut.")
    parse.add_argument("logfile")
    parse.add_argument("--all", action="store_true", help="every server_args line, not only the last")
    parse.set_defaults(func=cmd_args_parse)
    diff = inner.add_parser("diff", help="fields that differ between two deployments",
                            description="Each side is a log file, a /server_info JSON file, or a file "
                                        "holding a launch command. Launch commands are read with the "
                                        "flag table of a real sglang source: give --package-dir or "
                                        "--sglang VERSION.")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--sglang", metavar="VERSION",
                      help="read launch commands with this sglang release's flags (downloaded once)")
    diff.set_defaults(func=cmd_args_diff)
    for q in (parse, diff):
        _common(q, suppress=True)
    return inner


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
    from .lab.cli import fill_from_discovery  # target `lab`: the running lab's sglang and log
    from .source import SourceTree

    fill_from_discovery(host, args)
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


def cmd_why(args) -> int:
    from .provenance import explain

    if args.dryrun:
        from .dryrun import cmd_why_dryrun

        return cmd_why_dryrun(args)
    with _host(args) as host:
        tree = _tree(host, args)
        if host.name != "local" and not args.no_snapshot:
            tree = tree.snapshot()
        snapshot = _remote_log(host, args.log) if args.log else None
        config = _model_config(host, args.model_config, snapshot)
        result = explain(tree, args.flag, snapshot, config)
    if args.json:
        _emit_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0


def _remote_log(host, path: str):
    from .server_args import parse_log

    return parse_log(host.read_text(path))


def _model_config(host, path: str | None, snapshot):
    """The model's config.json as a dict: the one named, or the one beside the logged model_path."""
    if path is None and snapshot is not None:
        model_path = snapshot.get("model_path")
        if isinstance(model_path, str) and model_path.startswith("/"):
            candidate = model_path.rstrip("/") + "/config.json"
            path = candidate if host.exists(candidate) else None
    if path is None:
        return None
    try:
        return json.loads(host.read_text(path))
    except json.JSONDecodeError as exc:
        raise KitError(f"{path} on {host.name} is not valid JSON ({exc})",
                       hint="pass the model's config.json with --model-config") from None


def cmd_args_parse(args) -> int:
    from .server_args import parse_log_all, parse_log_file_all

    if args.logfile == "-":
        snaps = parse_log_all(sys.stdin.buffer.read())
    else:
        snaps = parse_log_file_all(_local_file(args.logfile))
    chosen = snaps if args.all else snaps[-1:]
    if args.json:
        _emit_json([_snapshot_dict(s) for s in chosen] if args.all else _snapshot_dict(chosen[0]))
        return 0
    for snap in chosen:
        sys.stdout.write(repr(snap)[1:-1] + "\n")
        width = max(map(len, snap.fields), default=0)
        for name, value in snap.fields.items():
            sys.stdout.write(f"  {name:<{width}} = {snap.raw.get(name, repr(value))}\n")
        if snap.truncated:
            sys.stdout.write(f"  ... line cut off at character {snap.stopped_at}; fields after it are unknown\n")
    return 0


def _snapshot_dict(snap) -> dict:
    return {"form": snap.form, "stage": snap.stage, "version": snap.version, "truncated": snap.truncated,
            "stopped_at": snap.stopped_at, "source": snap.source, "line": snap.line,
            "fields": {k: snap.raw.get(k, v) for k, v in snap.fields.items()},
            "not_literal": sorted(snap.raw),
            "internal_differences": [list(d) for d in snap.internal_differences]}


def _local_file(path: str) -> str:
    import os

    if not os.path.isfile(path):
        raise KitError(f"no such file: {path}", hint="give the path of a file on this machine")
    return path


def _side(path: str, args):
    """A log, a /server_info JSON, or a launch command, as a mapping of fields."""
    from .server_args import flag_table, from_server_info, parse_command, parse_log_file_all

    text = open(_local_file(path), "rb").read(4096).decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        with open(path, "rb") as fh:
            return from_server_info(fh.read())
    if "server_args=" in text or _mentions(path, b"server_args="):
        return parse_log_file_all(path)[-1]
    with open(path, errors="replace") as fh:
        command = fh.read()
    return parse_command(command, flag_table(_diff_tree(args)))


def _mentions(path: str, needle: bytes) -> bool:
    """Whether a (possibly huge) file contains ``needle``, read in blocks."""
    with open(path, "rb") as fh:
        tail = b""
        for block in iter(lambda: fh.read(1 << 20), b""):
            if needle in tail + block:
                return True
            tail = block[-len(needle):]
    return False


def _diff_tree(args):
    from .hosts import LocalHost
    from .source import SourceTree, cache_dir, install_package_source

    if args.package_dir:
        return SourceTree.at(LocalHost(), args.package_dir)
    if args.sglang:
        prefix = cache_dir() / "trees" / f"sglang-{args.sglang}"
        return SourceTree.at(LocalHost(), install_package_source("sglang", args.sglang, prefix=str(prefix)))
    raise KitError("a launch command needs sglang's flag table to be read",
                   hint="add --sglang 0.5.11 (the release the command was written for) or --package-dir DIR")


def cmd_args_diff(args) -> int:
    from .server_args import diff

    frame = diff(_side(args.a, args), _side(args.b, args))
    if args.json:
        _emit_json({"a": args.a, "b": args.b, "differences": [
            {"flag": r.flag, "a": _plain(r.a), "b": _plain(r.b)} for r in frame.itertuples(index=False)]})
        return 0
    if frame.empty:
        sys.stdout.write("no differences\n")
        return 0
    width = max(len(str(f)) for f in frame["flag"])
    sys.stdout.write(f"{'flag':<{width}}  A: {args.a}\n{'':<{width}}  B: {args.b}\n")
    for row in frame.itertuples(index=False):
        sys.stdout.write(f"{row.flag:<{width}}  {_plain(row.a)!r:>24} -> {_plain(row.b)!r}\n")
    return 0


def _plain(value):
    import pandas as pd

    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)


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
    from .lab.cli import route_args_target  # `sgl-kit args lab` is `sgl-kit args show lab`

    args = parser.parse_args(route_args_target(argv))
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
