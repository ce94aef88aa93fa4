"""Where commands run: this machine or a GPU box over SSH, behind one interface.

Both hosts talk to the same small helper process (``kit/_remote/helper.py``), started
once per connection: locally through pipes, remotely through one SSH channel. That
keeps semantics identical (timeouts kill the process group, output streams with flow
control, only requested lines of a file travel) and makes a remote command cost about a
millisecond instead of a login shell.

- ``base.py``: the Host interface, CommandResult, CommandStream, FileStat;
- ``wire.py``: the kit's side of the helper's wire protocol;
- ``local.py``: LocalHost; ``ssh.py``: SSHHost (paramiko); ``exec_fallback.py``: one SSH
  channel per command, for hosts without python3;
- ``kept.py``: an SSH connection and its helper kept for the next process (ControlPersist's idea);
  ``keeper.py``: the process that keeps it.

This package knows nothing of SGLang.
"""

from __future__ import annotations

from .base import Command, CommandResult, CommandStream, FileStat, Host
from .local import LocalHost

__all__ = ["Command", "CommandResult", "CommandStream", "FileStat", "Host", "LocalHost", "SSHHost"]


def __getattr__(name: str):
    # paramiko costs a quarter second to import and is not needed on this
    # machine's own side of the lab, so SSHHost is loaded on first use.
    if name == "SSHHost":
        from .ssh import SSHHost

        return SSHHost
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
