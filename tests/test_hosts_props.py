"""Property tests: nothing a caller passes as an argument, path or env value reaches a shell unquoted.

Each mode is covered: the helper (local and over SSH) executes argv lists
directly; the no-python fallback builds shell strings, so it is the one
that really depends on quoting.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.hosts import LocalHost, SSHHost

# Shell metacharacters, quotes, newlines, leading dashes and non-ASCII, but no NUL
# (no OS argv or path can carry one).
PIECES = st.sampled_from(list("ab -'\"$`;|&()<>*?[]{}\\!#~\n\t=é") + ["$(touch CANARY)", "`touch CANARY`"])
HOSTILE = st.lists(PIECES, max_size=12).map("".join)
FILENAME = HOSTILE.filter(lambda s: s not in ("", ".", "..") and "/" not in s and len(s.encode()) < 200)


def _canary_free(tmp: str) -> bool:
    return not any(name == "CANARY" for name in os.listdir(tmp)) and not os.path.exists("CANARY")


@pytest.fixture(scope="module")
def local():
    host = LocalHost()
    yield host
    host.close()


@pytest.fixture(scope="module")
def ssh_exec(sshd):
    host = SSHHost(sshd.host, port=sshd.port, user=sshd.user, key_filename=str(sshd.key_path),
                   known_hosts=str(sshd.known_hosts), config_file=None, allow_agent=False,
                   look_for_keys=False, helper_python="/nonexistent/python3")
    yield host
    host.close()


@pytest.fixture(scope="module")
def ssh_helper(sshd):
    host = SSHHost(sshd.host, port=sshd.port, user=sshd.user, key_filename=str(sshd.key_path),
                   known_hosts=str(sshd.known_hosts), config_file=None, allow_agent=False,
                   look_for_keys=False)
    yield host
    host.close()


def _roundtrip(host, args, cwd):
    result = host.run(["printf", "%s\\0", *args], cwd=cwd)
    assert result.ok, result
    got = result.stdout_bytes.split(b"\0")[:-1]
    assert got == [a.encode() for a in args]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(HOSTILE, min_size=1, max_size=4))
def test_argv_reaches_the_program_verbatim_locally(local, tmp_path, args):
    _roundtrip(local, args, str(tmp_path))
    assert _canary_free(str(tmp_path))


@pytest.mark.ssh
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(HOSTILE, min_size=1, max_size=4))
def test_argv_reaches_the_program_verbatim_over_the_ssh_helper(ssh_helper, tmp_path, args):
    _roundtrip(ssh_helper, args, str(tmp_path))
    assert _canary_free(str(tmp_path))


@pytest.mark.ssh
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(HOSTILE, min_size=1, max_size=3), value=HOSTILE)
def test_argv_and_env_survive_the_shell_of_the_fallback(ssh_exec, tmp_path, args, value):
    _roundtrip(ssh_exec, args, str(tmp_path))
    result = ssh_exec.run(["printenv", "KIT_VALUE"], env={"KIT_VALUE": value}, cwd=str(tmp_path))
    # printenv adds one newline; the value itself may end with newlines.
    assert result.stdout_bytes == value.encode() + b"\n"
    assert _canary_free(str(tmp_path))


@pytest.mark.ssh
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=FILENAME)
def test_hostile_file_names_are_read_not_executed_by_the_fallback(ssh_exec, tmp_path_factory, name):
    directory = tmp_path_factory.mktemp("names")
    path = directory / name
    path.write_bytes(b"one\ntwo\nthree\n")
    assert ssh_exec.read_lines(str(path), 2, 3) == (["two", "three"], 3)
    assert ssh_exec.read_bytes(str(path)) == b"one\ntwo\nthree\n"
    assert ssh_exec.stat(str(path)).size == 14
    assert _canary_free(str(directory))
