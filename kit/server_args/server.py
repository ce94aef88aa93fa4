"""The arguments of a discovered server (kit.target.ServerProcess): effective, explicit, classified."""

from __future__ import annotations

from typing import Any

from kit._secrets import mask_fields
from kit.errors import HostError, TargetError

from .command import parse_command
from .compare import classify, classify_rows
from .flags import cli_defaults, flag_table
from .log import parse_log
from .server_info import from_server_info
from .snapshot import ServerArgsSnapshot

__all__ = ["classify_server", "classify_server_rows", "effective_args", "explicit_args"]


def effective_args(server) -> ServerArgsSnapshot:
    """The arguments the server runs with: /server_info when it answers, else its log."""
    try:
        return from_server_info(server.server_info())
    except (HostError, TargetError):
        return parse_log(server.log_text())


def explicit_args(server, tree) -> dict[str, Any]:
    """The flags its argv sets, read with the flag table of its own sglang source (``tree``); a secret flag's
    value masked (kit/_secrets.py: the kit never needs it)."""
    return mask_fields(parse_command(server.argv, flag_table(tree), cwd=server.cwd))


def classify_server(server, tree, snapshot: ServerArgsSnapshot | None = None):
    """classify() of its effective, explicit and default args: what SGLang changed on its own.

    A server started from a command line starts from the argparse defaults (cli_defaults).
    """
    snapshot = snapshot if snapshot is not None else effective_args(server)
    return classify(snapshot, explicit_args(server, tree), cli_defaults(tree))


def classify_server_rows(server, tree, snapshot: ServerArgsSnapshot | None = None) -> list[tuple]:
    """classify_server() as plain tuples (kit.server_args.compare.classify_rows), None for NA."""
    snapshot = snapshot if snapshot is not None else effective_args(server)
    return classify_rows(snapshot, explicit_args(server, tree), cli_defaults(tree))
