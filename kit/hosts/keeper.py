"""The keeper of a kept SSH connection (kit.hosts.kept), run as ``python -m kit.hosts.keeper SOCKET SECONDS``.

It reads the connection's options (kit.hosts.kept.key_options, never a password) on stdin,
connects with them (a new host key is never trusted), starts the helper, and only then listens on
SOCKET, so a socket that answers has a helper behind it. Each command that attaches sends the
helper's boot as it would to a fresh one; the keeper checks the source is its own, answers with the
helper's hello (and its own name, pid and python), then relays the command's requests under
numbers of its own and the answers back under the command's. A command that goes has what it
left running cancelled. It exits SECONDS after its last command went, when its helper or
connection ends, or when asked (``sgl-kit disconnect``), removing its socket.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from .ssh import SSHHost
from .wire import HEADER, HELPER_SOURCE, K_DONE, K_ERROR, K_HELLO, MAGIC, HelperConnection

__all__ = ["main"]

_LENGTH = struct.Struct(">I")


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.mine: dict[int, int] = {}  # the command's request id -> the keeper's
        self.alive = True

    def send(self, data: bytes) -> None:
        if not self.alive:
            return
        try:
            with self.lock:
                self.sock.sendall(data)
        except OSError:
            self.alive = False

    def read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return bytes(out)

    def read_line(self, limit: int = 32) -> bytes:
        out = bytearray()
        while not out.endswith(b"\n"):
            if len(out) > limit:
                raise ValueError("no length line")
            out += self.read_exact(1)
        return bytes(out)


class _Upstream(HelperConnection):
    """The keeper's one helper: its answers go to the command that asked, under that command's number."""

    def __init__(self, chan, keeper: _Keeper, name: str) -> None:
        super().__init__(chan.recv, chan.sendall, chan.close, name)
        self.keeper = keeper

    def _reader(self) -> None:
        try:
            while True:
                length, rid, kind = HEADER.unpack(self._read_exact(HEADER.size))
                self.keeper.answer(rid, kind, self._read_exact(length))
        except Exception:  # noqa: BLE001 - any end of the helper's output ends the keeper
            pass
        self.keeper.stop()


class _Keeper:
    def __init__(self, path: Path, persist: float) -> None:
        self.path, self.persist = path, persist
        self.ids = itertools.count(1)
        self.routes: dict[int, tuple[_Client, int]] = {}
        self.clients: set[_Client] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.idle_since = time.monotonic()
        self.upstream: _Upstream | None = None
        self.hello = b""

    def answer(self, rid: int, kind: int, payload: bytes) -> None:
        with self.lock:
            route = self.routes.get(rid)
            if route is not None and kind in (K_DONE, K_ERROR):
                del self.routes[rid]
                route[0].mine.pop(route[1], None)
        if route is not None:
            route[0].send(HEADER.pack(len(payload), route[1], kind) + payload)

    def stop(self) -> None:
        self.stopped.set()

    def serve_client(self, sock: socket.socket) -> None:
        client = _Client(sock)
        with self.lock:
            self.clients.add(client)
        try:
            size = int(client.read_line())
            if client.read_exact(size) != HELPER_SOURCE:
                return  # another kit: it connects on its own
            client.send(MAGIC + HEADER.pack(len(self.hello), 0, K_HELLO) + self.hello)
            while client.alive and not self.stopped.is_set():
                (length,) = _LENGTH.unpack(client.read_exact(_LENGTH.size))
                request = json.loads(client.read_exact(length))
                if not self.relay(client, request):
                    break
        except (EOFError, OSError, ValueError):
            pass
        finally:
            self.drop(client)

    def relay(self, client: _Client, request: dict) -> bool:
        op = request.pop("op", None)
        if op == "exit":
            return False
        if op == "keeper-exit":
            self.stop()
            return False
        if op in ("ack", "cancel"):
            target = client.mine.get(request.get("target"))
            if target is None:
                return True
            request["target"] = target
        if "id" in request:
            mine = next(self.ids)
            with self.lock:
                self.routes[mine] = (client, request["id"])
                client.mine[request["id"]] = mine
            request["id"] = mine
        self.upstream.post(op, **request)
        return True

    def drop(self, client: _Client) -> None:
        with self.lock:
            self.clients.discard(client)
            left = [mine for mine in client.mine.values() if mine in self.routes]
            for mine in left:
                del self.routes[mine]
            if not self.clients:
                self.idle_since = time.monotonic()
        for mine in left:  # what the command left running is stopped, as its own connection's end would
            with contextlib.suppress(Exception):
                self.upstream.post("cancel", target=mine)
        client.alive = False
        with contextlib.suppress(OSError):
            client.sock.close()

    def run(self, host) -> None:
        host.connect()
        chan = host.helper_channel()
        self.upstream = _Upstream(chan, self, host.name)
        self.upstream.start(timeout=max(host.connect_timeout, 20.0))
        chan.settimeout(None)
        self.hello = json.dumps({**self.upstream.hello, "keeper": {"name": host.name, "pid": os.getpid(),
                                                                      "python": host.helper_python}}).encode()
        listener = _listen(self.path)
        if listener is None:
            return
        mine = os.stat(self.path)
        listener.settimeout(1.0)
        try:
            while not self.stopped.is_set():
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    with self.lock:
                        idle = not self.clients and time.monotonic() - self.idle_since > self.persist
                    if idle:
                        break
                    continue
                sock.settimeout(None)
                self.idle_since = time.monotonic()
                threading.Thread(target=self.serve_client, args=(sock,), daemon=True).start()
        finally:
            _unlink_if_ours(self.path, mine)
            listener.close()
            self.upstream.close()


def _listen(path: Path) -> socket.socket | None:
    """The keeper's socket at ``path``, made only this user's; None when another keeper answers there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        try:
            sock.bind(str(path))
        except OSError:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
                sock.close()
                return None  # another keeper of the same connection got there first
            except OSError:
                path.unlink(missing_ok=True)  # a dead keeper's
                sock.bind(str(path))
            finally:
                probe.close()
    finally:
        os.umask(old)
    sock.listen(16)
    return sock


def _unlink_if_ours(path: Path, mine: os.stat_result) -> None:
    """Remove the socket unless another keeper has put its own there since."""
    with contextlib.suppress(OSError):
        now = os.stat(path)
        if (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev):
            path.unlink()


def main(argv: list[str]) -> int:
    path, persist = Path(argv[0]), float(argv[1])
    options = json.loads(sys.stdin.buffer.read() or b"{}")
    host = SSHHost(**options, trust_new_host=False)
    try:
        _Keeper(path, persist).run(host)
    except Exception:  # noqa: BLE001 - a keeper that cannot connect simply is not there; the command connected itself
        return 1
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
