"""`sgl-kit lab up --engine sglang --on HOST`: the real sglang 0.5.11 CPU server on an SSH host.

The host is the test sshd on 127.0.0.1 (a real OpenSSH server, tests/conftest.py), logged into
as this user: the same machine and HOME (the sshd sets it), so its kit cache
(~/.cache/sglang-investigation-kit) holds the real-server environment this machine built, and the lab
reuses it there. A full build on a remote (about 2.4 GB and minutes) is not run here; the build is
run there as far as its first package, on a host whose pip reaches no index: the kit it ships
imports and runs setup_serve, and the failed step comes back as one error. What a build needs first
(python3.11 there) is tested too.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _lab_support import free_port
from _real_server_support import START_TIMEOUT, stop_everything

from kit.dryrun.serve_env import stand_ins
from kit.errors import LabError
from kit.lab.real import RealLab, default_flags

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.timeout(int(START_TIMEOUT) * 2 + 600)]
SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"


def _sgl_kit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k != "SGL_KIT_LAB_DIR"})


@pytest.fixture(scope="module")
def built_here():
    """The real-server environment, built once on this machine (cached), where the sshd's user finds it."""
    from kit.dryrun.serve_env import serve_environment, setup_serve

    env = serve_environment("0.5.11")
    default = Path.home() / ".cache" / "sglang-investigation-kit" / "serve" / env.path.name
    if env.path != default:
        pytest.skip(f"the kit cache here is {env.path.parent}, not the sshd user's default "
                    f"{default.parent}: the remote would build its own (minutes, ~2.4 GB)")
    setup_serve("0.5.11")
    return env


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one error line (progress lines may come before it), followed by its `->` hint; no traceback."""
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [i for i, x in enumerate(lines) if x.startswith("sgl-kit: error:")]
    assert len(errors) == 1 and lines[errors[0] + 1:][:1] and lines[errors[0] + 1].lstrip().startswith("->"), proc.stderr
    assert len(lines) == errors[0] + 2, proc.stderr  # nothing after the hint
    return lines[errors[0]]


def test_the_real_engine_on_an_ssh_host(sshd, built_here, tmp_path):
    from kit.target import connect, discover, resolve_server

    lab_dir = str(tmp_path / "lab")
    on = ["--on", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--dir", lab_dir]
    port = free_port()
    host = connect(sshd.alias, config_file=str(sshd.ssh_config))
    name = host.name  # how the kit names the host: user@address:port
    try:
        up = _sgl_kit("lab", "up", "--engine", "sglang", *on, "--port", str(port), "--wait", str(int(START_TIMEOUT)),
                      timeout=START_TIMEOUT + 300)
        assert up.returncode == 0, up.stderr[-3000:]
        assert f"real-server environment on {name}: {built_here.path} (already built, reused)" in up.stderr
        assert f"tiny model Qwen3ForCausalLM made in {name}:{lab_dir}/models/tiny-qwen3" in up.stderr
        assert f"lab: running on {name}" in up.stdout and "real sglang 0.5.11 on CPU" in up.stdout
        assert f"env:     {built_here.path}" in up.stdout and f"sgl-kit forward ssh://{name}" in up.stdout
        # the server as the kit finds it over SSH: sglang's own, on CPU, reached through a forward
        server = resolve_server(host, sshd.alias, port=port)
        assert server.kind == "sglang" and server.env.get("SGLANG_USE_CPU_ENGINE") == "1"
        assert server.argv[0] == str(built_here.python) and server.labels.get("lab_dir") == lab_dir
        info = server.server_info()
        assert info["device"] == "cpu" and info["attention_backend"] == "torch_native"
        status = _sgl_kit("--json", "lab", "status", *on)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["pid"] == server.pid and data["engine"] == "sglang" and data["env_path"] == str(built_here.path)
        assert sorted(data["stand_ins"]) == sorted(stand_ins())  # each with its reason (kit/data/serve/stand_ins.yaml)
        # a second `up` of the same launch finds it running: the model is not made again, nothing restarts
        again = _sgl_kit("--json", "lab", "up", "--engine", "sglang", *on, "--port", str(port))
        assert again.returncode == 0 and json.loads(again.stdout)["pid"] == server.pid, again.stderr
        # restart with another launch, over SSH
        flags = [*default_flags(), "--max-running-requests", "5"]
        restart = _sgl_kit("--json", "lab", "restart", *on, "--wait", str(int(START_TIMEOUT)), "--", *flags,
                           timeout=START_TIMEOUT + 300)
        assert restart.returncode == 0, restart.stderr[-3000:]
        relaunched = resolve_server(host, sshd.alias, port=port)
        assert relaunched.pid != server.pid and relaunched.pid == json.loads(restart.stdout)["pid"]
        assert relaunched.server_info()["max_running_requests"] == 5
        # down stops it and its workers: nothing of this lab runs on the host afterwards
        down = _sgl_kit("lab", "down", *on, timeout=200)
        assert down.returncode == 0 and f"stopped pid {relaunched.pid}" in down.stdout, down.stderr
        assert [s for s in discover(host) if s.labels.get("lab_dir") == lab_dir] == []
        assert _sgl_kit("lab", "status", *on).returncode == 3
    finally:
        host.close()
        assert stop_everything(lab_dir) == []


def test_a_port_in_use_on_the_host_is_refused_and_nothing_runs(sshd, tmp_path):
    """Refused before anything is prepared there: no kit shipped, no environment built or looked for."""
    lab_dir = str(tmp_path / "lab")
    on = ["--on", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--dir", lab_dir]
    with socket.socket() as sock:  # the sshd's host is this machine: a socket here is a port taken there
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        proc = _sgl_kit("lab", "up", "--engine", "sglang", *on, "--port", str(port), timeout=400)
    error = _one_line_error(proc)
    assert f"port {port} on " in error and "is already in use" in error, proc.stderr
    assert not (tmp_path / "lab" / "ml-env").exists() and "environment" not in proc.stderr, proc.stderr
    assert _sgl_kit("lab", "status", *on).returncode == 3
    assert stop_everything(lab_dir) == []


def test_a_dead_host_is_one_line_with_a_hint(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    proc = _sgl_kit("lab", "up", "--engine", "sglang", "--on", f"ssh://nobody@127.0.0.1:{port}", "--dir",
                    str(tmp_path / "lab"), timeout=120)
    error = _one_line_error(proc)
    assert f"127.0.0.1:{port}" in error or f"127.0.0.1 port {port}" in error, error


def test_a_host_without_python_3_11_is_told_before_anything_is_built(sshd, tmp_path):
    """No environment in the host's kit cache, and no Python 3.11 by the name given: the lab says so, builds
    nothing and starts nothing. (The sshd's host has a python3.11; a missing one is named by its path.)"""
    from kit.target import connect

    cache = tmp_path / "remote-cache"  # an empty kit cache on the host
    host = connect(sshd.alias, config_file=str(sshd.ssh_config))
    try:
        lab = RealLab(host, directory=str(tmp_path / "lab"), progress=lambda s: None, cache=str(cache),
                      build_python=str(tmp_path / "no-such" / "python3.11"))
        with pytest.raises(LabError) as err:
            lab.up(port=free_port())
        assert f"{host.name} has no Python 3.11 as `{tmp_path}/no-such/python3.11`" in err.value.message
        assert "install python3.11" in err.value.hint
        assert not cache.exists() and not lab.status().running
    finally:
        host.close()


def test_a_build_on_a_host_whose_pip_reaches_no_index_fails_at_its_step_in_one_error(sshd_factory, tmp_path):
    """No environment in the host's kit cache: the kit ships itself with what builds one (kit.dryrun) and the
    sglang wheel, and setup_serve runs there for real: it makes the venv with the host's python3.11, then
    asks that host's pip for torch, which finds none (its sshd sets PIP_NO_INDEX and no find-links). That
    comes back as one LabError naming the step, with what to do on that host; no traceback."""
    from kit.lab.packaging import sglang_wheel
    from kit.target import connect

    offline = sshd_factory.start(extra=("SetEnv PIP_NO_INDEX=1 PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null",))
    cache = tmp_path / "remote-cache"  # an empty kit cache on the host
    host = connect(offline.alias, config_file=str(offline.ssh_config))
    steps: list[str] = []
    try:
        lab = RealLab(host, directory=str(tmp_path / "lab"), progress=steps.append, cache=str(cache))
        with pytest.raises(LabError) as err:
            lab.up(port=free_port(), timeout=60)
        text = f"{err.value}\n" + "\n".join(map(str, steps))
        assert err.value.message.startswith(f"building the real-server environment on {host.name} failed at step "
                                            "'torch': "), text
        assert "Traceback" not in text and "ModuleNotFoundError" not in text, text
        assert "reachable there" in err.value.hint and "finished steps are kept" in err.value.hint
        # it ran there with the shipped kit, in the environment this machine's kit names: its venv step is done
        markers = Path(lab.remote.path) / ".sgl-kit-steps"
        assert lab.remote.path.startswith(str(cache)) and (markers / "venv.done").is_file(), text
        assert not (markers / "torch.done").exists()
        assert (cache / "wheels" / sglang_wheel("0.5.11").name).is_file()  # sent from this machine's cache
        assert any("shipping the kit" in str(s) for s in steps) and not lab.status().running
    finally:
        host.close()
        sshd_factory.stop(offline)
