"""Where commands run: this machine or a GPU box over SSH, behind one interface.

Both hosts talk to the same small helper process (``kit/_remote_helper.py``),
started once per connection: locally through pipes, remotely through one SSH
channel. That keeps semantics identical (timeouts kill the process group,
output streams with flow control, only requested lines of a file travel) and
makes a remote command cost about a millisecond instead of a login shell.

This module knows nothing of SGLang.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import os
import queue
import shlex
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import (
    CommandFailed,
    CommandTimeout,
    HostDisconnected,
    HostError,
    RemoteFileError,
)

if TYPE_CHECKING:
    from ._ssh import SSHHost

__all__ = ["CommandResult", "CommandStream", "FileStat", "Host", "LocalHost", "SSHHost"]

_HELPER_SOURCE = (Path(__file__).with_name("_remote_helper.py")).read_bytes()
_MAGIC = b"SGLKIT-HELPER-1\n"
_NO_PYTHON = b"__SGLKIT_NO_PYTHON__"
_HEADER = struct.Struct(">IIB")
_K_HELLO, _K_STDOUT, _K_STDERR, _K_DATA, _K_DONE, _K_ERROR = 0, 1, 2, 3, 4, 5
_DEAD = -1
_ACK_EVERY = 1024 * 1024
_GRACE = 5.0  # on top of a command's timeout, for the helper to kill and report
_BOOT = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    "exec(compile(sys.stdin.buffer.read(n),'sglkit_helper','exec'),{'__name__':'sglkit_helper'})"
)

Command = str | Sequence[str]


def _display(cmd: Command) -> str:
    return cmd if isinstance(cmd, str) else shlex.join(list(cmd))


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class CommandResult:
    """What a command did. True when it succeeded, like invoke's Result."""

    command: str
    host: str
    exited: int
    stdout: str
    stderr: str
    duration: float
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exited == 0 and not self.timed_out

    @property
    def failed(self) -> bool:
        return not self.ok

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        cmd = self.command if len(self.command) <= 60 else self.command[:57] + "..."
        state = "timed out" if self.timed_out else f"exit {self.exited}"
        return (
            f"<CommandResult {cmd!r} on {self.host}: {state}, {self.duration * 1000:.1f} ms, "
            f"{len(self.stdout_bytes)} B out, {len(self.stderr_bytes)} B err>"
        )

    def _repr_html_(self) -> str:
        colour = "#2e7d32" if self.ok else "#c62828"
        state = "timed out" if self.timed_out else f"exit {self.exited}"
        parts = [
            f"<div><code>{html.escape(self.command)}</code> on <b>{html.escape(self.host)}</b>: "
            f"<span style='color:{colour}'>{state}</span> in {self.duration * 1000:.1f} ms</div>"
        ]
        for label, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text:
                shown = text if len(text) <= 20000 else text[:20000] + "\n... (truncated for display)"
                parts.append(
                    f"<details open><summary>{label}</summary><pre>{html.escape(shown)}</pre></details>"
                )
        return "".join(parts)


@dataclass(frozen=True)
class FileStat:
    path: str
    size: int
    mtime: float
    mode: int
    is_dir: bool
    is_file: bool


class _Pending:
    """Frames for one request, with the bookkeeping for flow control."""

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.frames: queue.Queue = queue.Queue()
        self.consumed = 0


def _take_frame(pending: _Pending, deadline: float | None) -> tuple[int, bytes]:
    """The next frame of a request; TimeoutError past the deadline, _Dead if the connection went."""
    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        kind, payload = pending.frames.get(timeout=wait)
    except queue.Empty:
        raise TimeoutError from None
    if kind == _DEAD:
        raise _Dead(payload.decode())
    return kind, payload


class _HelperConnection:
    """Client side of the helper protocol, over any byte pipe.

    A reader thread demultiplexes frames by request id so several requests
    (a `tail -f` stream and short commands, say) can share one connection.
    """

    def __init__(self, recv, send, close, host_name: str) -> None:
        self._recv, self._send, self._close = recv, send, close
        self.host_name = host_name
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._buf = bytearray()
        self.dead_reason: str | None = None
        self.hello: dict = {}

    # -- start --------------------------------------------------------------
    def start(self, timeout: float) -> None:
        """Send the helper source and wait for its hello frame."""
        self._send(str(len(_HELPER_SOURCE)).encode() + b"\n" + _HELPER_SOURCE)
        deadline = time.monotonic() + timeout
        self._skip_to_magic(deadline)
        length, rid, kind = _HEADER.unpack(self._read_exact(_HEADER.size, deadline))
        self.hello = json.loads(self._read_exact(length, deadline))
        threading.Thread(target=self._reader, name=f"kit-helper-{self.host_name}", daemon=True).start()

    def _skip_to_magic(self, deadline: float) -> None:
        # Login shells on real boxes print banners ("conda activated", motd
        # fragments) on stdout before our helper starts; skip those lines.
        noise = bytearray()
        while True:
            line = self._read_line(deadline)
            if line == _MAGIC:
                return
            if line.startswith(_NO_PYTHON):
                raise _NoPython()
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
                length, rid, kind = _HEADER.unpack(self._read_exact(_HEADER.size))
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
            pending.frames.put((_DEAD, reason.encode()))

    @property
    def alive(self) -> bool:
        return self.dead_reason is None

    # -- requests -----------------------------------------------------------
    def request(self, op: str, **fields) -> _Pending:
        pending = _Pending(next(self._ids))
        with self._lock:
            if self.dead_reason is not None:
                raise _Dead(self.dead_reason)
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
            raise _Dead(self.dead_reason or str(exc)) from exc

    def next_frame(self, pending: _Pending, deadline: float | None) -> tuple[int, bytes]:
        try:
            kind, payload = _take_frame(pending, deadline)
        except _Dead:
            self.forget(pending)
            raise
        if kind in (_K_STDOUT, _K_STDERR):
            self._ack(pending, len(payload))
        return kind, payload

    def _ack(self, pending: _Pending, n: int) -> None:
        pending.consumed += n
        if pending.consumed >= _ACK_EVERY:
            self.post("ack", target=pending.rid, n=pending.consumed)
            pending.consumed = 0

    def forget(self, pending: _Pending) -> None:
        with self._lock:
            self._pending.pop(pending.rid, None)

    def close(self) -> None:
        try:
            if self.alive:
                self.post("exit")
        except _Dead:
            pass
        self._die("closed")
        self._close()


class _Dead(Exception):
    """The helper connection is gone (internal; becomes HostDisconnected)."""


class _NoPython(Exception):
    """The remote has no python3 for the helper (internal)."""


class CommandStream:
    """Output of a running command, chunk by chunk.

    Iterate to get ``(name, bytes)`` pairs with name ``"stdout"`` or
    ``"stderr"``. After the iteration ``exited`` and ``timed_out`` are set.
    Leaving a ``with`` block early kills the command.
    """

    def __init__(self, host: Host, command: str, chunks: Iterator[tuple[str, bytes]], cancel) -> None:
        self.host = host.name
        self.command = command
        self.exited: int | None = None
        self.timed_out = False
        self.duration: float | None = None
        self._chunks = chunks
        self._cancel = cancel
        self._done = False

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        return self

    def __next__(self) -> tuple[str, bytes]:
        try:
            return next(self._chunks)
        except StopIteration:
            self._done = True
            raise

    def _finish(self, info: dict) -> None:
        self.exited = info.get("exited")
        self.timed_out = bool(info.get("timed_out"))
        self.duration = info.get("duration")

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._cancel()

    def __enter__(self) -> CommandStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.exited is None else f"exit {self.exited}"
        return f"<CommandStream {self.command!r} on {self.host}: {state}>"


class Host:
    """A place to run commands and read files. Use LocalHost or SSHHost."""

    name: str = "?"
    default_timeout: float = 60.0

    # -- subclass hooks -----------------------------------------------------
    def _helper(self) -> _HelperConnection:
        raise NotImplementedError

    def _restart(self) -> _HelperConnection:
        raise NotImplementedError

    # -- commands -----------------------------------------------------------
    def run(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        check: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run ``cmd`` and collect its output.

        A string runs under ``/bin/sh -c`` on the host; a list is executed
        directly with no shell, which is what to use for paths you did not
        write yourself. On timeout the whole process group is killed and
        CommandTimeout raised.
        """
        timeout = self.default_timeout if timeout is None else timeout
        out, err = bytearray(), bytearray()
        stream = self._start_stream(cmd, timeout, env, cwd, stdin)
        for name, data in stream:
            (out if name == "stdout" else err).extend(data)
        result = CommandResult(
            command=stream.command,
            host=self.name,
            exited=stream.exited if stream.exited is not None else -1,
            stdout=_decode(bytes(out)),
            stderr=_decode(bytes(err)),
            duration=stream.duration or 0.0,
            stdout_bytes=bytes(out),
            stderr_bytes=bytes(err),
            timed_out=stream.timed_out,
        )
        if result.timed_out:
            raise CommandTimeout(result.command, timeout, host=self.name, partial=result)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def stream(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> CommandStream:
        """Start ``cmd`` and return a CommandStream of its output chunks.

        With no timeout the command may run for ever (``tail -f``); close the
        stream, or leave its ``with`` block, to kill it.
        """
        return self._start_stream(cmd, timeout, env, cwd, stdin)

    def _start_stream(self, cmd, timeout, env, cwd, stdin) -> CommandStream:
        fields: dict = {"timeout": timeout, "env": dict(env) if env else None, "cwd": cwd}
        if isinstance(cmd, str):
            fields["cmd"] = cmd
        else:
            fields["argv"] = [os.fspath(a) for a in cmd]
            if not fields["argv"]:
                raise ValueError("empty command")
        if stdin is not None:
            fields["stdin"] = base64.b64encode(stdin).decode()
        conn = self._connection_for_new_request()
        try:
            pending = conn.request("run", **fields)
        except _Dead as exc:
            raise self._disconnected(exc, "run a command") from None
        stream = CommandStream(self, _display(cmd), iter(()), lambda: self._cancel(conn, pending))
        stream._chunks = self._chunks(conn, pending, stream, timeout)
        return stream

    def _chunks(self, conn, pending, stream, timeout) -> Iterator[tuple[str, bytes]]:
        deadline = None if timeout is None else time.monotonic() + timeout + _GRACE
        try:
            while True:
                try:
                    kind, payload = conn.next_frame(pending, deadline)
                except TimeoutError:
                    self._cancel(conn, pending)
                    stream._finish({"exited": -1, "timed_out": True, "duration": timeout})
                    return
                if kind in (_K_STDOUT, _K_STDERR):
                    yield ("stdout" if kind == _K_STDOUT else "stderr"), payload
                elif kind == _K_DONE:
                    stream._finish(json.loads(payload))
                    return
                elif kind == _K_ERROR:
                    raise self._request_error(json.loads(payload), f"run {stream.command}")
        except _Dead as exc:
            raise self._disconnected(exc, f"run {stream.command}") from None
        finally:
            conn.forget(pending)

    @staticmethod
    def _cancel(conn: _HelperConnection, pending: _Pending) -> None:
        try:
            conn.post("cancel", target=pending.rid)
        except _Dead:
            pass
        conn.forget(pending)

    # -- files --------------------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        """The whole file. For huge files, stream ``cat`` instead."""
        data, _ = self._read(os.fspath(path), None, None)
        return data

    def read_text(self, path: str, encoding: str = "utf-8", errors: str = "replace") -> str:
        return self.read_bytes(path).decode(encoding, errors=errors)

    def read_lines(self, path: str, start: int, end: int | None = None) -> tuple[list[str], int]:
        """Lines ``start..end`` (1-based, inclusive, like ``sed -n``), and the file's line count.

        Only the requested lines cross the connection.
        """
        if start < 1 or (end is not None and end < start):
            raise ValueError(f"bad line range {start}-{end}: lines are numbered from 1 and end >= start")
        data, info = self._read(os.fspath(path), start, end)
        # Split on b"\n" only, as sed and ast count lines; str.splitlines also
        # breaks at form feeds and U+2028, which would shift every line number.
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return [_decode(line) for line in lines], int(info["total_lines"])

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except RemoteFileError:
            return False
        return True

    def stat(self, path: str) -> FileStat:
        info = self._call_idempotent("stat", f"stat {path}", path=os.fspath(path))[1]
        return FileStat(path=os.fspath(path), **info)

    def _read(self, path: str, start, end) -> tuple[bytes, dict]:
        return self._call_idempotent("read", f"read {path}", path=path, start=start, end=end)

    def _call_idempotent(self, op: str, what: str, **fields) -> tuple[bytes, dict]:
        """A request that is safe to repeat, so a dropped connection is retried once."""
        try:
            return self._call(self._connection_for_new_request(), op, what, fields)
        except _Dead:
            conn = self._restart()
        try:
            return self._call(conn, op, what, fields)
        except _Dead as exc:
            raise self._disconnected(exc, what) from None

    def _call(self, conn, op, what, fields) -> tuple[bytes, dict]:
        pending = conn.request(op, **fields)
        data = bytearray()
        deadline = time.monotonic() + self.default_timeout
        try:
            while True:
                try:
                    kind, payload = conn.next_frame(pending, deadline)
                except TimeoutError:
                    raise HostError(
                        f"no answer from {self.name} within {self.default_timeout:g}s while trying to {what}",
                        host=self.name,
                        hint="the host may be overloaded; retry, or raise default_timeout",
                    ) from None
                if kind == _K_DATA:
                    data += payload
                elif kind == _K_DONE:
                    return bytes(data), json.loads(payload)
                elif kind == _K_ERROR:
                    raise self._request_error(json.loads(payload), what)
        finally:
            conn.forget(pending)

    def _connection_for_new_request(self) -> _HelperConnection:
        conn = self._helper()
        return conn if conn.alive else self._restart()

    def _request_error(self, info: dict, what: str) -> HostError:
        message = info.get("message", "unknown error")
        path = info.get("path")
        if info.get("type") in (
            "FileNotFoundError",
            "PermissionError",
            "IsADirectoryError",
            "NotADirectoryError",
            "OSError",
        ):
            hint = {
                "FileNotFoundError": "check the path; `sgl-kit run TARGET -- ls DIR` shows what is there",
                "PermissionError": "connect as a user who can read it, or fix its permissions",
            }.get(info["type"], "check the path and permissions")
            return RemoteFileError(
                f"cannot {what} on {self.name}: {message}" + (f" ({path})" if path else ""),
                host=self.name,
                hint=hint,
            )
        return HostError(f"cannot {what} on {self.name}: {info.get('type')}: {message}", host=self.name)

    def _disconnected(self, exc: Exception, what: str) -> HostDisconnected:
        return HostDisconnected(
            f"lost the connection to {self.name} while trying to {what}: {exc}",
            host=self.name,
            hint="check the host is up; the next call reconnects once",
        )

    # -- misc ---------------------------------------------------------------
    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class LocalHost(Host):
    """This machine. Commands run through a local helper process over pipes."""

    def __init__(self, *, python: str | None = None, default_timeout: float = 60.0) -> None:
        self.name = "local"
        self.python = python or sys.executable
        self.default_timeout = default_timeout
        self._conn: _HelperConnection | None = None
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _helper(self) -> _HelperConnection:
        with self._lock:
            if self._conn is None:
                self._conn = self._spawn()
            return self._conn

    def _restart(self) -> _HelperConnection:
        with self._lock:
            self._stop()
            self._conn = self._spawn()
            return self._conn

    def _spawn(self) -> _HelperConnection:
        proc = subprocess.Popen(
            [self.python, "-u", "-c", _BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()

        def send(data: bytes) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(in_fd, view) :]

        conn = _HelperConnection(lambda n: os.read(out_fd, n), send, lambda: self._reap(proc), self.name)
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
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        return remote_port

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def __getattr__(name: str):
    # paramiko costs a quarter second to import and is not needed on this
    # machine's own side of the lab, so SSHHost is loaded on first use.
    if name == "SSHHost":
        from ._ssh import SSHHost

        return SSHHost
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
