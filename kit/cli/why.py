"""``sgl-kit why FLAG [TARGET]``: why a server flag has its value, from the source that set it."""

from __future__ import annotations

import sys

from . import dryrun
from .common import common_options, emit_json, host_for, tree_for

__all__ = ["register"]


def register(sub) -> None:
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
    dryrun.add_why_options(p)
    p.set_defaults(func=cmd_why)
    common_options(p)


def cmd_why(args) -> int:
    from kit.provenance import explain

    if args.dryrun:
        return dryrun.cmd_why_dryrun(args)
    with host_for(args) as host:
        tree = tree_for(host, args)
        if host.name != "local" and not args.no_snapshot:
            tree = tree.snapshot()
        snapshot = _remote_log(host, args.log) if args.log else None
        config = _model_config(host, args.model_config, snapshot)
        result = explain(tree, args.flag, snapshot, config)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0


def _remote_log(host, path: str):
    from kit.server_args import parse_log

    return parse_log(host.read_text(path))


def _model_config(host, path: str | None, snapshot):
    """The model's config.json as a dict: the one named, or the one beside the logged model_path."""
    from kit.model_config import load_model_config, model_config_beside

    if path is not None:
        return load_model_config(path, host)
    return model_config_beside(host, snapshot.get("model_path")) if snapshot is not None else None
