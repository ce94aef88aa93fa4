"""LocalHost: this machine, through a helper process over pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from kit._proc import kill_group
from kit.errors import HostError

from .base import Host
from .wire import BOOT, HelperConnection

__all__ = ["LocalHost"]


class LocalHost(Host):
    """This machine. Commands run through a local helper process over pipes."""

    def __init__(self, *, python: str | None = None, default_timeout: float = 60.0) -> None:
        self.name = "local"
        self.python = python or sys.executable
        self.default_timeout = default_timeout
        self._conn: HelperConnection | None = None
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _helper(self) -> HelperConnection:
        with self._lock:
            if self._conn is None:
                self._conn = self._spawn()
            return self._conn

    def _restart(self) -> HelperConnection:
        with self._lock:
            self._stop()
            self._conn = self._spawn()
            return self._conn

    def _spawn(self) -> HelperConnection:
        proc = subprocess.Popen(
            [self.python, "-u", "-c", BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, ended whole by _reap; Ctrl-C reaches the kit alone
        )
        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()

        def send(data: bytes) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(in_fd, view) :]

        conn = HelperConnection(lambda n: os.read(out_fd, n), send, lambda: self._reap(proc), self.name)
        self._proc = proc
        try:
            conn.start(timeout=30)
        except (EOFError, TimeoutError) as exc:
            self._reap(proc)
            raise HostError(
                f"could not start the kit's helper with {self.python}: {type(exc).__name__}",
                host=self.name,
                hint="check that this Python runs: " + self.python,
            ) from None
        return conn

    @staticmethod
    def _reap(proc: subprocess.Popen) -> None:
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)  # it exits by itself when its stdin closes, ending its commands
        except subprocess.TimeoutExpired:
            kill_group(proc)

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def forward(self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0) -> int:
        return remote_port  # this machine: nothing to forward

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
