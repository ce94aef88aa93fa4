"""The lab: an SGLang-compatible stand-in server for training and tests, with no GPU.

``python -m kit.lab.launch_server <sglang flags>`` is the server; ``sgl-kit lab up`` prepares
a lab directory shaped like the incident's box and starts it there (:class:`Lab` in
Python). This package's ``__init__`` imports nothing heavy, because the server imports
it on hosts that have only python3; the names below load on first use.

- ``control.py``: Lab, LabStatus: prepare, start, stop (through ``kit/_remote/lab_agent.py``);
- ``launch_server.py``: the server's entry point; ``launches.py``: from flags to the
  arguments real sglang resolves; ``throughput.py``: the scenario's tok/s model;
- ``engine.py``, ``api.py``, ``http.py``, ``metrics.py``: generation, sglang's HTTP API, the
  asyncio HTTP server, ``/metrics``;
- ``packaging.py``: the wheels a remote lab host needs.
"""

from __future__ import annotations

__all__ = ["Lab", "LabError", "LabStatus", "down", "ensure_running", "find_lab_server", "find_target_server",
           "status", "up", "variants"]


def __getattr__(name: str):
    if name in ("Lab", "LabStatus", "variants"):
        from . import control

        return getattr(control, name)
    if name == "LabError":
        from kit.errors import LabError

        return LabError
    raise AttributeError(f"module 'kit.lab' has no attribute {name!r}")


def up(variant: str | None = None, flags: list[str] | None = None, **options):
    """Start the lab on this machine (or return its status if it runs already)."""
    from .control import Lab

    return Lab().up(variant=variant, flags=flags, **options)


def down():
    """Stop the lab on this machine."""
    from .control import Lab

    return Lab().down()


def status():
    """Whether the lab on this machine runs, and where."""
    from .control import Lab

    return Lab().status()


def ensure_running(target: str = "lab"):
    """For target ``lab``, start the lab unless it runs; other targets are left alone (None)."""
    from kit.target import parse_target

    if parse_target(target)["kind"] != "lab":
        return None
    return up()


def find_lab_server(host, servers=None, lab_dir: str | None = None):
    """The lab's server on ``host`` (this machine's lab directory unless ``lab_dir`` is given)."""
    from kit._paths import lab_dir as default_lab_dir
    from kit.errors import TargetError
    from kit.target import discover

    lab_dir = lab_dir or default_lab_dir()
    servers = discover(host) if servers is None else servers
    picked = [s for s in servers if s.kind == "lab" and s.labels.get("lab_dir") == lab_dir]
    if not picked:
        raise TargetError(f"the lab is not running on this machine (looked for a lab server of {lab_dir})",
                          hint="start it with kit.lab.up() (from a terminal: `sgl-kit lab up`)",
                          cli_hint="start it with `sgl-kit lab up`")
    return picked[-1]


def find_target_server(host, target: str | None = None, *, pid: int | None = None, port: int | None = None,
                       servers=None):
    """The server a target string means: the lab's for ``lab``, else the one chosen by pid or port.

    This is what a notebook calls with its ``target`` parameter, so the same cell works on
    the lab and on a real box.
    """
    from kit.target import find_server, parse_target

    if target is not None and parse_target(target)["kind"] == "lab" and pid is None and port is None:
        return find_lab_server(host, servers)
    return find_server(host, pid=pid, port=port, servers=servers)
