"""What every ``sgl-kit`` command shares: the common options, the target's host, JSON output.

A command module registers its sub-commands with ``register(sub)`` and takes what it
needs from here; nothing else in ``kit/`` registers commands or prints JSON for the CLI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kit.errors import KitError

__all__ = ["common_options", "console", "emit_json", "host_for", "local_file", "plain", "ssh_options",
           "tree_for"]


def common_options(parser: argparse.ArgumentParser, suppress: bool = True) -> argparse.ArgumentParser:
    """Options accepted before or after the sub-command (``suppress``: the top level owns the defaults)."""
    d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    g = parser.add_argument_group("common options")
    g.add_argument("--json", action="store_true", default=d(False), help="print JSON for scripts")
    g.add_argument("--python", metavar="PY", default=d("python3"),
                   help="interpreter on the target whose sglang to read (default: python3)")
    g.add_argument("--package-dir", metavar="DIR", default=d(None),
                   help="sglang package directory on the target (skips --python lookup)")
    g.add_argument("--trust-new-host", action="store_true", default=d(False),
                   help="accept and record an unknown SSH host key (check its fingerprint first)")
    g.add_argument("--identity", "-i", metavar="FILE", default=d(None), help="SSH private key file")
    g.add_argument("--known-hosts", metavar="FILE", default=d(None),
                   help="known_hosts file (default: ~/.ssh/known_hosts or UserKnownHostsFile)")
    g.add_argument("--ssh-config", metavar="FILE", default=d("~/.ssh/config"), help="ssh config file")
    g.add_argument("--timeout", type=float, metavar="SEC", default=d(60.0),
                   help="per-command timeout on the target (default: 60)")
    return parser


def ssh_options(args) -> dict[str, Any]:
    """The SSH keywords of kit.target.connect, from the common options (empty for non-SSH targets)."""
    from kit.target import parse_target

    if parse_target(args.target)["kind"] != "ssh":
        return {}
    return {"trust_new_host": args.trust_new_host, "key_filename": args.identity,
            "known_hosts": args.known_hosts, "config_file": args.ssh_config, "default_timeout": args.timeout}


def host_for(args):
    """The Host that ``args.target`` names."""
    from kit.target import connect

    return connect(args.target, **ssh_options(args))


def tree_for(host, args):
    """The sglang source the command reads: --package-dir, the lab's, or --python's."""
    from kit.source import SourceTree

    fill_from_discovery(host, args)
    if args.package_dir:
        return SourceTree.at(host, args.package_dir)
    return SourceTree.locate(host, "sglang", python=args.python)


def fill_from_discovery(host, args) -> None:
    """For target ``lab``: the sglang source (and, for ``why``, the log) of the running lab, unless given."""
    from kit.target import parse_target

    if parse_target(args.target)["kind"] != "lab":
        return
    wants_log = hasattr(args, "log")
    if args.package_dir and (args.log if wants_log else True):
        return
    from kit.lab import find_lab_server

    server = find_lab_server(host)
    args.package_dir = args.package_dir or server.sglang_dir
    if wants_log:
        args.log = args.log or server.log_path


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def emit_json(obj) -> None:
    """The one way a command prints JSON: indented, anything else as str."""
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def plain(value):
    """A table cell as JSON-safe data: NA becomes None, objects their text."""
    import pandas as pd

    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)


def local_file(path: str) -> str:
    if not os.path.isfile(path):
        raise KitError(f"no such file: {path}", hint="give the path of a file on this machine")
    return path
