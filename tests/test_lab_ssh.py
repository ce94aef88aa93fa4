"""`sgl-kit lab ... --on SSH_TARGET`: the lab on a box that has only python3, reached over real SSH.

The sshd fixture runs on this machine, so the "remote" lab gets its own directory; what
makes it remote is that every step goes through SSH and the kit arrives there as a wheel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _lab_support import free_port

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"


def sgl_kit(*args, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ, SGL_KIT_LAB_DRYRUN="0")
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def remote(sshd, tmp_path_factory):
    lab_dir = tmp_path_factory.mktemp("ssh-lab")
    opts = ["--on", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--dir", str(lab_dir)]
    port = free_port()
    proc = sgl_kit("--json", "lab", "up", *opts, "--port", str(port), "--variant", "old")
    assert proc.returncode == 0, proc.stderr
    yield {"opts": opts, "port": port, "dir": lab_dir, "status": json.loads(proc.stdout)}
    sgl_kit("lab", "down", *opts)


def test_lab_up_on_an_ssh_host_installs_the_kit_as_a_wheel(remote, sshd):
    status = remote["status"]
    assert status["running"] and status["healthy"] and status["host"].endswith(f":{sshd.port}")
    # No URL of a forward that died with the command; where it listens there, and how to reach it.
    assert status["url"] is None and status["address"] == f"127.0.0.1:{remote['port']}"
    assert status["reach"] == f"sgl-kit forward ssh://{status['host']} --port {remote['port']}"
    site = next((remote["dir"] / "ml-env" / "lib").glob("python3.*/site-packages"))
    assert (site / "kit" / "lab" / "launch_server.py").is_file()
    assert next(site.glob("sglang_investigation_kit-*.dist-info"), None) is not None
    assert not (site / "sgl_kit_lab.pth").exists()  # nothing borrowed from this machine's environment
    assert (site / "sglang" / "srt" / "server_args.py").is_file()


def test_args_over_ssh_finds_the_lab_and_its_auto_changed_flag(remote, sshd):
    proc = sgl_kit("args", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--port", str(remote["port"]))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^disable_piecewise_cuda_graph\s+False\s+-\s+True\s+auto-changed", proc.stdout, re.M)
    assert re.search(r"^speculative_num_steps\s+-\s+3\s+3\s+explicit", proc.stdout, re.M)


def test_lab_up_again_over_ssh_keeps_the_running_server(remote):
    proc = sgl_kit("--json", "lab", "up", *remote["opts"], "--port", str(remote["port"]))
    again = json.loads(proc.stdout)
    assert proc.returncode == 0 and again["pid"] == remote["status"]["pid"] and "already running" in again["note"]


def test_lab_status_and_down_over_ssh(sshd, tmp_path):
    # A lab of its own: stopping the module's lab would break the tests that run after this one.
    opts = ["--on", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--dir", str(tmp_path / "own-lab")]
    up = sgl_kit("--json", "lab", "up", *opts, "--port", str(free_port()))
    assert up.returncode == 0, up.stderr
    pid = json.loads(up.stdout)["pid"]
    try:
        proc = sgl_kit("lab", "status", *opts)
        assert proc.returncode == 0 and f"pid {pid}" in proc.stdout
        assert "  reach:   sgl-kit forward ssh://" in proc.stdout and "  url:" not in proc.stdout
        proc = sgl_kit("lab", "down", *opts)
        assert proc.returncode == 0 and f"stopped pid {pid}" in proc.stdout
        assert sgl_kit("lab", "status", *opts).returncode == 3
    finally:
        sgl_kit("lab", "down", *opts)
