"""Where a package is installed on a host, and which version: the locate script's answer."""

from __future__ import annotations

import posixpath
import re

from kit._remote import MARKER, parse_result
from kit._text import clip
from kit._wheels import norm_dist
from kit.errors import (
    PackageNotFound,
    RemoteFileError,
)
from kit.hosts import Host

__all__ = ['locate_payload', 'natural_key', 'no_interpreter', 'not_found', 'sibling_dist_info']


def interpreter_missing(res) -> bool:
    err = res.stderr.lower()
    return res.exited in (126, 127) or ("no such file" in err and MARKER not in res.stdout)


def no_interpreter(host: Host, python: str, detail: str) -> PackageNotFound:
    return PackageNotFound(
        f"could not run interpreter {python!r} on {host.name}: {clip(detail.strip(), 200)}",
        hint="pass the server's interpreter with --python PATH, or the package with --package-dir DIR",
    )


def locate_payload(res, host: Host, python: str, package: str) -> dict:
    if interpreter_missing(res):
        raise no_interpreter(host, python, f"exit {res.exited}: {res.stderr}")
    found = parse_result(res.stdout)
    if found is not None:
        return found
    raise PackageNotFound(
        f"{python} on {host.name} did not answer the locate probe for {package!r} "
        f"(exit {res.exited}): {clip((res.stderr or res.stdout).strip(), 300)}",
        hint="pass --python PATH of the interpreter that runs sglang, or --package-dir DIR",
    )


def not_found(info: dict, host: Host, python: str, package: str) -> PackageNotFound:
    paths = [p for p in info.get("sys_path", []) if p][:6]
    kind = "a module, not a package" if info.get("is_module") else "not importable"
    return PackageNotFound(
        f"{package!r} is {kind} by {python} ({info.get('executable')}, Python {info.get('python')}) "
        f"on {host.name}; its sys.path: {', '.join(paths)}",
        hint="pass the interpreter that runs the server with --python PATH "
        "(see /proc/PID/exe), or the package directory with --package-dir DIR",
    )


def sibling_dist_info(host: Host, root: str, package: str) -> tuple[str | None, str | None]:
    """(dist-info path, version) from `<site>/<pkg>-<ver>.dist-info/METADATA` next to root."""
    parent = posixpath.dirname(root)
    res = host.run(
        ["find", parent, "-mindepth", "1", "-maxdepth", "1", "-type", "d", "-name", "*.dist-info"],
        timeout=30,
    )
    want = norm_dist(package)
    names = [posixpath.basename(p) for p in res.stdout.splitlines()]
    hits = sorted((n for n in names if norm_dist(n.split("-")[0]) == want), key=natural_key)
    if not hits:
        return None, None
    dist = posixpath.join(parent, hits[-1])
    try:
        head, _ = host.read_lines(dist + "/METADATA", 1, 60)
    except RemoteFileError:
        return dist, None
    versions = [ln.split(":", 1)[1].strip() for ln in head if ln.startswith("Version:")]
    return dist, (versions[0] if versions else None)


def natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
