"""The warm dry-run: a worker per sglang version with sglang imported, reused across calls and processes.

Real workers in the real 0.5.11 environment (built once per machine, like test_dryrun_incident.py);
each test gets its own run directory, so the user's workers are neither seen nor stopped, and
every worker a test starts is stopped when it ends. Nothing is mocked: a dead worker is a
SIGKILLed one, a hung one is SIGSTOPped.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kit.dryrun as dryrun
from kit.cli import main
from kit.dryrun import _worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b"
SGL_KIT = Path(sys.executable).with_name("sgl-kit")
PIECEWISE = "disable_piecewise_cuda_graph"
# The incident's target, given explicitly: the dry-run has no default GPU or sglang version.
LAB = {"gpu": "a6000", "sglang": "0.5.11"}
LAB_FLAGS = ["--sglang", LAB["sglang"], "--gpu", LAB["gpu"]]


def _incident_flags() -> list[str]:
    made_by = json.loads((ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json").read_text())["made_by"]
    argv = shlex.split(made_by)
    return argv[argv.index("--") + 1 :]


NEW = _incident_flags()
FIXED = [*NEW, "--enforce-piecewise-cuda-graph"]


@pytest.fixture
def run_dir(tmp_path, monkeypatch, env_0511):
    """A private run directory for this test's workers, all stopped at the end."""
    path = tmp_path / "run"
    monkeypatch.setenv(_worker.RUN_DIR_ENV, str(path))
    monkeypatch.delenv(_worker.WARM_ENV, raising=False)
    monkeypatch.delenv(_worker.IDLE_ENV, raising=False)
    yield path
    dryrun.stop_workers()


def _comparable(result: dryrun.DryRunResult) -> dict:
    """Everything a dry-run says about the launch; not how long it took or which process ran it."""
    data = result.to_dict()
    for key in ("seconds", "import_seconds", "warm", "notes", "console"):
        data.pop(key)
    return data


def _one_worker() -> dryrun.WorkerInfo:
    (worker,) = dryrun.workers()
    assert worker.alive and worker.version == "0.5.11"
    return worker


# --------------------------------------------------------------------------- reuse, state, speed


def test_two_launches_in_sequence_give_what_two_cold_runs_give(run_dir):
    cold = [dryrun.dry_run(flags, model=MODEL, tp=2, **LAB, warm=False) for flags in (NEW, FIXED)]
    assert not any(r.warm for r in cold)
    warm = [dryrun.dry_run(flags, model=MODEL, tp=2, **LAB) for flags in (NEW, FIXED, NEW)]
    assert all(r.warm and r.notes == [] for r in warm)
    assert _comparable(warm[0]) == _comparable(cold[0])
    assert _comparable(warm[1]) == _comparable(cold[1])
    # The first launch's state (its changes, sglang's globals) does not reach the next one.
    assert _comparable(warm[2]) == _comparable(cold[0])
    (change,) = warm[0].changes_to(PIECEWISE)
    assert (change.after, change.line, change.silent) == (True, 1230, True)
    assert warm[1].changes_to(PIECEWISE) == []
    worker = _one_worker()
    assert worker.served == 3 and worker.current


def test_a_warm_resolution_skips_the_import(run_dir):
    dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)  # starts the worker
    pid = _one_worker().pid
    started = time.perf_counter()
    results = dryrun.dry_run_many([NEW, FIXED], model=MODEL, tp=2, **LAB)
    seconds = time.perf_counter() - started
    assert all(r.warm for r in results) and _one_worker().pid == pid
    print(f"two warm resolutions in-process: {seconds:.2f}s")
    assert seconds < 3.0  # about 0.3 s here; a cold run takes 6 s or more


def test_the_environment_variable_turns_it_off(run_dir, monkeypatch):
    monkeypatch.setenv(_worker.WARM_ENV, "0")
    result = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    assert not result.warm and dryrun.workers() == []


def test_server_environment_variables_get_their_own_worker(run_dir):
    plain = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    with_env = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB, env={"SGLANG_ENABLE_SPEC_V2": "0"})
    assert plain.warm and with_env.warm and with_env.env == {"SGLANG_ENABLE_SPEC_V2": "0"}
    assert len(dryrun.workers()) == 2
    cold = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB, env={"SGLANG_ENABLE_SPEC_V2": "0"}, warm=False)
    assert _comparable(with_env) == _comparable(cold)


def test_an_idle_worker_exits_by_itself(run_dir, monkeypatch):
    monkeypatch.setenv(_worker.IDLE_ENV, "2")
    dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    worker = _one_worker()
    assert worker.idle_timeout == 2
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _pid_alive(worker.pid):
        time.sleep(0.2)
    assert not _pid_alive(worker.pid)
    assert dryrun.workers() == [] and not Path(worker.socket).exists()
    assert "idle for 2s, exiting" in Path(worker.log).read_text()


# --------------------------------------------------------------------------- failures fall back to a cold run


def test_a_killed_worker_falls_back_to_a_cold_run_with_a_note(run_dir):
    warm = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    worker = _one_worker()
    os.kill(worker.pid, signal.SIGKILL)
    _wait_gone(worker.pid)
    result = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    assert not result.warm
    (note,) = result.notes
    assert f"pid {worker.pid}" in note and "had died" in note and "ran cold" in note
    assert _comparable(result) == _comparable(warm)
    again = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)  # the next call starts a new worker
    assert again.warm and again.notes == [] and _one_worker().pid != worker.pid


def test_a_hung_worker_is_stopped_after_the_timeout_and_the_call_runs_cold(run_dir):
    warm = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    worker = _one_worker()
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        # A short wait for the worker (the product's default is the whole `timeout`); the cold run
        # that replaces it keeps the default timeout, so a busy machine does not fail it.
        result = dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB, warm_timeout=2)
        seconds = time.monotonic() - started
    finally:
        if _pid_alive(worker.pid):
            os.kill(worker.pid, signal.SIGCONT)
    assert not result.warm
    (note,) = result.notes
    assert "did not answer within 2s" in note and "was stopped" in note
    assert _comparable(result) == _comparable(warm)
    assert seconds < 2 + 60 and not _pid_alive(worker.pid)


# --------------------------------------------------------------------------- the command line


def test_concurrent_cli_calls_share_one_worker(run_dir):
    argv = [str(SGL_KIT), "dryrun", *LAB_FLAGS, "--model", str(MODEL), "--tp", "2", "--json", "--", *NEW]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    data = [json.loads(out) for out, _ in outs]
    assert all(d["warm"] for d in data)
    assert len({json.dumps({k: v for k, v in d.items() if k not in ("seconds", "import_seconds", "console")},
                           sort_keys=True) for d in data}) == 1
    worker = _one_worker()
    assert worker.served == 3
    # A later invocation, a new process, reuses it: no import.
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - started
    assert proc.returncode == 0 and json.loads(proc.stdout)["warm"] and _one_worker().pid == worker.pid
    print(f"warm `sgl-kit dryrun` end to end: {seconds:.2f}s")
    assert seconds < 5.0  # about 0.4 s here


def test_worker_status_and_stop(run_dir, capsys):
    assert main(["dryrun", "worker"]) == 0
    assert "no warm dry-run worker is running" in capsys.readouterr().out
    dryrun.dry_run(NEW, model=MODEL, tp=2, **LAB)
    pid = _one_worker().pid
    assert main(["dryrun", "worker", "status"]) == 0
    out = capsys.readouterr().out
    assert f"sglang 0.5.11     pid {pid}" in out and "served 1" in out and "MiB" in out
    assert main(["dryrun", "worker", "status", "--json"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["pid"] == pid and info["alive"] and info["idle_timeout"] == 600
    assert main(["dryrun", "worker", "stop", "--sglang", "0.5.12"]) == 0  # another version's: none
    assert "no warm dry-run worker is running" in capsys.readouterr().out and _pid_alive(pid)
    assert main(["dryrun", "worker", "stop"]) == 0
    assert f"sglang 0.5.11 worker pid {pid}: stopped" in capsys.readouterr().out
    _wait_gone(pid)
    assert dryrun.workers() == []


def test_cold_flag_on_the_command_line(run_dir, capsys):
    code = main(["dryrun", "--cold", *LAB_FLAGS, "--model", str(MODEL), "--tp", "2", "--json", "--", *NEW])
    assert code == 0 and json.loads(capsys.readouterr().out)["warm"] is False
    assert dryrun.workers() == []


# --------------------------------------------------------------------------- helpers


def _pid_alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it if it exited
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.05)
    assert not _pid_alive(pid)
