"""Child processes on this machine: one runner, one group kill, one way to run pip.

``run`` starts a command in its own session (so in its own process group), captures its
output as text and, when it outlives its timeout, ends the whole group: SIGTERM, a short
grace, then SIGKILL to whatever is left, grandchildren included. It then raises
``CommandTimeout`` naming the command and the timeout. ``kill_group`` is the same ending for
long-lived children the caller keeps (a helper, an environment's process). ``pip`` runs
``python -m pip`` of a given interpreter through ``run``; ``pip_said`` is what a failed pip
run said, in one line.

Scripts that run on a target host (``kit/_remote/``) or inside another environment
(``kit/dryrun/_inside*.py``) cannot import this and keep their own few lines.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from ._secrets import mask_argv
from .errors import CommandTimeout

__all__ = ["GRACE", "HOST", "kill_group", "pip", "pip_argv", "pip_said", "python_env", "run"]

GRACE = 3.0  # seconds between SIGTERM and SIGKILL
HOST = "this machine"  # the host named in a timeout's message
# The lines of pip's output that say what went wrong, when there are any.
_PIP_TELLING = ("no matching distribution", "could not find a version", "cannot install", "conflict",
                "requires", "error:")


def run(argv: Sequence[str], *, timeout: float, cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None, input: str | None = None, hint: str = "",
        grace: float = GRACE) -> subprocess.CompletedProcess:
    """Run ``argv`` in its own process group and return its exit code and text output.

    ``input`` is written to its stdin (else stdin is /dev/null). Past ``timeout`` seconds the
    group is ended (``kill_group``) and ``CommandTimeout`` is raised, with ``hint`` as what to
    do (by default: raise the timeout) and the output so far in ``partial``. A command that
    cannot start at all raises OSError, as subprocess does.
    """
    argv = [os.fspath(a) for a in argv]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=dict(env) if env is not None else None, start_new_session=True)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace=grace)
        out, err = _leftover(proc, grace)
        raise CommandTimeout(shlex.join(mask_argv(argv)), timeout, host=HOST, hint=hint,
                             partial=subprocess.CompletedProcess(argv, proc.returncode, out, err)) from None
    except BaseException:  # KeyboardInterrupt included: the child does not outlive the call
        kill_group(proc, grace=0)
        _leftover(proc, 0)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen, *, grace: float = GRACE) -> None:
    """End ``proc`` and its process group: SIGTERM, up to ``grace`` seconds, then SIGKILL; reap it.

    The group is ``proc``'s own when it was started in a new session (``start_new_session=True``,
    as ``run`` does) and is not reaped yet; otherwise ``proc`` alone is signalled."""
    group = _group_of(proc)
    _signal(proc, group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(group):
            break
        time.sleep(0.02)
    _signal(proc, group, signal.SIGKILL)
    proc.wait()


def pip_argv(args: Sequence[str], *, python: str | os.PathLike) -> list[str]:
    """``python -m pip ARGS``, never asking for input nor checking pip's own version."""
    return [os.fspath(python), "-m", "pip", *args, "--no-input", "--disable-pip-version-check"]


def pip(args: Sequence[str], *, python: str | os.PathLike, timeout: float, cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None, hint: str = "") -> subprocess.CompletedProcess:
    """``python -m pip ARGS`` by ``run``: the exit code is the caller's to judge (``pip_said`` tells why).

    Without ``env`` pip runs with this environment less PYTHONPATH and PYTHONHOME, so it sees the
    packages of ``python`` alone. On timeout, ``CommandTimeout`` says that pip may be waiting on
    the network or the package index, unless ``hint`` says something else."""
    return run(pip_argv(args, python=python), timeout=timeout, cwd=cwd, env=python_env() if env is None else env,
               hint=hint or "pip may be waiting on the network or the package index: check that it is "
                            "reachable (proxy, PIP_INDEX_URL), then run the same step again")


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment less PYTHONPATH and PYTHONHOME (a child Python of another
    environment sees its own packages alone), with ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra or {})
    return env


def pip_said(proc: subprocess.CompletedProcess, lines: int = 4) -> str:
    """What a failed pip run said: its telling lines (no matching distribution, a conflict, an error),
    else its last lines, else its exit code; joined with " / "."""
    text = proc.stderr or proc.stdout or ""
    kept = [line.strip() for line in text.splitlines() if line.strip() and "WARNING: Location" not in line]
    telling = [line for line in kept if any(word in line.lower() for word in _PIP_TELLING)]
    return " / ".join((telling or kept)[-lines:]) or f"pip exited {proc.returncode}"


def _group_of(proc: subprocess.Popen) -> int | None:
    """The group ``proc`` leads, while its pid is still its own (it is not reaped yet, a zombie at most)."""
    if proc.returncode is not None:
        return None
    try:
        return proc.pid if os.getpgid(proc.pid) == proc.pid else None
    except ProcessLookupError:
        return None


def _group_alive(group: int | None) -> bool:
    if group is None:
        return False
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(proc: subprocess.Popen, group: int | None, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group is not None:
            os.killpg(group, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)


def _leftover(proc: subprocess.Popen, grace: float) -> tuple[str, str]:
    """What the ended child wrote before it went; a descendant that left its group may still hold a pipe."""
    try:
        return proc.communicate(timeout=max(grace, 0.5))
    except (subprocess.TimeoutExpired, ValueError, OSError):
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                pipe.close()
        return "", ""
