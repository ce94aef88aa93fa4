"""Kept SSH connections (kit.hosts.kept) against a real sshd on 127.0.0.1.

A command that connected leaves a keeper; the next one with the same options reaches the same
helper through the keeper's socket and logs in to the sshd no more (its log counts logins).
Several commands at once get their own answers, a 5 MB stream keeps its flow control, what a
command leaves running is stopped, an idle keeper exits and removes its socket, a killed one
leaves a socket the next command replaces, a keeper that goes mid-way leaves the command to
connect itself, and nothing is kept when it is not asked for.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kit.hosts import wire
from kit.hosts.kept import KEY_DEFAULTS, KeptHost, attach, disconnect, kept
from kit.hosts.ssh import SSHHost
from kit.target import connect

SGL_KIT = str(Path(sys.executable).parent / "sgl-kit")
DATA = Path(__file__).parent / "data" / "provenance"


@pytest.fixture
def runtime(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "rt"
    monkeypatch.setenv("SGL_KIT_RUNTIME_DIR", str(path))
    monkeypatch.setenv("SGL_KIT_SSH_PERSIST", "30")
    yield path
    disconnect()  # every keeper this test left
    _until(lambda: not list(path.glob("*.sock")), "the keepers to exit")


def _options(server, persist: float = 30, **extra) -> dict:
    return {"config_file": str(server.ssh_config), "allow_agent": False, "look_for_keys": False, "persist": persist,
            **extra}


def _logins(server) -> int:
    return server.log().count("Accepted publickey")


def _until(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _keeper(server, runtime: Path, **extra) -> Path:
    """Connect once directly, and wait for the keeper that command leaves to answer."""
    with connect(server.alias, **_options(server, **extra)) as host:
        assert not isinstance(host, KeptHost)
        assert host.run(["true"]).ok
    return _until(lambda: next((p for p in runtime.glob("ssh-*.sock") if _answers(p)), None), "a keeper's socket")


def _answers(path: Path) -> bool:
    conn = attach(path, "probe")
    if conn is None:
        return False
    conn.close()
    return True


def test_the_next_command_reuses_the_kept_helper_and_does_not_log_in(sshd, runtime):
    sock = _keeper(sshd, runtime)
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700 and stat.S_IMODE(sock.stat().st_mode) == 0o600
    before = _logins(sshd)
    with connect(sshd.alias, **_options(sshd)) as second, connect(sshd.alias, **_options(sshd)) as third:
        assert isinstance(second, KeptHost) and second.kept and second.mode == "helper"
        assert second.name == f"{sshd.user}@{sshd.host}:{sshd.port}"  # as the direct connection names it
        assert second.run(["echo", "kept"]).stdout == "kept\n"
        assert second.read_text(str(sshd.ssh_config)) == sshd.ssh_config.read_text()
        assert second.stat(str(sshd.ssh_config)).size == sshd.ssh_config.stat().st_size
        # one helper on the far side serves both: the same process answers
        assert second.run(["sh", "-c", "echo $PPID"]).stdout == third.run(["sh", "-c", "echo $PPID"]).stdout
    assert _logins(sshd) == before


def test_commands_at_once_get_their_own_answers_and_a_big_stream_keeps_flowing(sshd, runtime):
    _keeper(sshd, runtime)
    out: dict[str, str] = {}

    def ask(name: str) -> None:
        with connect(sshd.alias, **_options(sshd)) as host:
            script = f"for i in 1 2 3; do echo {name}-$i; sleep 0.1; done"
            out[name] = host.run(["sh", "-c", script]).stdout

    threads = [threading.Thread(target=ask, args=(n,)) for n in ("a", "b", "c")]
    for t in threads:
        t.start()
    with connect(sshd.alias, **_options(sshd)) as host:
        big = host.run(["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x"], timeout=60)
    for t in threads:
        t.join(60)
    assert out == {n: "".join(f"{n}-{i}\n" for i in (1, 2, 3)) for n in "abc"}
    assert big.ok and len(big.stdout) == 5_000_000 and set(big.stdout) == {"x"}


def test_what_a_command_leaves_running_is_stopped_when_it_goes(sshd, runtime, tmp_path):
    _keeper(sshd, runtime)
    marker = tmp_path / "still-running"
    host = connect(sshd.alias, **_options(sshd))
    stream = host.stream(["sh", "-c", f"echo started; sleep 41.25; touch {marker}"])
    kind, data = next(iter(stream))
    assert (kind, data) == ("stdout", b"started\n")
    host.close()
    with connect(sshd.alias, **_options(sshd)) as other:  # the helper's process group is gone
        _until(lambda: "sleep 41.25" not in other.run(["ps", "-eo", "args"]).stdout, "the left command to stop", 10)
    assert not marker.exists()


def test_an_idle_keeper_exits_and_removes_its_socket(sshd, runtime):
    sock = _keeper(sshd, runtime, persist=1)
    with connect(sshd.alias, **_options(sshd, persist=1)) as host:
        assert isinstance(host, KeptHost)
        pid = host._conn.hello["keeper"]["pid"]
    _until(lambda: not sock.exists(), "the idle keeper's socket to go", 20)
    _until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), "the idle keeper to exit", 10)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_killed_keeper_leaves_a_socket_the_next_command_replaces(sshd, runtime):
    sock = _keeper(sshd, runtime)
    with connect(sshd.alias, **_options(sshd)) as host:
        pid = host._conn.hello["keeper"]["pid"]
    os.kill(pid, signal.SIGKILL)
    _until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), "the keeper to die")
    assert sock.exists()  # left behind
    with connect(sshd.alias, **_options(sshd)) as host:
        assert not isinstance(host, KeptHost)  # nobody answers there: it connects itself
        assert host.run(["echo", "direct"]).stdout == "direct\n"
    _until(lambda: _answers(sock), "a new keeper on the same socket")


def test_a_command_whose_keeper_goes_connects_itself(sshd, runtime):
    _keeper(sshd, runtime)
    host = connect(sshd.alias, **_options(sshd))
    try:
        assert isinstance(host, KeptHost) and host.run(["true"]).ok
        conn = host._conn
        assert disconnect() != []
        _until(lambda: not conn.alive, "the kept connection to end")
        before = _logins(sshd)
        for word in ("again", "and", "again"):
            assert host.run(["echo", word]).stdout == f"{word}\n"
            assert host.read_text(str(sshd.ssh_config)) == sshd.ssh_config.read_text()
        assert not host.kept
        # one connection of its own for all of them (and one for the keeper it leaves), not one each
        assert _logins(sshd) - before <= 2
    finally:
        host.close()


def test_another_kits_helper_is_not_served(sshd, runtime, monkeypatch):
    sock = _keeper(sshd, runtime)
    monkeypatch.setattr(wire, "HELPER_SOURCE", wire.HELPER_SOURCE + b"\n# another kit\n")
    assert attach(sock, "other") is None
    monkeypatch.undo()
    monkeypatch.setenv("SGL_KIT_RUNTIME_DIR", str(runtime))
    assert _answers(sock)  # and the keeper serves this one still


@pytest.mark.parametrize("how", ["library default", "persist 0", "password"])
def test_nothing_is_kept_unless_asked(sshd, runtime, how):
    kwargs = {"library default": {}, "persist 0": {"persist": 0}, "password": {"persist": 30, "password": "x"}}[how]
    options = {k: v for k, v in _options(sshd).items() if k != "persist"} | kwargs
    with SSHHost(sshd.alias, key_filename=str(sshd.key_path), **options) as host:
        assert host.run(["true"]).ok
    time.sleep(1.0)
    assert kept() == []


def test_a_private_directory_is_required(sshd, tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("SGL_KIT_RUNTIME_DIR", str(shared))
    from kit._paths import runtime_dir

    assert runtime_dir() is None
    with connect(sshd.alias, **_options(sshd)) as host:  # works, keeps nothing
        assert host.run(["true"]).ok
    time.sleep(1.0)
    assert list(shared.iterdir()) == []


def test_the_key_defaults_are_sshhosts_own():
    params = inspect.signature(SSHHost.__init__).parameters
    assert {k: params[k].default for k in KEY_DEFAULTS} == KEY_DEFAULTS


def test_the_command_line_keeps_its_connection_and_disconnect_closes_it(sshd, runtime, sglang_source):
    env = {**os.environ, "SGL_KIT_RUNTIME_DIR": str(runtime), "SGL_KIT_SSH_PERSIST": "30"}
    argv = [SGL_KIT, "--json", "why", "disable_piecewise_cuda_graph", sshd.alias, "--ssh-config", str(sshd.ssh_config),
            "--package-dir", sglang_source("0.5.11"), "--log", str(DATA / "incident-0.5.11.log"),
            "--model-config", str(DATA / "qwen3.6-27b" / "config.json")]

    def why() -> dict:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = why()
    sock = _until(lambda: next((p for p in runtime.glob("ssh-*.sock") if _answers(p)), None), "the keeper")
    before = _logins(sshd)
    assert why() == first
    assert _logins(sshd) == before  # the second `why` logged in nowhere
    done = subprocess.run([SGL_KIT, "disconnect", sshd.alias, "--ssh-config", str(sshd.ssh_config)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout == f"closed the kept connection to {sshd.alias}\n"
    _until(lambda: not sock.exists(), "the socket to go")
    bad = subprocess.run([SGL_KIT, "run", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--", "true"],
                         capture_output=True, text=True, timeout=60, env={**env, "SGL_KIT_SSH_PERSIST": "ten"})
    assert bad.returncode != 0 and "SGL_KIT_SSH_PERSIST='ten' is not a number of seconds" in bad.stderr
