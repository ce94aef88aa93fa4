"""`sgl-kit` as a user runs it: the installed console script, in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"


def sgl_kit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def pkg(sglang_source) -> str:
    return sglang_source("0.5.11")


def _ssh_opts(sshd) -> list[str]:
    return ["--ssh-config", str(sshd.ssh_config)]


def test_help_lists_the_commands():
    proc = sgl_kit("--help")
    assert proc.returncode == 0
    for word in ("run", "source", "grep", "--json", "--python", "--package-dir", "--trust-new-host"):
        assert word in proc.stdout


def test_run_local_passes_output_and_exit_status():
    proc = sgl_kit("run", "local", "--", "sh", "-c", "echo out; echo err >&2; exit 5")
    assert (proc.returncode, proc.stdout, proc.stderr) == (5, "out\n", "err\n")


def test_run_single_argument_is_a_shell_command_and_json_works():
    proc = sgl_kit("--json", "run", "local", "--", "echo a | tr a b")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["stdout"] == "b\n" and data["exited"] == 0 and data["host"] == "local"


@pytest.mark.ssh
def test_run_over_ssh_alias(sshd):
    proc = sgl_kit("run", sshd.alias, *_ssh_opts(sshd), "--", "echo", "$HOME;", "`id`")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "$HOME; `id`\n"


@pytest.mark.ssh
def test_source_range_over_ssh(sshd, pkg):
    proc = sgl_kit("source", sshd.alias, "srt/server_args.py:1228-1230", "--package-dir", pkg, *_ssh_opts(sshd))
    assert proc.returncode == 0, proc.stderr
    assert "1229" in proc.stdout and "if self.get_model_config().is_multimodal:" in proc.stdout
    assert "1231" not in proc.stdout


@pytest.mark.ssh
def test_source_function_json_over_ssh(sshd, pkg):
    proc = sgl_kit("--json", "source", sshd.alias, "--function", "ServerArgs._handle_piecewise_cuda_graph",
                   "--package-dir", pkg, "--mark", "is_multimodal", *_ssh_opts(sshd))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["start"] == 1194 and data["version"] == "0.5.11" and data["path"] == "srt/server_args.py"
    assert data["lines"][0].strip() == "def _handle_piecewise_cuda_graph(self):"
    assert data["marks"] == {"1229": "is_multimodal"}


def test_grep_json_local(pkg):
    proc = sgl_kit("--json", "grep", "local", "self.disable_piecewise_cuda_graph = True", "-F", "--package-dir", pkg)
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)["matches"]
    in_server_args = [m["line"] for m in hits if m["path"] == "srt/server_args.py"]
    assert 1230 in in_server_args and 1215 in in_server_args


def test_grep_with_no_match_exits_1(pkg):
    proc = sgl_kit("grep", "local", "no_such_identifier_anywhere_42", "--package-dir", pkg)
    assert (proc.returncode, proc.stdout) == (1, "")


def test_line_range_past_the_end_is_a_clear_error(pkg):
    proc = sgl_kit("source", "local", "srt/server_args.py:99990-99999", "--package-dir", pkg)
    assert proc.returncode == 2
    assert proc.stderr.startswith("sgl-kit: error:") and "server_args.py" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.ssh
def test_unknown_host_key_exit_status_and_advice(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    proc = sgl_kit("run", sshd.url, "--identity", str(sshd.key_path), "--known-hosts", str(empty),
                   "--ssh-config", "/dev/null", "--", "true")
    assert proc.returncode == 2
    assert "--trust-new-host" in proc.stderr and "SHA256:" in proc.stderr
    assert not empty.exists()
