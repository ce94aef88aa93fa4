"""The test sshd is a real OpenSSH server: the stock OpenSSH client logs in to it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.ssh


def _ssh(argv: list[str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("ssh") is None:
        pytest.fail("the OpenSSH client `ssh` is missing although sshd is installed", pytrace=False)
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)


def test_client_runs_true(sshd):
    proc = _ssh(sshd.ssh_argv("true"))
    assert proc.returncode == 0, proc.stderr + sshd.log()


def test_client_echo_output_and_exit_status(sshd):
    proc = _ssh(sshd.ssh_argv("echo", "hi;", "exit", "3"))
    assert (proc.returncode, proc.stdout) == (3, "hi\n"), proc.stderr


def test_session_runs_as_current_user_on_loopback(sshd):
    proc = _ssh(sshd.ssh_argv("id -un; echo $SSH_CONNECTION"))
    user, connection = proc.stdout.splitlines()
    assert user == sshd.user
    client_ip, _, server_ip, server_port = connection.split()
    assert (client_ip, server_ip, int(server_port)) == ("127.0.0.1", "127.0.0.1", sshd.port)


def test_login_used_the_throwaway_user_key(sshd):
    assert _ssh(sshd.ssh_argv("true")).returncode == 0
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(sshd.key_path)], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert f"Accepted publickey for {sshd.user}" in sshd.log()
    assert fingerprint in sshd.log()


def test_files_describe_the_server(sshd):
    assert sshd.known_hosts.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_key_pub}\n"
    assert sshd.host_key_pub.startswith("ssh-ed25519 ")
    config = sshd.ssh_config.read_text()
    assert "Host kit-test\n" in config
    assert f"    Port {sshd.port}\n" in config
    assert "    StrictHostKeyChecking yes\n" in config
    assert os.stat(sshd.key_path).st_mode & 0o077 == 0


def test_server_host_key_matches_known_hosts(sshd):
    scanned = subprocess.run(
        ["ssh-keyscan", "-p", str(sshd.port), "-t", "ed25519", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    assert scanned == sshd.known_hosts_line()


def test_unknown_key_is_refused(sshd, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    # Without -F: an IdentityFile given on the command line adds to the config's, not replaces it.
    proc = _ssh(
        [
            "ssh", "-F", "/dev/null", "-p", str(sshd.port), "-i", str(stranger),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={sshd.known_hosts}", f"{sshd.user}@127.0.0.1", "true",
        ]
    )  # fmt: skip
    assert proc.returncode == 255
    assert "Permission denied (publickey)" in proc.stderr


def test_changed_host_key_is_refused(sshd_other_hostkey):
    changed = sshd_other_hostkey
    assert changed.stale_host_key_pub != changed.server.host_key_pub
    assert (
        changed.stale_known_hosts.read_text()
        == changed.server.known_hosts_line(changed.stale_host_key_pub) + "\n"
    )

    refused = _ssh(changed.ssh_argv("echo", "should-not-run"))
    assert refused.returncode == 255
    assert "should-not-run" not in refused.stdout
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr

    accepted = _ssh(changed.server.ssh_argv("echo", "hi"))
    assert (accepted.returncode, accepted.stdout) == (0, "hi\n"), accepted.stderr
