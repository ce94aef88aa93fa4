"""The kit's side of the helper's wire protocol (the helper itself is kit/_remote/helper.py).

Requests go as ``>I`` length + JSON; answers come as ``>IIB`` frames (payload length,
request id, kind). A reader thread demultiplexes frames by request id, so several
requests (a ``tail -f`` stream and short commands, say) share one connection. The same
protocol runs over local pipes (LocalHost) and over one SSH channel (SSHHost); the
no-python fallback (``exec_fallback.py``) emulates it.
"""

from __future__ import annotations

import itertools
import json
import queue
import struct
import threading
import time

from kit._remote import script
from kit.errors import HostError

__all__ = [
    "ACK_EVERY", "BOOT", "DEAD", "GRACE", "HEADER", "HELPER_SOURCE", "K_DATA", "K_DONE", "K_ERROR", "K_HELLO",
    "K_STDERR", "K_STDOUT", "MAGIC", "NO_PYTHON", "ConnectionDead", "HelperConnection", "NoPython", "Pending",
    "take_frame",
]

HELPER_SOURCE = script("helper").encode()
MAGIC = b"SGLKIT-HELPER-1\n"
NO_PYTHON = b"__SGLKIT_NO_PYTHON__"
HEADER = struct.Struct(">IIB")
K_HELLO, K_STDOUT, K_STDERR, K_DATA, K_DONE, K_ERROR = 0, 1, 2, 3, 4, 5
DEAD = -1
ACK_EVERY = 1024 * 1024
GRACE = 5.0  # on top of a command's timeout, for the helper to kill and report
BOOT = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    "exec(compile(sys.stdin.buffer.read(n),'sglkit_helper','exec'),{'__name__':'sglkit_helper'})"
)


class Pending:
    """Frames for one request, with the bookkeeping for flow control."""

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.frames: queue.Queue = queue.Queue()
        self.consumed = 0


def take_frame(pending: Pending, deadline: float | None) -> tuple[int, bytes]:
    """The next frame of a request; TimeoutError past the deadline, ConnectionDead if the connection went."""
    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        kind, payload = pending.frames.get(timeout=wait)
    except queue.Empty:
        raise TimeoutError from None
    if kind == DEAD:
        raise ConnectionDead(payload.decode())
    return kind, payload


class HelperConnection:
    """Client side of the helper protocol, over any byte pipe.

    A reader thread demultiplexes frames by request id so several requests
    (a `tail -f` stream and short commands, say) can share one connection.
    """

    def __init__(self, recv, send, close, host_name: str) -> None:
        self._recv, self._send, self._close = recv, send, close
        self.host_name = host_name
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._buf = bytearray()
        self.dead_reason: str | None = None
        self.hello: dict = {}

    # -- start --------------------------------------------------------------
    def start(self, timeout: float) -> None:
        """Send the helper source and wait for its hello frame."""
        self._send(str(len(HELPER_SOURCE)).encode() + b"\n" + HELPER_SOURCE)
        deadline = time.monotonic() + timeout
        self._skip_to_magic(deadline)
        length, rid, kind = HEADER.unpack(self._read_exact(HEADER.size, deadline))
        self.hello = json.loads(self._read_exact(length, deadline))
        threading.Thread(target=self._reader, name=f"kit-helper-{self.host_name}", daemon=True).start()

    def _skip_to_magic(self, deadline: float) -> None:
        # Login shells on real boxes print banners ("conda activated", motd
        # fragments) on stdout before our helper starts; skip those lines.
        noise = bytearray()
        while True:
            line = self._read_line(deadline)
            if line == MAGIC:
                return
            if line.startswith(NO_PYTHON):
                raise NoPython()
            noise += line
            if len(noise) > 65536:
                raise HostError(
                    f"the kit's helper did not start on {self.host_name}: "
                    f"unexpected output {bytes(noise[:200])!r}",
                    host=self.host_name,
                )

    def _fill(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError
        data = self._recv(65536)
        if not data:
            raise EOFError
        self._buf += data

    def _read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            self._fill(deadline)
        idx = self._buf.index(b"\n") + 1
        line = bytes(self._buf[:idx])
        del self._buf[:idx]
        return line

    def _read_exact(self, n: int, deadline: float = float("inf")) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    # -- reader thread ------------------------------------------------------
    def _reader(self) -> None:
        reason = "the helper's output ended"
        try:
            while True:
                length, rid, kind = HEADER.unpack(self._read_exact(HEADER.size))
                payload = self._read_exact(length)
                with self._lock:
                    pending = self._pending.get(rid)
                if pending is not None:
                    pending.frames.put((kind, payload))
        except EOFError:
            pass
        except Exception as exc:  # any transport failure ends this connection
            reason = f"{type(exc).__name__}: {exc}"
        self._die(reason)

    def _die(self, reason: str) -> None:
        with self._lock:
            if self.dead_reason is None:
                self.dead_reason = reason
            pendings = list(self._pending.values())
        for pending in pendings:
            pending.frames.put((DEAD, reason.encode()))

    @property
    def alive(self) -> bool:
        return self.dead_reason is None

    # -- requests -----------------------------------------------------------
    def request(self, op: str, **fields) -> Pending:
        pending = Pending(next(self._ids))
        with self._lock:
            if self.dead_reason is not None:
                raise ConnectionDead(self.dead_reason)
            self._pending[pending.rid] = pending
        self.post(op, id=pending.rid, **fields)
        return pending

    def post(self, op: str, **fields) -> None:
        body = json.dumps({"op": op, **fields}).encode()
        try:
            with self._send_lock:
                self._send(struct.pack(">I", len(body)) + body)
        except Exception as exc:
            self._die(f"{type(exc).__name__}: {exc}")
            raise ConnectionDead(self.dead_reason or str(exc)) from exc

    def next_frame(self, pending: Pending, deadline: float | None) -> tuple[int, bytes]:
        try:
            kind, payload = take_frame(pending, deadline)
        except ConnectionDead:
            self.forget(pending)
            raise
        if kind in (K_STDOUT, K_STDERR):
            self._ack(pending, len(payload))
        return kind, payload

    def _ack(self, pending: Pending, n: int) -> None:
        pending.consumed += n
        if pending.consumed >= ACK_EVERY:
            self.post("ack", target=pending.rid, n=pending.consumed)
            pending.consumed = 0

    def forget(self, pending: Pending) -> None:
        with self._lock:
            self._pending.pop(pending.rid, None)

    def close(self) -> None:
        try:
            if self.alive:
                self.post("exit")
        except ConnectionDead:
            pass
        self._die("closed")
        self._close()


class ConnectionDead(Exception):
    """The helper connection is gone (internal; becomes HostDisconnected)."""


class NoPython(Exception):
    """The remote has no python3 for the helper (internal)."""
