"""The Host interface: commands, output streams and file reads, whatever the host.

LocalHost (``local.py``) and SSHHost (``ssh.py``) implement only how to reach the
helper; everything a caller uses lives here.
"""

from __future__ import annotations

import base64
import html
import json
import os
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from kit._text import clip
from kit.errors import (
    CommandFailed,
    CommandTimeout,
    HostDisconnected,
    HostError,
    RemoteFileError,
)

from .wire import (
    GRACE,
    K_DATA,
    K_DONE,
    K_ERROR,
    K_STDERR,
    K_STDOUT,
    ConnectionDead,
    HelperConnection,
    Pending,
)

__all__ = ["Command", "CommandResult", "CommandStream", "FileStat", "Host"]

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
        cmd = clip(self.command, 60)
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
    python: str = "python3"  # the interpreter that runs the kit's scripts (kit/_remote) there

    # -- subclass hooks -----------------------------------------------------
    def _helper(self) -> HelperConnection:
        raise NotImplementedError

    def _restart(self) -> HelperConnection:
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
        except ConnectionDead as exc:
            raise self._disconnected(exc, "run a command") from None
        stream = CommandStream(self, _display(cmd), iter(()), lambda: self._cancel(conn, pending))
        stream._chunks = self._chunks(conn, pending, stream, timeout)
        return stream

    def _chunks(self, conn, pending, stream, timeout) -> Iterator[tuple[str, bytes]]:
        deadline = None if timeout is None else time.monotonic() + timeout + GRACE
        try:
            while True:
                try:
                    kind, payload = conn.next_frame(pending, deadline)
                except TimeoutError:
                    self._cancel(conn, pending)
                    stream._finish({"exited": -1, "timed_out": True, "duration": timeout})
                    return
                if kind in (K_STDOUT, K_STDERR):
                    yield ("stdout" if kind == K_STDOUT else "stderr"), payload
                elif kind == K_DONE:
                    stream._finish(json.loads(payload))
                    return
                elif kind == K_ERROR:
                    raise self._request_error(json.loads(payload), f"run {stream.command}")
        except ConnectionDead as exc:
            raise self._disconnected(exc, f"run {stream.command}") from None
        finally:
            conn.forget(pending)

    @staticmethod
    def _cancel(conn: HelperConnection, pending: Pending) -> None:
        try:
            conn.post("cancel", target=pending.rid)
        except ConnectionDead:
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
        except ConnectionDead:
            conn = self._restart()
        try:
            return self._call(conn, op, what, fields)
        except ConnectionDead as exc:
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
                        cli_hint="the host may be overloaded; retry, or raise --timeout",
                    ) from None
                if kind == K_DATA:
                    data += payload
                elif kind == K_DONE:
                    return bytes(data), json.loads(payload)
                elif kind == K_ERROR:
                    raise self._request_error(json.loads(payload), what)
        finally:
            conn.forget(pending)

    def _connection_for_new_request(self) -> HelperConnection:
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
    def forward(self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0) -> int:
        """A port on 127.0.0.1 here that reaches ``remote_host:remote_port`` as the host sees it."""
        raise NotImplementedError

    def forward_failure(self, remote_port: int, remote_host: str = "127.0.0.1") -> str | None:
        """Why the forward to ``remote_port`` dropped its last connection; None when it did not (or there is none)."""
        return None

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
