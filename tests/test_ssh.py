"""SSHHost against a real OpenSSH sshd on 127.0.0.1 (see conftest.py)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from kit.errors import (
    AuthenticationFailed,
    CommandTimeout,
    ConnectionRefused,
    HostKeyChanged,
    HostUnreachable,
    RemoteFileError,
    UnknownHostKey,
)
from kit.hosts import SSHHost
from kit.target import connect

pytestmark = pytest.mark.ssh


def _host(server, **kw) -> SSHHost:
    kw.setdefault("config_file", None)
    kw.setdefault("look_for_keys", False)
    kw.setdefault("allow_agent", False)
    kw.setdefault("connect_timeout", 5)
    return SSHHost(server.host, port=server.port, user=server.user, key_filename=str(server.key_path),
                   known_hosts=str(server.known_hosts), **kw)


@pytest.fixture(scope="module")
def ssh(sshd):
    host = _host(sshd)
    yield host
    host.close()


@pytest.fixture(scope="module")
def ssh_exec(sshd):
    """The fallback for hosts without python3: one channel per command."""
    host = _host(sshd, helper_python="/nonexistent/python3")
    yield host
    host.close()


def test_alias_from_ssh_config_is_honoured(sshd):
    with SSHHost(sshd.alias, config_file=str(sshd.ssh_config), allow_agent=False, look_for_keys=False) as host:
        assert (host.hostname, host.port, host.user) == (sshd.host, sshd.port, sshd.user)
        assert host.known_hosts_file == str(sshd.known_hosts)
        assert host.run("echo via-alias").stdout == "via-alias\n"


def test_ssh_url_target(sshd):
    host = connect(sshd.url, key_filename=str(sshd.key_path), known_hosts=str(sshd.known_hosts),
                   config_file=None, allow_agent=False, look_for_keys=False)
    with host:
        assert isinstance(host, SSHHost) and host.name == f"{sshd.user}@{sshd.host}:{sshd.port}"
        assert host.run(["uname", "-s"]).stdout == "Linux\n"


def test_one_transport_and_one_helper_serve_many_commands(ssh):
    first = ssh.run("echo $PPID").stdout
    transport = ssh.transport
    for _ in range(20):
        assert ssh.run("echo $PPID").stdout == first
    assert ssh.transport is transport
    assert ssh.mode == "helper"
    assert int(first) == ssh._helper().hello["pid"]


def test_remote_timeout_kills_the_process_group(ssh, tmp_path):
    pidfile = tmp_path / "remote-bg.pid"
    with pytest.raises(CommandTimeout) as info:
        ssh.run(f"sleep 60 & echo $! > {pidfile}; sleep 60", timeout=0.5)
    assert ssh.name in str(info.value)
    pid = pidfile.read_text().strip()
    deadline = time.monotonic() + 5
    while ssh.run(["kill", "-0", pid]).ok and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ssh.run(["kill", "-0", pid]).ok


def test_hundred_megabytes_stream_over_ssh(ssh):
    total = 0
    with ssh.stream(["head", "-c", str(100 * 1024 * 1024), "/dev/zero"], timeout=120) as stream:
        for _, chunk in stream:
            total += len(chunk)
    assert total == 100 * 1024 * 1024 and stream.exited == 0


def test_non_utf8_over_ssh(ssh):
    result = ssh.run(["printf", "\\377ok"])
    assert result.stdout_bytes == b"\xffok" and result.stdout == "\ufffdok"


def test_read_lines_and_missing_file_over_ssh(ssh, tmp_path):
    path = tmp_path / "src.py"
    path.write_text("".join(f"x = {i}\n" for i in range(1, 101)))
    assert ssh.read_lines(str(path), 50, 52) == (["x = 50", "x = 51", "x = 52"], 100)
    with pytest.raises(RemoteFileError) as info:
        ssh.read_text(str(tmp_path / "missing.py"))
    assert ssh.name in str(info.value) and "missing.py" in str(info.value)


def test_reconnects_once_when_the_transport_drops(sshd):
    host = _host(sshd)
    try:
        assert host.run("echo one").stdout == "one\n"
        host.transport.close()
        assert host.run("echo two").stdout == "two\n"
        assert host.read_lines(__file__, 1, 1)[0] == ['"""SSHHost against a real OpenSSH sshd on 127.0.0.1 (see conftest.py)."""']
    finally:
        host.close()


def test_a_killed_helper_is_restarted(ssh):
    pid = ssh._helper().hello["pid"]
    subprocess.run(["kill", "-9", str(pid)], check=True)
    deadline = time.monotonic() + 5
    while ssh._helper().alive and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ssh.run("echo again").stdout == "again\n"
    assert ssh._helper().hello["pid"] != pid


def test_fallback_without_python_runs_reads_and_times_out(ssh_exec, tmp_path):
    assert ssh_exec.mode == "exec"
    result = ssh_exec.run("echo out; echo err >&2; exit 4")
    assert (result.stdout, result.stderr, result.exited) == ("out\n", "err\n", 4)
    path = tmp_path / "weird name $(x).py"
    path.write_text("a\nb\nc\n")
    assert ssh_exec.read_lines(str(path), 2, 3) == (["b", "c"], 3)
    assert ssh_exec.read_bytes(str(path)) == b"a\nb\nc\n"
    assert ssh_exec.stat(str(path)).size == 6
    with pytest.raises(RemoteFileError):
        ssh_exec.read_text(str(tmp_path / "absent"))
    pidfile = tmp_path / "fallback.pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        ssh_exec.run(f"sleep 60 & echo $! > {pidfile}; sleep 60", timeout=1)
    assert time.monotonic() - started < 10
    deadline = time.monotonic() + 5
    pid = pidfile.read_text().strip()
    while ssh_exec.run(["kill", "-0", pid]).ok and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ssh_exec.run(["kill", "-0", pid]).ok
    data = b"0123456789" * 500_000
    assert ssh_exec.run(["cat"], stdin=data, timeout=60).stdout_bytes == data


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = f"hello from {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_forward_reaches_a_server_bound_to_remote_loopback(ssh):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote_port = server.server_address[1]
        local_port = ssh.forward(remote_port)
        assert local_port != remote_port
        assert ssh.forward(remote_port) == local_port
        for path in ("/health", "/server_info"):
            with urllib.request.urlopen(f"http://127.0.0.1:{local_port}{path}", timeout=5) as resp:
                assert resp.read() == f"hello from {path}".encode()
    finally:
        server.shutdown()


def test_a_forward_outlives_its_transport_and_says_why_a_port_cannot_be_reached(sshd, tmp_path):
    from kit.bench import bench
    from kit.errors import BenchError

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with _host(sshd) as host:
        try:
            local_port = host.forward(server.server_address[1])
            host.transport.close()  # the connection drops (a box's sshd restarted, a NAT timed out)
            with urllib.request.urlopen(f"http://127.0.0.1:{local_port}/health", timeout=10) as resp:
                assert resp.read() == b"hello from /health"
            assert host.forward_failure(server.server_address[1]) is None
        finally:
            server.shutdown()
            server.server_close()
        dead = server.server_address[1]  # nothing listens there any more
        with pytest.raises(BenchError) as caught:
            bench(host, port=dead, requests=1, warmup=1, max_tokens=4, progress=None, out=tmp_path / "run.jsonl")
        assert f"the SSH forward: {host.name} could not connect to 127.0.0.1:{dead}" in caught.value.message
        assert "nothing listens on that port there" in caught.value.message


def test_proxyjump_through_a_jump_host(sshd, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"\nHost behind-jump\n    HostName {sshd.host}\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.key_path}\n    UserKnownHostsFile {sshd.known_hosts}\n"
        f"    ProxyJump {sshd.alias}\n"
    )
    with SSHHost("behind-jump", config_file=str(config), allow_agent=False, look_for_keys=False) as host:
        assert host.proxy_jump == sshd.alias
        assert host.run("echo through-jump").stdout == "through-jump\n"
        assert host._jump is not None and host._jump.connected


# -- connection errors: each has its own type, names the host, and comes within the timeout ----------


def _timed(fn, limit):
    started = time.monotonic()
    try:
        fn()
    finally:
        assert time.monotonic() - started < limit


def test_refused_port(sshd):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    host = SSHHost("127.0.0.1", port=port, config_file=None, known_hosts=str(sshd.known_hosts))
    with pytest.raises(ConnectionRefused) as info:
        _timed(lambda: host.run("true"), 5)
    assert f"127.0.0.1:{port}" in str(info.value) and "sshd is not listening" in str(info.value)


def test_dead_host_that_never_answers_the_handshake(sshd):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        host = SSHHost("127.0.0.1", port=port, config_file=None, known_hosts=str(sshd.known_hosts),
                       connect_timeout=1)
        with pytest.raises(HostUnreachable) as info:
            _timed(lambda: host.run("true"), 6)
        assert f"127.0.0.1:{port}" in str(info.value)
    finally:
        listener.close()


def test_wrong_key(sshd, tmp_path):
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    host = SSHHost(sshd.host, port=sshd.port, user=sshd.user, key_filename=str(key), config_file=None,
                   known_hosts=str(sshd.known_hosts), allow_agent=False, look_for_keys=False,
                   connect_timeout=5)
    with pytest.raises(AuthenticationFailed) as info:
        _timed(lambda: host.run("true"), 10)
    assert str(key) in str(info.value) and "ssh-add" in str(info.value)


def test_unknown_host_key_is_refused_then_trusted_on_request(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    host = SSHHost(sshd.host, port=sshd.port, user=sshd.user, key_filename=str(sshd.key_path),
                   config_file=None, known_hosts=str(known), allow_agent=False, look_for_keys=False)
    with pytest.raises(UnknownHostKey) as info:
        _timed(lambda: host.run("true"), 10)
    text = str(info.value)  # the Python words; the CLI prints cli_hint instead
    assert "SHA256:" in text and "trust_new_host=True" in text and "--trust-new-host" not in text
    assert "--trust-new-host" in info.value.cli_hint and "trust_new_host=True" not in info.value.cli_hint
    assert not known.exists(), "an unknown key must never be recorded silently"

    trusting = SSHHost(sshd.host, port=sshd.port, user=sshd.user, key_filename=str(sshd.key_path),
                       config_file=None, known_hosts=str(known), trust_new_host=True, allow_agent=False,
                       look_for_keys=False)
    with trusting:
        assert trusting.run("echo trusted").stdout == "trusted\n"
    assert known.read_text().split() == sshd.known_hosts_line().split()
    with host:
        assert host.run("echo now-known").stdout == "now-known\n"


def test_changed_host_key(sshd_other_hostkey):
    changed = sshd_other_hostkey
    host = SSHHost(changed.alias, config_file=str(changed.stale_ssh_config), allow_agent=False,
                   look_for_keys=False, trust_new_host=True)
    with pytest.raises(HostKeyChanged) as info:
        _timed(lambda: host.run("true"), 10)
    text = str(info.value)
    assert "HOST KEY CHANGED" in text and "ssh-keygen -R" in text and str(changed.server.port) in text
    assert Path(changed.stale_known_hosts).read_text().count("\n") == 1, "a changed key must not be replaced"
