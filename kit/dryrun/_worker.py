"""The warm dry-run: one worker process per sglang version with sglang already imported.

A cold dry-run pays sglang's import (seconds) on every call; the resolution itself takes a
few hundred milliseconds. The worker (``_inside_worker.py``, started in the version's
environment) imports sglang once and answers on a Unix socket under ``<cache>/run/``, so
later calls, from this process or another ``sgl-kit`` invocation, skip the import. Each
launch still runs in its own fork of the worker as it was right after the import, so a
request never sees another's state (environment variables, sglang's global server args,
caches, messages logged once).

- One worker per (sglang version, its environment, the server environment variables
  given): those shape what the import itself does. A lock file keeps two callers from
  starting two workers for the same key.
- It exits after ``$SGL_KIT_DRYRUN_IDLE`` seconds without a request (default 600).
- Every call has a timeout. A worker that does not answer in time is killed, one that died
  is forgotten, and the call runs cold instead, with a note saying so.
- ``SGL_KIT_DRYRUN_WARM=0`` (or ``warm=False``) turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kit._paths import cache_dir
from kit.dryrun._env import INSIDE, DryRunEnv, inside_environment, stub_args

__all__ = ["IDLE_ENV", "WARM_ENV", "WorkerInfo", "WorkerUnavailable", "call", "stop_workers", "warm_enabled",
           "workers"]

WARM_ENV = "SGL_KIT_DRYRUN_WARM"
IDLE_ENV = "SGL_KIT_DRYRUN_IDLE"
RUN_DIR_ENV = "SGL_KIT_DRYRUN_RUN_DIR"
DEFAULT_IDLE = 600.0
_INSIDE_FILES = ("_inside.py", "_inside_stubs.py", "_inside_worker.py")  # what runs in the environment
_START_TIMEOUT = 180.0  # sglang's import, on a loaded 2-core machine
_LOCK_POLL = 0.05
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


class WorkerUnavailable(Exception):
    """The warm path could not answer; `note` says why, for the cold run's result."""

    def __init__(self, note: str) -> None:
        super().__init__(note)
        self.note = note


def warm_enabled(warm: bool | None = None) -> bool:
    if warm is not None:
        return bool(warm)
    return os.environ.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def idle_timeout() -> float:
    try:
        value = float(os.environ.get(IDLE_ENV, "") or DEFAULT_IDLE)
    except ValueError:
        return DEFAULT_IDLE
    return value if value > 0 else DEFAULT_IDLE


def inside_digest() -> str:
    text = b"".join(INSIDE.with_name(name).read_bytes() for name in _INSIDE_FILES)
    return hashlib.sha256(text).hexdigest()[:12]


# --------------------------------------------------------------------------- where a worker lives


def run_dir() -> Path:
    """Where workers' sockets, state files, locks and logs live: `$SGL_KIT_DRYRUN_RUN_DIR`, else `<cache>/run`."""
    return Path(os.environ.get(RUN_DIR_ENV) or cache_dir() / "run")


@dataclass(frozen=True)
class _Paths:
    key: str
    state: Path
    lock: Path
    log: Path
    socket: Path


def _paths(env: DryRunEnv, variables: Mapping[str, str]) -> _Paths:
    tag = hashlib.sha256(json.dumps(sorted(variables.items())).encode()).hexdigest()[:8]
    key = f"dryrun-{env.path.name}-{tag}"
    base = run_dir()
    sock = base / f"{key}.sock"
    if len(str(sock)) > _MAX_SOCKET_PATH:  # a deep $SGL_KIT_CACHE: a short private directory instead
        short = hashlib.sha256(str(sock).encode()).hexdigest()[:16]
        sock = Path(tempfile.gettempdir()) / f"sgl-kit-{os.getuid()}" / f"{short}.sock"
    return _Paths(key, base / f"{key}.json", base / f"{key}.lock", base / f"{key}.log", sock)


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_uid != os.getuid() or path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


# --------------------------------------------------------------------------- calling it


def call(env: DryRunEnv, variables: Mapping[str, str], request: dict, *, timeout: float) -> dict:
    """The worker's answer to a resolve `request`, starting the worker when none runs.

    Raises WorkerUnavailable (with a note for the cold run) when it cannot answer in time.
    """
    deadline = time.monotonic() + timeout
    paths = _paths(env, variables)
    _private_dir(run_dir())
    for attempt in (1, 2):
        state = _read_state(paths)
        if state and not _alive(state.get("pid")):  # a clean exit removes the state file: this one died
            _forget(paths)
            raise WorkerUnavailable(f"the warm dry-run worker for sglang {env.version} (pid {state.get('pid')}) "
                                    "had died; this call ran cold, and the next one starts a new worker")
        if not state or state.get("inside") != inside_digest():
            state = _start(env, variables, paths, deadline)
        try:
            return _exchange(paths.socket, dict(request, op="resolve"), deadline)
        except TimeoutError:
            _kill(state)
            _forget(paths)
            raise WorkerUnavailable(f"the warm dry-run worker for sglang {env.version} (pid {state.get('pid')}) "
                                    f"did not answer within {timeout:g}s and was stopped; this call ran cold") from None
        except (OSError, ValueError) as exc:
            alive = _alive(state.get("pid"))
            if attempt == 1 and not alive and isinstance(exc, ConnectionRefusedError | FileNotFoundError):
                _forget(paths)  # it went idle and exited between our look and our call: start another
                continue
            if not alive:
                _forget(paths)
            what = "died during the request" if not alive else f"failed ({type(exc).__name__}: {exc})"
            raise WorkerUnavailable(f"the warm dry-run worker for sglang {env.version} (pid {state.get('pid')}) "
                                    f"{what}; this call ran cold") from None
    raise WorkerUnavailable("the warm dry-run worker could not be reached; this call ran cold")


def _exchange(path: Path, payload: dict, deadline: float) -> dict:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # socket.timeout is TimeoutError
        sock.settimeout(left)
        sock.connect(str(path))
        sock.sendall(json.dumps(payload).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionResetError("the worker closed the connection without an answer")
            data += chunk
    return json.loads(data)


def _start(env: DryRunEnv, variables: Mapping[str, str], paths: _Paths, deadline: float) -> dict:
    """Start the worker for this key, or wait for the one another caller is starting."""
    with _lock(paths.lock, deadline, env.version):
        state = _read_state(paths)
        if state and _alive(state.get("pid")):
            if state.get("inside") == inside_digest():
                return state  # another caller started it meanwhile
            _stop_one(state, paths)  # the kit changed under a running worker
        _forget(paths)
        _private_dir(paths.socket.parent)
        argv = [str(env.python), str(INSIDE), "--serve", str(paths.socket), f"{idle_timeout():g}", str(paths.state),
                *stub_args(env.version)]
        environ = inside_environment(dict(variables))
        environ["SGL_KIT_INSIDE_DIGEST"] = inside_digest()
        with open(paths.log, "w", encoding="utf-8") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=environ,
                                    cwd="/", start_new_session=True)
        while time.monotonic() < deadline:
            state = _read_state(paths)
            if state.get("pid") == proc.pid and paths.socket.exists():
                return state
            if proc.poll() is not None:
                raise WorkerUnavailable(f"the warm dry-run worker for sglang {env.version} exited at start "
                                        f"(status {proc.returncode}): {_tail(paths.log)}; this call ran cold")
            time.sleep(0.05)
        _kill({"pid": proc.pid})
        proc.wait()
        raise WorkerUnavailable(f"the warm dry-run worker for sglang {env.version} was not ready in time; "
                                "this call ran cold")


@contextlib.contextmanager
def _lock(path: Path, deadline: float, version: str) -> Iterator[None]:
    import fcntl

    with open(path, "a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise WorkerUnavailable(f"another caller held the warm dry-run worker's lock for sglang "
                                            f"{version} past the timeout; this call ran cold") from None
                time.sleep(_LOCK_POLL)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_state(paths: _Paths) -> dict:
    try:
        return json.loads(paths.state.read_text())
    except (OSError, ValueError):
        return {}


def _forget(paths: _Paths) -> None:
    for path in (paths.state, paths.socket):
        with contextlib.suppress(OSError):
            path.unlink()


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError, OSError):  # our own child that exited: reap it
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return _is_worker(pid)


def _is_worker(pid: int) -> bool:
    """Whether `pid` is a dry-run worker (a recycled pid must never be signalled)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the state file
    return b"--serve" in argv and any(a.endswith(b"/_inside.py") for a in argv)


def _kill(state: dict) -> None:
    pid = state.get("pid")
    if _alive(pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid, 5.0)


def _reap(pid: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return
        except ChildProcessError:  # not our child: wait until it is gone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.02)


def _stop_one(state: dict, paths: _Paths, timeout: float = 10.0) -> None:
    with contextlib.suppress(OSError, ValueError, TimeoutError):
        _exchange(Path(state.get("socket") or paths.socket), {"op": "stop"}, time.monotonic() + timeout)
        _reap(state["pid"], timeout)
    _kill(state)
    _forget(paths)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        kept = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " / ".join(kept[-lines:]) or "(empty log)"


# --------------------------------------------------------------------------- status and stop


@dataclass(frozen=True)
class WorkerInfo:
    """One warm worker, as its state file and (when it answers) the worker itself describe it."""

    key: str
    version: str
    pid: int
    alive: bool
    socket: str
    log: str
    started: float = 0.0
    idle_timeout: float = 0.0
    idle_seconds: float | None = None
    served: int | None = None
    import_seconds: float = 0.0
    rss_bytes: int | None = None
    current: bool = True  # built from this kit's _inside.py

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def workers() -> list[WorkerInfo]:
    """Every worker with a state file under the run directory, asked how it is."""
    out = []
    for state_file in sorted(run_dir().glob("dryrun-*.json")):
        key = state_file.stem
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        pid = state.get("pid", 0)
        alive = _alive(pid)
        answer = {}
        if alive:
            with contextlib.suppress(OSError, ValueError, TimeoutError):
                answer = _exchange(Path(state.get("socket", "")), {"op": "ping"}, time.monotonic() + 5.0)
        out.append(WorkerInfo(
            key=key, version=(state.get("versions") or {}).get("sglang") or "?", pid=pid, alive=alive,
            socket=state.get("socket", ""), log=str(state_file.with_suffix(".log")),
            started=state.get("started", 0.0), idle_timeout=state.get("idle_timeout", 0.0),
            idle_seconds=answer.get("idle_seconds"), served=answer.get("served"),
            import_seconds=state.get("import_seconds", 0.0), rss_bytes=_rss(pid) if alive else None,
            current=state.get("inside") == inside_digest()))
    return out


def stop_workers(version: str | None = None, *, timeout: float = 10.0) -> list[WorkerInfo]:
    """Stop every worker (of `version`, if given); the ones stopped, or found dead and cleaned up."""
    stopped = []
    for info in workers():
        if version is not None and info.version != version:
            continue
        state_file = run_dir() / f"{info.key}.json"
        paths = _Paths(info.key, state_file, state_file.with_suffix(".lock"), state_file.with_suffix(".log"),
                       Path(info.socket))
        if info.alive:
            _stop_one({"pid": info.pid, "socket": info.socket}, paths, timeout)
        else:
            _forget(paths)
        stopped.append(info)
    return stopped


def _rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
