"""The lab: an SGLang-compatible stand-in server for training and tests, with no GPU.

``python -m kit.lab.launch_server <sglang flags>`` is the server; ``sgl-kit lab up`` prepares
a lab directory shaped like the incident's box and starts it there (:class:`Lab` in
Python). This package's ``__init__`` imports nothing heavy, because the server imports
it on hosts that have only python3; the names below load on first use.
"""

from __future__ import annotations

__all__ = ["Lab", "LabError", "LabStatus", "down", "ensure_running", "status", "up", "variants"]


def __getattr__(name: str):
    if name in ("Lab", "LabError", "LabStatus", "variants"):
        from . import control

        return getattr(control, name)
    raise AttributeError(f"module 'kit.lab' has no attribute {name!r}")


def up(variant: str = "new", flags: list[str] | None = None, **options):
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
