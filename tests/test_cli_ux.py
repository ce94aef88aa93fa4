"""What a new user meets at a terminal: pipes, misread targets, connection errors in CLI words,
sub-command usage, and SSH targets that need no --python. Real sshd and real sglang sources."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from test_cli import SGL_KIT, sgl_kit

from kit.errors import AuthenticationFailed, HostUnreachable
from kit.hosts import SSHHost

LOG = Path(__file__).parent / "data" / "provenance" / "incident-0.5.11.log"


@pytest.fixture(scope="module")
def pkg(sglang_source) -> str:
    return sglang_source("0.5.11")


# --------------------------------------------------------------------------- pipes


@pytest.mark.parametrize("argv", [["grep", "local", "--package-dir", "{pkg}", "self", "--max", "100000"],
                                  ["args", "parse", "{biglog}", "--all"]])
def test_piping_into_head_ends_quietly(argv, pkg, tmp_path):
    biglog = tmp_path / "big.log"
    biglog.write_text(LOG.read_text() * 200)  # far more than a pipe holds
    cmd = [SGL_KIT, *(a.format(pkg=pkg, biglog=biglog) for a in argv)]
    sgl = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    first = sgl.stdout.readline()
    sgl.stdout.close()  # what `head -1` does after its line
    code = sgl.wait(timeout=120)
    err = sgl.stderr.read().decode()
    assert first and err == "" and code == 141  # 128 + SIGPIPE, as coreutils end


# --------------------------------------------------------------------------- targets and connection errors


@pytest.mark.parametrize(("target", "fix"), [("root@gpubox:2222", "ssh://root@gpubox:2222"),
                                              ("gpubox:22", "ssh://gpubox:22")])
def test_host_colon_port_says_how_to_write_it(target, fix):
    proc = sgl_kit("run", target, "--", "true")
    assert proc.returncode == 2
    assert proc.stderr == (f"sgl-kit: error: {target!r} is host:port, which is not how a target names an SSH port\n"
                           f"  -> write {fix} (or, for `sgl-kit bench`, http://{fix[6:].split('@')[-1]} to reach "
                           "the server directly)\n")


@pytest.mark.ssh
def test_no_key_at_all_is_an_authentication_error_that_points_at_keys(sshd, tmp_path):
    host = SSHHost("127.0.0.1", port=sshd.port, user=sshd.user, config_file=None, known_hosts=str(sshd.known_hosts),
                   allow_agent=False, look_for_keys=False, connect_timeout=10)
    with pytest.raises(AuthenticationFailed) as err:
        host.run("true")
    assert "-i FILE" in err.value.hint and "ssh-add" in err.value.hint


def test_a_port_that_is_no_ssh_server_leaves_no_paramiko_noise_on_stderr(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_junk():
        for _ in range(2):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

    threading.Thread(target=answer_junk, daemon=True).start()
    known = tmp_path / "known_hosts"
    known.write_text("")
    proc = sgl_kit("run", f"ssh://root@127.0.0.1:{port}", "--known-hosts", str(known), "--ssh-config", "/dev/null",
                   "--timeout", "5", "--", "true")
    server.close()
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("sgl-kit: error: ") and lines[1].startswith("  -> ") and len(lines) == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception (client)" not in proc.stderr


def test_an_unreachable_network_is_not_reported_as_a_timeout(monkeypatch):
    # A test double for what this sandbox cannot produce: a network that fails at once (ENETUNREACH).
    def refuse(*args, **kwargs):
        raise OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))

    monkeypatch.setattr(socket, "create_connection", refuse)
    host = SSHHost("10.255.255.1", port=22, user="root", config_file=None, connect_timeout=10)
    with pytest.raises(HostUnreachable) as err:
        host.run("true")
    assert err.value.message == "cannot reach 10.255.255.1:22: Network is unreachable"
    assert "within" not in err.value.message


@pytest.mark.ssh
def test_an_unknown_host_key_is_explained_in_cli_words(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc = sgl_kit("run", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--known-hosts", str(empty), "--", "true")
    assert proc.returncode == 2
    assert "--trust-new-host" in proc.stderr and "trust_new_host=True" not in proc.stderr


# --------------------------------------------------------------------------- usage


def test_a_sub_command_usage_error_prints_that_sub_command_usage():
    proc = sgl_kit("lab", "up", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == "usage: sgl-kit lab up [options] [-- SGLANG_FLAGS...]"
    assert proc.stderr.splitlines()[-1] == "sgl-kit lab up: error: unrecognized arguments: --bogus"


# --------------------------------------------------------------------------- SSH targets without --python


@pytest.mark.ssh
def test_source_on_an_ssh_target_uses_the_discovered_servers_interpreter(remote_lab, sshd):
    """python3 on the box has no sglang; the lab server's interpreter does."""
    proc = sgl_kit("source", sshd.alias, "srt/server_args.py:1228-1230", "--port", str(remote_lab.port),
                   "--ssh-config", str(sshd.ssh_config))
    assert proc.returncode == 0, proc.stderr
    assert "if self.get_model_config().is_multimodal:" in proc.stdout
    bare = sgl_kit("grep", sshd.alias, "is_multimodal_breakable", "--ssh-config", str(sshd.ssh_config),
                   "--pid", "1")
    assert bare.returncode == 2 and "no SGLang server" in bare.stderr and "pid 1" not in bare.stdout


@pytest.mark.ssh
def test_why_on_an_ssh_target_reads_the_servers_log_command_and_environment(remote_lab, sshd):
    proc = sgl_kit("why", "tokenizer_path", sshd.alias, "--port", str(remote_lab.port),
                   "--ssh-config", str(sshd.ssh_config))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[:2] for line in proc.stdout.splitlines() if line.startswith(("fired", "not fired"))]
    assert ["fired", "srt/server_args.py:1062"] in rows  # tokenizer_path was None at launch
    assert any(r[:2] == ["not", "fired"] for r in rows)  # the ModelScope branch: the variable is not set
    assert "SGLANG_USE_MODELSCOPE is not set in /proc/" in " ".join(proc.stdout.split())


@pytest.mark.ssh
def test_forward_holds_a_port_open_until_interrupted(remote_lab, sshd):
    import signal
    import urllib.request

    # the child takes Ctrl-C as a terminal gives it, even when this runner ignores SIGINT (a job started in the
    # background of a non-interactive shell does, and its children inherit that)
    proc = subprocess.Popen([SGL_KIT, "forward", sshd.alias, "--port", str(remote_lab.port),
                             "--ssh-config", str(sshd.ssh_config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        local = line.split()[0]
        assert local.startswith("http://127.0.0.1:") and f"127.0.0.1:{remote_lab.port}" in line
        assert urllib.request.urlopen(local + "/health", timeout=10).status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left running for the rest of the suite
            proc.communicate()
            raise
    assert proc.returncode == 0 and out == "forward closed\n" and err == ""


@pytest.mark.ssh
def test_bench_over_ssh_names_the_server_port_not_the_forward(sshd):
    from _lab_support import free_port

    port = free_port()  # nothing listens there on the box
    proc = sgl_kit("bench", sshd.alias, "--port", str(port), "-n", "1", "--warmup", "1", "--ssh-config",
                   str(sshd.ssh_config), timeout=180)
    assert proc.returncode == 2
    assert f"port {port} (through the SSH forward" in proc.stderr


def test_python_keywords_stay_in_python_errors():
    from kit.errors import UnknownHostKey

    err = UnknownHostKey("x", hint="use trust_new_host=True", cli_hint="use --trust-new-host")
    assert str(err) == "x\n  -> use trust_new_host=True" and err.cli_hint == "use --trust-new-host"
