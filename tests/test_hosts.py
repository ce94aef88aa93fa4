"""LocalHost: the helper protocol, timeouts, streaming and file access, on this machine."""

from __future__ import annotations

import os
import time
import tracemalloc

import pytest

from kit.errors import CommandFailed, CommandTimeout, RemoteFileError
from kit.hosts import CommandResult, LocalHost


@pytest.fixture(scope="module")
def local():
    host = LocalHost()
    yield host
    host.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_run_shell_string_collects_both_streams_and_status(local):
    result = local.run("echo out; echo err >&2; exit 3")
    assert (result.stdout, result.stderr, result.exited) == ("out\n", "err\n", 3)
    assert not result and not result.ok and result.failed
    assert result.host == "local" and result.command == "echo out; echo err >&2; exit 3"
    assert "exit 3" in repr(result) and "on local" in repr(result)
    assert "exit 3" in result._repr_html_()


def test_run_argv_list_uses_no_shell(local, tmp_path):
    canary = tmp_path / "pwned"
    args = [f"$(touch {canary})", "a b", "; rm -rf /", "`id`", "-n", "x\ny"]
    result = local.run(["printf", "%s\\0", *args])
    assert result.ok
    assert result.stdout_bytes.split(b"\0")[:-1] == [a.encode() for a in args]
    assert not canary.exists()
    assert result.command.startswith("printf ")


def test_check_raises_with_host_and_output(local):
    with pytest.raises(CommandFailed) as info:
        local.run("echo broken-thing >&2; exit 7", check=True)
    text = str(info.value)
    assert "exit 7" in text and "on local" in text and "broken-thing" in text
    assert info.value.result.exited == 7


def test_env_cwd_and_stdin(local, tmp_path):
    result = local.run("printf '%s|' \"$KIT_X\" \"$PWD\"; cat", env={"KIT_X": "a b$c"}, cwd=str(tmp_path),
                       stdin=b"from-stdin")
    assert result.stdout == f"a b$c|{tmp_path}|from-stdin"


def test_big_stdin_does_not_deadlock_against_output(local):
    data = bytes(range(256)) * 40000  # 10 MB: far beyond any pipe buffer
    assert local.run(["cat"], stdin=data, timeout=30).stdout_bytes == data
    early = local.run(["head", "-c", "5"], stdin=data, timeout=30)
    assert (early.stdout_bytes, early.exited) == (data[:5], 0)


def test_read_lines_counts_only_newlines_like_sed(local, tmp_path):
    path = tmp_path / "odd.py"
    path.write_bytes(b"a\x0cb\n" + "c\u2028d\n".encode() + b"e\r\nlast")
    assert local.read_lines(str(path), 1) == (["a\x0cb", "c\u2028d", "e\r", "last"], 4)
    assert local.read_lines(str(path), 4, 4) == (["last"], 4)


def test_timeout_kills_the_whole_process_group(local, tmp_path):
    pidfile = tmp_path / "bg.pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        local.run(f"sleep 60 & echo $! > {pidfile}; sleep 60", timeout=0.5)
    assert time.monotonic() - started < 5
    assert "timed out after 0.5s on local" in str(info.value)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(pid), "the background child of a timed-out command survived"


def test_non_utf8_output_is_kept_raw_and_decoded_with_replacement(local):
    result = local.run(["printf", "ok \\377\\376 end"])
    assert result.stdout_bytes == b"ok \xff\xfe end"
    assert result.stdout == "ok \ufffd\ufffd end"


def test_stream_of_100_mb_keeps_memory_bounded(local):
    tracemalloc.start()
    total = 0
    try:
        with local.stream(["head", "-c", str(100 * 1024 * 1024), "/dev/zero"]) as stream:
            for name, chunk in stream:
                assert name == "stdout"
                total += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == 100 * 1024 * 1024 and stream.exited == 0
    # Flow control keeps at most a few MiB in flight, whatever the command prints.
    assert peak < 32 * 1024 * 1024, f"peak traced memory {peak / 2**20:.1f} MiB"


def test_stream_can_be_closed_early_and_kills_the_command(local, tmp_path):
    pidfile = tmp_path / "yes.pid"
    with local.stream(f"echo $$ > {pidfile}; exec yes") as stream:
        first = next(iter(stream))
    assert first[0] == "stdout" and first[1].startswith(b"y\n")
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(pid)
    assert local.run("echo still-usable").stdout == "still-usable\n"


def test_streams_and_commands_share_one_connection(local):
    with local.stream("for i in 1 2 3; do echo $i; sleep 0.2; done") as stream:
        seen = []
        for _, data in stream:
            seen.append(data)
            assert local.run(["echo", "between"]).stdout == "between\n"
    assert b"".join(seen) == b"1\n2\n3\n"


def test_read_lines_is_one_based_inclusive_like_sed(local, tmp_path):
    path = tmp_path / "f.py"
    path.write_text("".join(f"line {i}\n" for i in range(1, 11)))
    assert local.read_lines(str(path), 3, 5) == (["line 3", "line 4", "line 5"], 10)
    assert local.read_lines(str(path), 9) == (["line 9", "line 10"], 10)
    assert local.read_lines(str(path), 11, 20) == ([], 10)
    with pytest.raises(ValueError):
        local.read_lines(str(path), 0, 2)


def test_file_access(local, tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x00\xffabc\n")
    assert local.read_bytes(str(path)) == b"\x00\xffabc\n"
    assert local.read_text(str(path)) == "\x00\ufffdabc\n"
    st = local.stat(str(path))
    assert (st.size, st.is_file, st.is_dir) == (6, True, False)
    assert local.exists(str(path)) and not local.exists(str(tmp_path / "missing"))
    assert local.stat(str(tmp_path)).is_dir


def test_missing_file_error_names_path_and_next_step(local, tmp_path):
    missing = tmp_path / "nope.py"
    with pytest.raises(RemoteFileError) as info:
        local.read_text(str(missing))
    text = str(info.value)
    assert str(missing) in text and "on local" in text and "No such file" in text and "->" in text


def test_a_dead_helper_is_restarted(local):
    pid = local._helper().hello["pid"]
    os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while local._helper().alive and time.monotonic() < deadline:
        time.sleep(0.02)
    assert local.run(["echo", "back"]).stdout == "back\n"
    assert local._helper().hello["pid"] != pid


def test_command_result_is_plain_data():
    result = CommandResult("true", "h", 0, "", "", 0.001)
    assert result and result.ok
    assert repr(result) == "<CommandResult 'true' on h: exit 0, 1.0 ms, 0 B out, 0 B err>"
