"""kit/_proc.py: the one runner of child processes on this machine, its group kill and pip.

Real processes throughout: a child that ignores SIGTERM and leaves a grandchild behind is
ended with its whole group on timeout, and the error names the command; then the owner
test: nothing else in kit/ kills a process group, runs a command by subprocess.run or
invokes pip.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kit._proc import kill_group, pip, pip_said, run
from kit.errors import CommandTimeout, KitError

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "kit"
PY = sys.executable

# A child that ignores SIGTERM, starts a grandchild that ignores it too (its pid in a file),
# says so on stdout, then sleeps: only a SIGKILL to the whole group ends both.
_STUBBORN = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
    open(sys.argv[1], "w").write(str(grandchild.pid))
    print("started", flush=True)
    print("on stderr", file=sys.stderr, flush=True)
    time.sleep(120)
""")


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether `pid` is no more (or only a zombie waiting for its new parent) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_child_that_ignores_sigterm_is_ended_with_its_grandchild_on_timeout(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    argv = [PY, "-c", _STUBBORN, str(pid_file)]
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        run(argv, timeout=2, grace=0.5)
    took = time.monotonic() - t0
    assert took < 10, f"the group was not ended promptly ({took:.1f}s)"
    grandchild = int(pid_file.read_text())
    assert _gone(grandchild), "the grandchild outlived its group's kill"
    err = info.value
    assert isinstance(err, KitError)
    assert "timed out after 2s" in str(err) and "this machine" in str(err)
    assert "import signal, subprocess, sys, time" in err.command and str(pid_file) in err.command
    assert "process group was killed" in err.hint
    # what the child wrote before the kill is kept
    assert "started" in err.partial.stdout and "on stderr" in err.partial.stderr
    assert err.partial.returncode == -signal.SIGKILL


def test_a_timeout_hint_says_what_to_do():
    with pytest.raises(CommandTimeout) as info:
        run([PY, "-c", "import time; time.sleep(30)"], timeout=0.5, grace=0.2, hint="check the disk, then again")
    assert info.value.hint.endswith("check the disk, then again")
    assert info.value.cli_hint == info.value.hint  # the CLI says the same, not "raise --timeout"


def test_output_exit_code_input_cwd_and_env(tmp_path):
    code = ("import os, sys; data = sys.stdin.read(); print(data.upper()); print(os.getcwd()); "
            "print(os.environ.get('KIT_PROC_TEST')); print('to stderr', file=sys.stderr); sys.exit(3)")
    done = run([PY, "-c", code], timeout=60, input="hello", cwd=tmp_path,
               env={**os.environ, "KIT_PROC_TEST": "set"})
    assert done.returncode == 3
    assert done.stdout.splitlines() == ["HELLO", str(tmp_path), "set"]
    assert done.stderr == "to stderr\n"
    assert done.args[0] == PY
    # without input the child reads an empty stdin, never the caller's terminal
    assert run([PY, "-c", "import sys; print(repr(sys.stdin.read()))"], timeout=60).stdout == "''\n"


def test_a_command_that_cannot_start_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        run([str(tmp_path / "no-such-program")], timeout=10)


def test_kill_group_ends_a_kept_child_and_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([PY, "-c", _STUBBORN, str(pid_file)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    assert proc.stdout.readline() == b"started\n"
    t0 = time.monotonic()
    kill_group(proc, grace=0.3)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == -signal.SIGKILL
    assert _gone(int(pid_file.read_text()))
    proc.stdout.close()


def test_kill_group_gives_a_child_that_listens_its_sigterm():
    proc = subprocess.Popen([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout.readline() == b"up\n"
    t0 = time.monotonic()
    kill_group(proc, grace=5)
    assert proc.returncode == -signal.SIGTERM and time.monotonic() - t0 < 3
    proc.stdout.close()
    kill_group(proc)  # already ended: nothing to do, nothing raised


def test_the_local_helper_runs_in_its_own_group():
    from kit.hosts import LocalHost

    host = LocalHost()
    try:
        assert host.run(["true"], timeout=30).exited == 0
        helper = host._proc
        assert os.getpgid(helper.pid) == helper.pid
    finally:
        host.close()


def test_pip_failures_are_clear():
    done = pip(["download", "--no-index", "--no-deps", "-d", os.devnull, "no-such-package-of-sgl-kit==1.0"],
               python=PY, timeout=300)
    assert done.returncode != 0
    said = pip_said(done)
    assert "no-such-package-of-sgl-kit" in said
    assert re.search(r"no matching distribution|could not find a version", said, re.I), said
    assert done.args[:3] == [PY, "-m", "pip"] and "--no-input" in done.args
    assert pip_said(subprocess.CompletedProcess([], 2, "", "")) == "pip exited 2"


def test_a_pip_timeout_names_pip_and_the_index():
    with pytest.raises(CommandTimeout) as info:
        pip(["download", "--no-deps", "sglang==0.5.9"], python=PY, timeout=0.05, hint="")
    err = info.value
    assert "-m pip download --no-deps sglang==0.5.9" in err.command
    assert "package index" in err.hint


def test_pip_does_not_pass_this_pythonpath_on(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/nowhere/kit-proc-test")
    done = pip(["--version"], python=PY, timeout=120)
    assert done.returncode == 0 and "pip" in done.stdout
    shown = run([PY, "-c", "import os; print(os.environ.get('PYTHONPATH'))"], timeout=60)
    assert shown.stdout.strip() == "/nowhere/kit-proc-test"  # run itself passes the environment as it is


# --------------------------------------------------------------------------- one owner

# Code that cannot import kit._proc, and so keeps its own few lines:
#  - kit/_remote/: scripts shipped to a target host and run there with its python3 alone
#    (standard library only, Python 3.6), e.g. the helper that kills a command's group;
#  - kit/dryrun/_inside*.py: run by the Python of another environment (the dry-run's venv).
_ELSEWHERE = ("kit/_remote/", "kit/dryrun/_inside")
_OWNER = "kit/_proc.py"
_PIP_COMMANDS = {"install", "download", "index", "wheel", "uninstall", "show", "list", "freeze"}
_RUNNERS = {"run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


@functools.lru_cache(maxsize=1)
def _kit_files() -> tuple[tuple[str, ast.Module], ...]:
    out = []
    for path in sorted(KIT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != _OWNER and not rel.startswith(_ELSEWHERE):
            out.append((rel, ast.parse(path.read_text(), rel)))
    return tuple(out)


def _const(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _called(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _killpg(files) -> list[str]:
    return [f"{rel}:{n.lineno}" for rel, tree in files for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "killpg" or isinstance(n, ast.Name) and n.id == "killpg"]


def _runners(files) -> list[str]:
    return [f"{rel}:{n.lineno} {n.func.value.id}.{n.func.attr}" for rel, tree in files for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and (n.func.value.id == "subprocess" and n.func.attr in _RUNNERS
                 or n.func.value.id == "os" and n.func.attr in ("system", "popen"))]


def _popen_without_a_session(files) -> list[str]:
    return [f"{rel}:{n.lineno}" for rel, tree in files for n in ast.walk(tree)
            if isinstance(n, ast.Call) and _called(n) == "Popen"
            and not any(k.arg == "start_new_session" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in n.keywords)]


def _pip_calls(files) -> list[str]:
    found = []
    for rel, tree in files:
        for n in ast.walk(tree):
            items = n.elts if isinstance(n, ast.List | ast.Tuple) else n.args if isinstance(n, ast.Call) else []
            words = [_const(e) for e in items]
            pairs = [(a, b) for a, b in zip(words, words[1:], strict=False)
                     if (a == "-m" and b in ("pip", "pip3")) or (a in ("pip", "pip3") and b in _PIP_COMMANDS)]
            if pairs:
                found.append(f"{rel}:{n.lineno} {pairs[0]!r}")
            text = _const(n)
            if text and re.search(r"-m\s+pip3?\b", text):
                found.append(f"{rel}:{n.lineno} {text[:60]!r}")
    return found


def test_only_kit_proc_kills_a_process_group():
    assert _killpg(_kit_files()) == [], "end a process group with kit._proc.kill_group (run ends it on timeout)"


def test_only_kit_proc_runs_a_command_to_its_end():
    assert _runners(_kit_files()) == [], "run a command with kit._proc.run: its timeout ends the whole group"


def test_every_kept_child_has_its_own_group():
    """A child the kit keeps (subprocess.Popen) starts a session, so kill_group can end all it started."""
    assert _popen_without_a_session(_kit_files()) == []


def test_only_kit_proc_invokes_pip():
    assert _pip_calls(_kit_files()) == [], "run pip with kit._proc.pip (a timeout, its group ended, no PYTHONPATH)"


def test_the_owner_checks_find_a_second_owner():
    """Each scan above finds its pattern in a planted module, so a second owner would not pass unseen."""
    planted = [("kit/planted.py", ast.parse(textwrap.dedent("""
        import os, signal, subprocess, sys
        from os import killpg
        os.killpg(1, signal.SIGKILL)
        subprocess.check_output(["x"], timeout=1)
        os.system("x")
        subprocess.Popen(["x"])
        subprocess.Popen(["x"], start_new_session=False)
        argv = [sys.executable, "-m", "pip", "install", "y"]
        subprocess.call("pip", "download", "z")
        shell = "python3 -m pip download z"
    """)))]
    assert len(_killpg(planted)) == 1  # the call; `from os import killpg` is an alias, not an ast.Name
    assert [f.split()[1] for f in _runners(planted)] == ["subprocess.check_output", "os.system", "subprocess.call"]
    assert len(_popen_without_a_session(planted)) == 2
    assert len(_pip_calls(planted)) == 3


def test_a_timeout_names_the_command_without_its_secrets():
    """The error is printed and logged: a secret-named flag's value in the command is masked by the one policy."""
    from kit._proc import run
    from kit.errors import CommandTimeout

    with pytest.raises(CommandTimeout) as err:
        run(["sh", "-c", "sleep 5", "sh", "--api-key", "sk-proc-0123456789abcdef", "--ssl-keyfile-password=hunter2x"],
            timeout=0.3, grace=0.1)
    text = str(err.value)
    assert "--api-key '<redacted>'" in text and "sk-proc-0123456789abcdef" not in text and "hunter2x" not in text
