"""Kept SSH connections, the commands' side (the keeper is kit/hosts/keeper.py): the next command to the same host reuses one helper, as OpenSSH's ControlPersist does.

Each ``sgl-kit`` command is a new process, and over SSH a new process pays for the handshake, the
login and the helper's start before its first request (0.36 s of a 0.8 s warm ``why`` on this
machine's sshd; more on a GPU box whose login shell runs conda). So a command that connected
directly leaves a keeper behind (``kit/hosts/keeper.py``, run as ``python -m kit.hosts.keeper``), which opens
its own connection with the same options (host keys checked the same way, never trusting a new
one), starts the helper there, and listens on a Unix socket in a directory only this user can
open (``kit._paths.runtime_dir``). The next command with the same target and options finds the
socket and talks to that helper through it.

The keeper relays the helper's wire protocol (``kit/hosts/wire.py``) for any number of commands
at once, giving each request a number of its own and the answers back under the command's
number. It serves only a kit whose helper is byte for byte its own, and exits after
``SGL_KIT_SSH_PERSIST`` seconds (default 600) with no command attached, when its connection or
helper goes, or on ``sgl-kit disconnect``. ``SGL_KIT_SSH_PERSIST=0`` turns keeping off; a
connection with a password is never kept. The library keeps nothing unless asked
(``SSHHost(persist=SECONDS)``); the command line asks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from kit._paths import runtime_dir
from kit._version import __version__
from kit.errors import HostError

from .base import Host
from .wire import HELPER_SOURCE, HelperConnection

__all__ = ["DEFAULT_PERSIST", "KEY_DEFAULTS", "PERSIST_ENV", "KeptHost", "attach", "disconnect", "kept", "kept_host",
           "key_options", "persist_seconds", "socket_path", "spawn"]

PERSIST_ENV = "SGL_KIT_SSH_PERSIST"
DEFAULT_PERSIST = 600.0
_ATTACH_TIMEOUT = 5.0


def persist_seconds() -> float:
    """How long a kept connection waits for the next command: ``$SGL_KIT_SSH_PERSIST`` seconds, 600 by default, 0 for never."""
    raw = os.environ.get(PERSIST_ENV, "").strip()
    if not raw:
        return DEFAULT_PERSIST
    try:
        value = float(raw)
    except ValueError:
        raise HostError(f"{PERSIST_ENV}={raw!r} is not a number of seconds",
                        hint=f"set {PERSIST_ENV}=600 to keep SSH connections 10 minutes, or 0 to never keep them") from None
    return max(0.0, value)


# SSHHost's keywords that decide where and how it connects, with its defaults (a test keeps them equal):
# the same ones, as given, name the same kept connection; a password, or trusting a new host key, never keeps.
KEY_DEFAULTS = {"port": None, "user": None, "key_filename": None, "config_file": "~/.ssh/config", "known_hosts": None,
                "allow_agent": True, "look_for_keys": True, "proxy_jump": None, "connect_timeout": 10.0,
                "helper_python": "python3"}


def key_options(host: str, **given) -> dict:
    """The options of a connection as given to SSHHost (``host`` and KEY_DEFAULTS' keywords), defaults filled in."""
    out = {"host": host, **KEY_DEFAULTS}
    out.update({k: v for k, v in given.items() if k in KEY_DEFAULTS})
    if "@" in host and out["user"] is None:
        out["user"], out["host"] = host.rsplit("@", 1)
    if isinstance(out["key_filename"], str):
        out["key_filename"] = [out["key_filename"]]
    # as files, wherever the keeper runs from (its directory is /)
    if out["key_filename"]:
        out["key_filename"] = [os.path.abspath(os.path.expanduser(k)) for k in out["key_filename"]]
    for name in ("config_file", "known_hosts"):
        if out[name]:
            out[name] = os.path.abspath(os.path.expanduser(out[name]))
    return out


def socket_path(options: dict) -> Path | None:
    """Where the keeper of a connection with these options listens (None when this user has no private
    directory for it). The name hashes the options, the ssh config file's size and time, the kit's
    version and its helper, so a changed config or another kit never reaches a keeper made before."""
    base = runtime_dir()
    if base is None:
        return None
    config = options.get("config_file")
    try:
        stat = os.stat(os.path.expanduser(config)) if config else None
    except OSError:
        stat = None
    key = json.dumps({"options": options, "config": [stat.st_size, stat.st_mtime_ns] if stat else None,
                      "kit": __version__, "helper": hashlib.sha256(HELPER_SOURCE).hexdigest(), "uid": os.getuid()},
                     sort_keys=True, default=str)
    return base / f"ssh-{hashlib.sha256(key.encode()).hexdigest()[:20]}.sock"


def attach(path: Path, name: str) -> HelperConnection | None:
    """A connection to the helper a keeper holds at ``path``, or None when none answers there (a
    socket left by a keeper that died is removed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_ATTACH_TIMEOUT)
    try:
        sock.connect(str(path))
    except (FileNotFoundError, NotADirectoryError):
        sock.close()
        return None
    except ConnectionRefusedError:
        sock.close()
        with contextlib.suppress(OSError):
            path.unlink()  # nobody listens: a keeper that was killed
        return None
    except OSError:
        sock.close()
        return None
    conn = HelperConnection(sock.recv, sock.sendall, sock.close, name)
    try:
        conn.start(timeout=_ATTACH_TIMEOUT)
    except (EOFError, TimeoutError, OSError, HostError, ValueError):
        sock.close()
        return None
    sock.settimeout(None)
    return conn


def spawn(path: Path, options: dict, persist: float) -> None:
    """Start a keeper for these options in the background (it connects on its own; nothing waits for it)."""
    try:
        proc = subprocess.Popen([sys.executable, "-m", "kit.hosts.keeper", str(path), repr(float(persist))],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True, cwd="/")
        proc.stdin.write(json.dumps(options).encode())
        proc.stdin.close()
    except OSError:
        pass  # keeping is an optimisation: the command goes on without it


def kept() -> list[Path]:
    """The sockets of this user's keepers."""
    base = runtime_dir()
    return sorted(base.glob("ssh-*.sock")) if base is not None else []


def disconnect(paths: list[Path] | None = None) -> list[Path]:
    """Ask keepers to close their connections and exit; the sockets that answered."""
    closed = []
    for path in kept() if paths is None else paths:
        conn = attach(path, "keeper")
        if conn is None:
            continue
        with contextlib.suppress(Exception):
            conn.post("keeper-exit")
        conn.close()
        closed.append(path)
    return closed


def kept_host(host: str, options: dict, make: Callable[[], Host]) -> KeptHost | None:
    """The host a keeper holds for these options (``host`` and kit.target.connect's SSH keywords), or None
    when no keeper answers: then the caller connects with ``make()`` itself (and leaves a keeper)."""
    if not options.get("persist") or options.get("password") is not None or options.get("use_helper") is False:
        return None
    path = socket_path(key_options(host, **options))
    if path is None:
        return None
    conn = attach(path, host)
    if conn is None:
        return None
    about = conn.hello.get("keeper") or {}
    return KeptHost(conn, make, str(about.get("name") or host), str(about.get("python") or "python3"),
                    float(options.get("default_timeout") or 60.0))


class KeptHost(Host):
    """A host reached through a keeper's helper: run, read and stat go over the keeper's socket, with no
    SSH of our own. What needs a transport of our own (a port forward), and anything of SSHHost not
    here, is asked of an SSHHost made on first need (``make``); when the keeper goes away mid-command,
    that SSHHost connects itself and the command goes on (the request in flight is retried once,
    as after any dropped connection)."""

    def __init__(self, conn: HelperConnection, make: Callable[[], Host], name: str, python: str,
                 default_timeout: float) -> None:
        self._conn: HelperConnection | None = conn
        self._make = make
        self._direct: Host | None = None
        self.name = name
        self.helper_python = python
        self.default_timeout = default_timeout
        self._lock = threading.RLock()

    @property
    def kept(self) -> bool:
        return self._conn is not None

    @property
    def python(self) -> str:
        return self.helper_python

    @property
    def mode(self) -> str:
        return "helper" if self._conn is not None else self._own().mode

    def _own(self) -> Host:
        with self._lock:
            if self._direct is None:
                self._direct = self._make()
            return self._direct

    def _helper(self):
        with self._lock:
            conn = self._conn
            if conn is not None and not conn.alive:  # the keeper went: from now on, our own connection
                conn.close()
                self._conn = conn = None
        return conn if conn is not None else self._own()._helper()

    def _restart(self):
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                return self._own()._helper()
        return self._own()._restart()

    def forward(self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0) -> int:
        return self._own().forward(remote_port, remote_host, local_port)

    def forward_failure(self, remote_port: int, remote_host: str = "127.0.0.1") -> str | None:
        return self._own().forward_failure(remote_port, remote_host)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._direct is not None:
                self._direct.close()

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._own(), name)
