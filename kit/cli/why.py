"""``sgl-kit why FLAG [TARGET]``: why a server flag has its value, from the source that set it."""

from __future__ import annotations

import shlex
import sys

from . import dryrun
from .common import common_options, emit_json, host_for, server_for, server_options, tree_for

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "why", help="explain why a server flag has its value",
        usage="sgl-kit why FLAG [TARGET] [--log FILE] [--command FILE] [--model-config FILE] [--pid PID] [--cuda] [--json]",
        description="Find every place in the target's sglang source that assigns FLAG, the conditions "
                    "guarding each (and the calls that reach it), and, given the server's log, which of "
                    "them fired. On a target where an SGLang server runs (the lab, or --pid/--port), its "
                    "log, launch command and environment are read from the process; otherwise give "
                    "--log and --command (with only --command, guards are read against the command and "
                    "this release's defaults). Paths are read on the target. Without --model-config, the "
                    "config.json under the log's model_path is used when the target has it. FLAG may be a "
                    "name from another sglang release: `why` says what it is in this one (a deprecated "
                    "alias, not there yet, removed) and explains the field that holds that setting here.")
    p.add_argument("flag", help="a ServerArgs field or flag, e.g. disable_piecewise_cuda_graph or "
                                "cuda_graph_config.prefill.backend; a name from another sglang release is "
                                "followed to what holds that setting in this one, and `why` says so")
    p.add_argument("target", nargs="?", default="local", help="where sglang is installed (default: local)")
    p.add_argument("--log", metavar="FILE", help="server log holding the server_args=... line")
    p.add_argument("--command", metavar="FILE", help="a file holding the server's launch command, so the flag's "
                                                     "value at launch is known")
    p.add_argument("--model-config", metavar="FILE", help="the model's config.json")
    p.add_argument("--cuda", action="store_true",
                   help="the server runs on NVIDIA GPUs: answer sglang's hardware probes (is_cuda(), is_hip(), "
                        "...) that way, so defaults such as 0.5.18's prefill backend are decided")
    p.add_argument("--probe", metavar="NAME=VALUE", action="append", default=[],
                   help="answer one hardware probe, e.g. is_cuda=true or is_sm100_supported=false (repeatable)")
    p.add_argument("--no-snapshot", action="store_true",
                   help="read the remote source file by file instead of copying it once to the local cache")
    server_options(p)
    dryrun.add_why_options(p)
    p.set_defaults(func=cmd_why)
    common_options(p)


def cmd_why(args) -> int:
    from kit.provenance import explain, why
    from kit.source import source_for_server

    if args.dryrun:
        return dryrun.cmd_why_dryrun(args)
    with host_for(args) as host:
        server = server_for(host, args, prefetch={"probes": True})  # the host's answers, with discovery
        tree = tree_for(host, args)
        server = server or getattr(args, "server", None)
        tree = source_for_server(server, tree=tree, copy=not args.no_snapshot)
        snapshot = _snapshot(host, args, server)
        config = _model_config(host, args.model_config, snapshot)
        command = shlex.split(host.read_text(args.command)) if args.command else None
        probes = _probes(args)
        if server is not None:  # kit.why, on the server found here
            result = why(args.flag, args.target, host=host, server=server, tree=tree, snapshot=snapshot,
                         model_config=config, command=command, probes=probes)
        else:
            result = explain(tree, args.flag, snapshot, config, command=command, probes=probes)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0


def _probes(args) -> dict | None:
    """--cuda and --probe NAME=VALUE as the answers explain() gives sglang's hardware probes."""
    from kit.errors import ParseError
    from kit.provenance import CUDA_PROBES

    out = dict(CUDA_PROBES) if args.cuda else {}
    for pair in args.probe:
        name, eq, value = pair.partition("=")
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if not eq or not name or value.strip().lower() not in words:
            raise ParseError(f"--probe takes NAME=true|false, not {pair!r}", position=None,
                             hint="e.g. --probe is_cuda=true; --cuda sets every probe of an NVIDIA GPU")
        out[name.strip()] = words[value.strip().lower()]
    return out or None


def _snapshot(host, args, server):
    """--log, else the server's own log: the server_args line it printed at startup."""
    from kit.server_args import parse_log

    path = args.log or (server.log_path if server is not None else None)
    return parse_log(host.read_text(path)) if path else None


def _model_config(host, path: str | None, snapshot):
    """The model's config.json as a dict: the one named, or the one beside the logged model_path."""
    from kit.model_config import load_model_config, model_config_beside

    if path is not None:
        return load_model_config(path, host)
    return model_config_beside(host, snapshot.get("model_path")) if snapshot is not None else None
