"""The helper protocol emulated with one SSH channel per request, for hosts without python3.

Slower (a login shell per command) but it keeps every Host method working, timeouts
and reads included. Everything built into a shell command here is quoted.
"""

from __future__ import annotations

import base64
import json
import queue
import shlex
import threading
import time

import paramiko

from .wire import DEAD, K_DATA, K_DONE, K_ERROR, K_STDERR, K_STDOUT, ConnectionDead, Pending, take_frame

__all__ = ["ExecFallback"]


def _feed(chan, stdin_b64: str | None) -> None:
    try:
        if stdin_b64 is not None:
            chan.sendall(base64.b64decode(stdin_b64))
        chan.shutdown_write()
    except (OSError, EOFError, paramiko.SSHException):
        pass  # the command exited before reading all of it


class ExecFallback:
    """The helper protocol emulated with one SSH channel per request.

    Used when the remote has no python3. Slower (a login shell per command)
    but it keeps every Host method working, timeouts and reads included.
    """

    def __init__(self, host) -> None:  # an SSHHost: its transport and timeouts
        self.host = host
        self.host_name = host.name
        self.dead_reason: str | None = None
        self._ids = iter(range(1, 1 << 31))
        self._jobs: dict[int, dict] = {}
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self.dead_reason is None and self.host.connected

    def request(self, op: str, **fields) -> Pending:
        if not self.alive:
            raise ConnectionDead(self.dead_reason or "transport closed")
        pending = Pending(next(self._ids))
        pending.frames = queue.Queue(maxsize=64)  # the pump thread waits for the reader: backpressure
        job = {"pending": pending, "pgid": None, "chan": None}
        with self._lock:
            self._jobs[pending.rid] = job
        threading.Thread(target=self._serve, args=(op, fields, job), daemon=True).start()
        return pending

    def _serve(self, op: str, fields: dict, job: dict) -> None:
        pending = job["pending"]
        try:
            if op == "run":
                self._serve_run(fields, job)
            elif op == "read":
                self._serve_read(fields, pending)
            elif op == "stat":
                self._serve_stat(fields, pending)
        except Exception as exc:
            pending.frames.put((DEAD, f"{type(exc).__name__}: {exc}".encode()))

    def _open(self, command: str):
        chan = self.host.transport.open_session(timeout=self.host.connect_timeout)
        chan.exec_command(command)
        return chan

    def _serve_run(self, fields: dict, job: dict) -> None:
        cmd = fields.get("cmd") or shlex.join(fields["argv"])
        prefix = "".join(
            f"export {k}={shlex.quote(v)}; " for k, v in (fields.get("env") or {}).items() if k.isidentifier()
        )
        if fields.get("cwd"):
            prefix += f"cd {shlex.quote(fields['cwd'])} || exit 1; "
        start = time.monotonic()
        # sshd makes the session's shell a process-group leader, so $$ names
        # the group we must kill on timeout.
        chan = self._open(f"echo __SGLKIT_PGID $$ >&2; {prefix}exec /bin/sh -c {shlex.quote(cmd)}")
        job["chan"] = chan
        # Input goes from its own thread, so a command that answers while it
        # reads cannot deadlock against us.
        threading.Thread(target=_feed, args=(chan, fields.get("stdin")), daemon=True).start()
        timeout = fields.get("timeout")
        timed_out = self._pump_channel(chan, job, None if timeout is None else start + timeout)
        code = -1 if timed_out else chan.recv_exit_status()
        chan.close()
        info = {"exited": code, "timed_out": timed_out, "duration": time.monotonic() - start}
        job["pending"].frames.put((K_DONE, json.dumps(info).encode()))

    def _pump_channel(self, chan, job: dict, deadline: float | None) -> bool:
        pending, stderr_head = job["pending"], b""
        exited_at = None
        while not self._drained(chan, exited_at):
            if exited_at is None and chan.exit_status_ready():
                exited_at = time.monotonic()
            if deadline is not None and time.monotonic() > deadline:
                self._kill(job)
                return True
            if chan.recv_ready():
                pending.frames.put((K_STDOUT, chan.recv(65536)))
            elif chan.recv_stderr_ready():
                data = chan.recv_stderr(65536)
                if job["pgid"] is None:
                    stderr_head += data
                    if b"\n" not in stderr_head:
                        continue
                    line, _, data = stderr_head.partition(b"\n")
                    job["pgid"] = int(line.split()[-1]) if line.startswith(b"__SGLKIT_PGID") else 0
                if data:
                    pending.frames.put((K_STDERR, data))
            else:
                time.sleep(0.005)
        return False

    @staticmethod
    def _drained(chan, exited_at: float | None) -> bool:
        """All output read: EOF after exit, or 1 s after exit if a daemonised child keeps the pipe.

        sshd can report the exit status before the last output has arrived.
        """
        if exited_at is None or chan.recv_ready() or chan.recv_stderr_ready():
            return False
        return chan.eof_received or time.monotonic() - exited_at > 1.0

    def _kill(self, job: dict) -> None:
        pgid = job.get("pgid")
        if pgid:
            chan = self._open(
                f"kill -TERM -- -{pgid} 2>/dev/null; sleep 1; kill -KILL -- -{pgid} 2>/dev/null"
            )
            chan.recv_exit_status()
            chan.close()
        if job.get("chan") is not None:
            job["chan"].close()

    def _serve_read(self, fields: dict, pending: Pending) -> None:
        path = shlex.quote(fields["path"])
        start, end = fields.get("start"), fields.get("end")
        if start is None:
            cmd = f"cat -- {path}"
        else:
            last = "" if end is None else f" && NR<={int(end)}"
            cmd = f"awk 'NR>={int(start)}{last} {{print}} END {{print NR > \"/dev/stderr\"}}' {path}"
        out, err, code = self._collect(cmd)
        if code != 0:
            pending.frames.put((K_ERROR, self._file_error(err, fields["path"])))
            return
        pending.frames.put((K_DATA, out))
        info = {"size": len(out)} if start is None else {"total_lines": int(err.split()[-1])}
        pending.frames.put((K_DONE, json.dumps(info).encode()))

    def _serve_stat(self, fields: dict, pending: Pending) -> None:
        out, err, code = self._collect(f"stat -L -c '%s %Y %f' -- {shlex.quote(fields['path'])}")
        if code != 0:
            pending.frames.put((K_ERROR, self._file_error(err, fields["path"])))
            return
        size, mtime, mode = out.split()
        mode = int(mode, 16)
        info = {
            "size": int(size),
            "mtime": float(mtime),
            "mode": mode,
            "is_dir": (mode & 0o170000) == 0o040000,
            "is_file": (mode & 0o170000) == 0o100000,
        }
        pending.frames.put((K_DONE, json.dumps(info).encode()))

    def _collect(self, command: str) -> tuple[bytes, bytes, int]:
        chan = self._open(command)
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        chan.settimeout(self.host.default_timeout)
        while True:
            data = chan.recv(65536)
            if not data:
                break
            out += data
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        code = chan.recv_exit_status()
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        chan.close()
        return bytes(out), bytes(err), code

    @staticmethod
    def _file_error(err: bytes, path: str) -> bytes:
        text = err.decode("utf-8", "replace").strip()
        kind = (
            "FileNotFoundError"
            if "No such file" in text
            else "PermissionError"
            if "Permission denied" in text
            else "OSError"
        )
        return json.dumps(
            {"type": kind, "message": text.splitlines()[-1] if text else "failed", "path": path}
        ).encode()

    def post(self, op: str, **fields) -> None:
        if op == "cancel":
            job = self._jobs.get(fields.get("target"))
            if job is not None:
                threading.Thread(target=self._kill, args=(job,), daemon=True).start()

    def next_frame(self, pending: Pending, deadline: float | None):
        return take_frame(pending, deadline)

    def forget(self, pending: Pending) -> None:
        with self._lock:
            self._jobs.pop(pending.rid, None)

    def close(self) -> None:
        self.dead_reason = "closed"
