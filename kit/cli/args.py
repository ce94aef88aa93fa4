"""``sgl-kit args parse|diff|show``: a server's effective arguments, and where each came from.

``sgl-kit args TARGET`` is ``sgl-kit args show TARGET``: see :func:`route_target`.
"""

from __future__ import annotations

import sys

from .common import common_options, emit_json, host_for, local_file, masks_secrets, plain, server_for

__all__ = ["register", "route_target"]

ACTIONS = ("parse", "diff", "show", "read")
# Common options that take a value, to skip over when looking for the command word.
_VALUE_OPTIONS = ("--python", "--package-dir", "--identity", "-i", "--known-hosts", "--ssh-config", "--timeout")


def route_target(argv: list[str]) -> list[str]:
    """``sgl-kit args lab`` means ``sgl-kit args show lab``: a first word that is no action is a TARGET."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _VALUE_OPTIONS else 1  # common options before the command
    if i + 1 < len(argv) and argv[i] == "args" and argv[i + 1] not in ACTIONS \
            and not argv[i + 1].startswith("-"):
        return argv[:i + 1] + ["show"] + argv[i + 1:]
    return argv


def register(sub) -> None:
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
                                        "flag table of a real sglang source (--package-dir or --sglang "
                                        "VERSION), filled with that version's defaults, and resolved with "
                                        "the dry-run when its environment is set up. Rows come in two "
                                        "groups: what the launches asked differently, then what SGLang "
                                        "resolved differently at startup, each value with its origin.")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--sglang", metavar="VERSION",
                      help="read launch commands with this sglang release's flags (downloaded once)")
    diff.add_argument("--model", metavar="DIR_OR_CONFIG_JSON",
                      help="the model's config.json, to resolve a launch command with the dry-run "
                           "(default: its --model-path, when that is on this machine)")
    diff.add_argument("--gpu", metavar="GPU", help="the GPU to resolve a launch command on with the dry-run: a key "
                                                   "of `sgl-kit dryrun gpus` or the name nvidia-smi prints (without "
                                                   "it, a command is read as its flags over the defaults)")
    diff.add_argument("--no-dryrun", action="store_true",
                      help="do not resolve launch commands with the dry-run; compare their flags over the defaults")
    diff.add_argument("--all", action="store_true", help="also the fields that differ on every start (random_seed)")
    diff.set_defaults(func=cmd_args_diff)
    read = inner.add_parser("read", help="the sglang flags of a pasted launch, each with where it came from",
                            description="Read FILE (- for stdin) as people paste launches: a shell script "
                                        "(continuations, comments, variables, exec, \"$@\"), docker run, compose, "
                                        "Kubernetes YAML (command, args, env, envFrom), a systemd unit, sgl.Engine(...) "
                                        "or a whole issue body. Each flag is read on its own: a value it cannot read "
                                        "(${PORT}, a cut-off token) is a problem naming the flag, and the rest is kept.")
    read.add_argument("file")
    read.add_argument("--sglang", metavar="VERSION",
                      help="type the values with this sglang release's flag table (downloaded once); without it "
                           "(or --package-dir) the flags are read by their shape, values as text")
    read.set_defaults(func=cmd_args_read)
    for q in (parse, diff, read):
        common_options(q)
    show = inner.add_parser("show", help="effective args of a running server, and where each came from",
                            description="Find the SGLang server on TARGET (the lab, this machine or an SSH "
                                        "host), and classify every argument it runs with: default, "
                                        "explicit (from its argv), explicit-overridden, or auto-changed "
                                        "(SGLang changed it on its own). `sgl-kit args TARGET` is the same.")
    show.add_argument("target", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias")
    show.add_argument("--pid", type=int, help="which server, when the host runs several")
    show.add_argument("--port", type=int, help="which server, by its HTTP port")
    show.add_argument("--all", action="store_true", help="every field, not only those not at their default")
    common_options(show)
    show.set_defaults(func=cmd_args_show)


# --------------------------------------------------------------------------- parse


@masks_secrets
def cmd_args_parse(args) -> int:
    from kit.server_args import parse_log_all, parse_log_file_all

    if args.logfile == "-":
        snaps = parse_log_all(sys.stdin.buffer.read())
    else:
        snaps = parse_log_file_all(local_file(args.logfile))
    chosen = snaps if args.all else snaps[-1:]
    if args.json:
        emit_json([s.to_dict() for s in chosen] if args.all else chosen[0].to_dict())
        return 0
    for snap in chosen:
        sys.stdout.write(repr(snap)[1:-1] + "\n")
        width = max(map(len, snap.fields), default=0)
        for name, value in snap.fields.items():
            sys.stdout.write(f"  {name:<{width}} = {snap.raw.get(name, repr(value))}\n")
        if snap.truncated:
            sys.stdout.write(f"  ... line cut off at character {snap.stopped_at}; fields after it are unknown\n")
    return 0


# --------------------------------------------------------------------------- diff


@masks_secrets
def cmd_args_diff(args) -> int:
    from kit.server_args import launch_diff

    tree = _diff_tree(args, required=False)
    result = launch_diff(_side(args.a, args, tree), _side(args.b, args, tree))
    if args.json:
        data = result.to_dict()
        data["differences"] = [{"flag": r["flag"], "a": r["a"], "b": r["b"]} for r in data["rows"]]
        emit_json(data)
        return 0
    sys.stdout.write(result.to_text(everything=args.all))
    return 0


def _side(path: str, args, tree):
    """A log, a /server_info JSON, or a launch command, as a LaunchSide."""
    from kit.launch_file import LaunchOptions, read_launch

    local_file(path)
    options = LaunchOptions(dryrun=not args.no_dryrun, model=args.model, gpu=args.gpu)
    return read_launch(path, tree, options, tree_source=lambda: _diff_tree(args, required=True))


def _diff_tree(args, required: bool):
    from kit.launch_file import source_tree

    return source_tree(args.package_dir, args.sglang, required=required)


# --------------------------------------------------------------------------- read


@masks_secrets
def cmd_args_read(args) -> int:
    from kit.server_args import flag_table, read_launch_text, split_paste

    text = sys.stdin.read() if args.file == "-" else open(local_file(args.file), encoding="utf-8",
                                                          errors="replace").read()
    tree = _diff_tree(args, required=False)
    table = flag_table(tree) if tree is not None else None
    paste = split_paste(text)
    pieces = paste.of("launch") if paste.several() and paste.of("launch") else None
    where = "-" if args.file == "-" else args.file
    reads = [read_launch_text(p.text, table, where=where, first_line=p.start) for p in pieces] if pieces else \
        [read_launch_text(text, table, where=where)]
    if args.json:
        emit_json({"sglang": tree.version if tree is not None else None, "reads": [r.to_dict() for r in reads]})
        return 0
    for found in reads:
        sys.stdout.write(_read_text(found, tree))
    return 0


def _read_text(found, tree) -> str:
    typed = f"sglang {tree.version}'s flag table" if tree is not None else "their shape (no --sglang: values untyped)"
    out = [f"{found.form}: {len(found.launches)} sglang launch(es), flags read by {typed}"]
    for launch in found.launches:
        out.append(f"\n{launch.launcher} at {launch.origin}")
        width = max([len(f.option) for f in launch.flags] + [4])
        for f in launch.flags:
            out.append(f"  {f.option:<{width}}  {f.value!r:<28} {f.origin}")
        for key, value in launch.env.items():
            out.append(f"  env {key}={value}  ({launch.env_origin.get(key, '')})")
        out += [f"  note: {n}" for n in launch.notes]
    out += [f"  note: {n}" for n in found.notes]
    problems = found.all_problems()
    if problems:
        out += ["", "could not read:"] + [f"  - {p}" for p in problems]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- show


@masks_secrets
def cmd_args_show(args) -> int:
    from kit.server_args.view import args as server_args

    with host_for(args) as host:
        server = server_for(host, args, required=True, prefetch={"server_info": 10.0})  # /server_info with it
        found = server_args(args.target, host=host, server=server)
    if args.json:
        emit_json({**found.to_dict(every=args.all),
                   "fields": [{k: plain(v) for k, v in row.items()} for row in found.shown(args.all)]})
        return 0
    server = found.server
    where = (server.url if server.host is None or server.host.name == "local" else
             f"{server.bind_host}:{server.port} there (from here: sgl-kit forward {args.target} --port {server.port})")
    first, second = found.headline()
    text = f"{first}, {where}\n{second}\n" + found.to_text(args.all, every_is="--all")
    if found.auto_changed and found.shown(args.all):
        text += f"explain one with: sgl-kit why {found.auto_changed[0]} {args.target}\n"
    sys.stdout.write(text)
    return 0
