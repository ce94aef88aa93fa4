"""Target strings: one string names what to investigate.

- ``local``: this machine.
- ``ssh://user@host:port``: a GPU box over SSH.
- ``user@host``, ``host`` or an alias from ``~/.ssh/config``: the same.
- ``lab``: the built-in stand-in server (not available yet).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from .errors import TargetError
from .hosts import Host, LocalHost, SSHHost

__all__ = ["connect", "parse_target"]

_HOSTNAME = re.compile(r"^(?:[A-Za-z0-9_.%+-]+@)?[A-Za-z0-9_.:\[\]-]+$")


def parse_target(target: str) -> dict:
    """Split a target string into its parts without connecting.

    Returns ``{"kind": "local"|"lab"|"ssh", "host": ..., "user": ..., "port": ...}``.
    """
    text = (target or "").strip()
    if text in ("", "local"):
        return {"kind": "local"}
    if text == "lab":
        return {"kind": "lab"}
    if text.startswith("ssh://"):
        return _parse_ssh_url(text)
    if "://" in text:
        raise TargetError(
            f"unknown target scheme in {target!r}",
            hint="use `local`, `lab`, `ssh://user@host:port`, `user@host` or an ~/.ssh/config alias",
        )
    if not _HOSTNAME.match(text):
        raise TargetError(
            f"{target!r} is not a host name, user@host, or ssh:// URL",
            hint="use `local`, `lab`, `ssh://user@host:port`, `user@host` or an ~/.ssh/config alias",
        )
    user, _, host = text.rpartition("@")
    return {"kind": "ssh", "host": host, "user": user or None, "port": None}


def _parse_ssh_url(text: str) -> dict:
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        raise TargetError(f"bad port in {text!r}", hint="write it as ssh://user@host:2222") from None
    if not parts.hostname:
        raise TargetError(f"no host in {text!r}", hint="write it as ssh://user@host:port")
    if parts.path not in ("", "/"):
        raise TargetError(f"{text!r} has a path; targets name a host only", hint="drop the path")
    return {
        "kind": "ssh",
        "host": parts.hostname,
        "user": unquote(parts.username) if parts.username else None,
        "port": port,
    }


def connect(target: str = "local", **ssh_options) -> Host:
    """Return a Host for a target string.

    ``ssh_options`` go to :class:`kit.hosts.SSHHost` (``trust_new_host``,
    ``key_filename``, ``known_hosts``, ``config_file``, ...). The connection
    opens lazily, on the first command.
    """
    spec = parse_target(target)
    if spec["kind"] == "local":
        return LocalHost()
    if spec["kind"] == "lab":
        raise TargetError(
            "the `lab` target is not available in this version of the kit",
            hint="use `local` or an SSH target for now",
        )
    options = dict(ssh_options)
    if spec["port"] is not None:
        options.setdefault("port", spec["port"])
    if spec["user"]:
        options.setdefault("user", spec["user"])
    return SSHHost(spec["host"], **options)
