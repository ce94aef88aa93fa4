"""`sgl-kit lab ...`, `sgl-kit args lab` and `sgl-kit why FLAG lab`, as a user runs them.

Each test module runs its own lab in a temporary directory (`SGL_KIT_LAB_DIR`) on a free
port, as a real process started with nohup, and stops it at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _lab_support import free_port, request, sse

from kit.server_args import parse_log

pytestmark = pytest.mark.slow  # real lab processes and one `sgl-kit` process per command

SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"
# sglang's own regex for decode log lines (srt/debug_utils/log_parser.py in 0.5.11), without its optional parts,
# and with the comma after #queue-req optional: 0.5.11's scheduler ends the line there
# (srt/observability/scheduler_metrics_mixin.py:561-565), its older log parser expects one.
DECODE = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\s+TP(\d+))?\]\s+Decode batch( \[\d+\])?,\s+"
                    r"#running-req:\s*(\d+),\s+#token:\s*(\d+),\s+token usage:\s*([0-9.]+),\s+.*?"
                    r"gen throughput \(token/s\):\s*([0-9.]+),\s+#queue-req:\s*(\d+)(?:,|$)", re.M)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    lab_dir = tmp_path_factory.mktemp("lab")
    return dict(os.environ, SGL_KIT_LAB_DIR=str(lab_dir), SGL_KIT_LAB_DRYRUN="0")


def sgl_kit(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def lab(env):
    port = free_port()
    proc = sgl_kit(env, "--json", "lab", "up", "--port", str(port), "--", "--decode-log-interval", "10",
                   *_variant_flags("new"))
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    yield status
    sgl_kit(env, "lab", "down")


def _variant_flags(variant: str) -> list[str]:
    from kit.lab.control import variants

    flags, skip = variants()[variant].flags(), ("--model-path", "--host", "--port")
    return [f for i, f in enumerate(flags) if f not in skip and (i == 0 or flags[i - 1] not in skip)]


def test_lab_up_runs_the_server_from_a_lab_directory_shaped_like_the_incidents(lab, env):
    root = Path(env["SGL_KIT_LAB_DIR"])
    assert lab["running"] and lab["healthy"] and lab["argv"][0] == str(root / "ml-env" / "bin" / "python")
    assert lab["argv"][1:3] == ["-m", "kit.lab.launch_server"]
    site = next((root / "ml-env" / "lib").glob("python3.*/site-packages"))
    assert (site / "sglang" / "srt" / "server_args.py").is_file() and (site / "sglang-0.5.11.dist-info").is_dir()
    config = json.loads((root / "models" / "Qwen3.6-27B" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"] and "vision_config" in config
    assert (root / "run" / "server.pid").read_text().strip() == str(lab["pid"])


def test_lab_up_twice_does_not_start_a_second_server(lab, env):
    proc = sgl_kit(env, "--json", "lab", "up")  # no port asked: whatever port it runs on will do
    again = json.loads(proc.stdout)
    assert proc.returncode == 0 and again["pid"] == lab["pid"] and again["port"] == lab["port"]
    assert "already running" in again["note"]


def test_the_log_is_sglangs_with_a_line_that_says_what_the_lab_is(lab, env):
    events = sse(lab["port"], "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 60,
                                                                              "ignore_eos": True}, "stream": True})
    assert events[-2]["meta_info"]["completion_tokens"] == 60
    log = Path(lab["log"]).read_text()
    assert "a model, not a measurement" in log.splitlines()[0] and "sglang version: 0.5.11" in log
    snap = parse_log(log)
    assert snap["disable_piecewise_cuda_graph"] is True and snap["port"] == lab["port"]
    assert "The server is fired up and ready to roll!" in log
    assert re.search(r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK', log)
    decode = [m for m in DECODE.finditer(log)]
    assert decode, "no decode line that sglang's own log parser would read"
    assert "accept len: " in log and int(decode[-1].group(4)) == 1
    # as sglang 0.5.11's: the line ends at `#queue-req: N` (srt/observability/scheduler_metrics_mixin.py:561-565)
    lines = [line for line in log.splitlines() if "Decode batch" in line]
    assert lines and all(re.search(r", #queue-req: \d+$", line) for line in lines), lines[-1]


def test_args_lab_shows_disable_piecewise_cuda_graph_as_auto_changed(lab, env):
    proc = sgl_kit(env, "args", "lab")
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("disable_piecewise_cuda_graph "))
    assert row.split() == ["disable_piecewise_cuda_graph", "False", "-", "True", "auto-changed"]
    assert re.search(r"^speculative_num_steps\s+-\s+1\s+1\s+explicit", proc.stdout, re.M)
    data = json.loads(sgl_kit(env, "--json", "args", "show", "lab").stdout)
    rows = {r["flag"]: r for r in data["fields"]}
    assert rows["disable_piecewise_cuda_graph"]["origin"] == "auto-changed" and data["server"]["kind"] == "lab"


def test_why_names_rule_8_with_nothing_but_the_lab_target(lab, env):
    proc = sgl_kit(env, "why", "disable_piecewise_cuda_graph", "lab")
    assert proc.returncode == 0, proc.stderr
    fired = [line for line in proc.stdout.splitlines() if line.startswith("fired ")]
    assert len(fired) == 1 and "srt/server_args.py:1230" in fired[0] and "8. Multimodal" in fired[0]
    assert "Qwen3_5ForConditionalGeneration is in multimodal_model_archs" in proc.stdout


def test_source_and_grep_read_the_labs_sglang(lab, env):
    proc = sgl_kit(env, "source", "lab", "srt/server_args.py:1229-1230")
    assert proc.returncode == 0, proc.stderr
    assert "if self.get_model_config().is_multimodal:" in proc.stdout
    hits = json.loads(sgl_kit(env, "--json", "grep", "lab", "is_multimodal_model(", "-F").stdout)["matches"]
    assert any(m["path"] == "srt/configs/model_config.py" for m in hits)


def test_status_reports_the_running_lab(lab, env):
    proc = sgl_kit(env, "lab", "status")
    assert proc.returncode == 0 and f"pid {lab['pid']}" in proc.stdout and "healthy" in proc.stdout


def test_a_taken_port_is_a_clear_error(env, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
        other = dict(env, SGL_KIT_LAB_DIR=str(tmp_path / "lab2"))
        proc = sgl_kit(other, "lab", "up", "--port", str(port))
    assert proc.returncode == 2
    assert f"port {port} on local is already in use by pid {os.getpid()}" in proc.stderr and "--port" in proc.stderr


def test_an_unknown_flag_fails_in_sglangs_words(env, tmp_path):
    other = dict(env, SGL_KIT_LAB_DIR=str(tmp_path / "lab3"))
    proc = sgl_kit(other, "lab", "up", "--port", str(free_port()), "--", *_variant_flags("new"), "--bogus-flag")
    assert proc.returncode == 2
    assert "launch_server.py: error: unrecognized arguments: --bogus-flag" in proc.stderr
    assert "usage:" not in proc.stderr  # the long usage is cut; the error line is what matters
    assert sgl_kit(other, "lab", "status").returncode == 3


def test_lab_down_leaves_a_process_that_is_not_the_labs_alone(env, tmp_path):
    root = tmp_path / "lab4"
    (root / "run").mkdir(parents=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = int(Path(f"/proc/{stranger.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        (root / "run" / "server.json").write_text(json.dumps({"pid": stranger.pid, "start_ticks": ticks,
                                                              "host": "127.0.0.1", "port": 1}))
        proc = sgl_kit(dict(env, SGL_KIT_LAB_DIR=str(root)), "lab", "down")
        assert proc.returncode == 0 and "no longer the lab's; left it alone" in proc.stdout
        assert stranger.poll() is None
    finally:
        stranger.send_signal(signal.SIGKILL)
        stranger.wait(10)


@pytest.fixture
def own_lab(env, tmp_path):
    """A lab of this test's own (variant new), for tests that restart or stop it."""
    mine = dict(env, SGL_KIT_LAB_DIR=str(tmp_path / "own-lab"))
    proc = sgl_kit(mine, "--json", "lab", "up", "--port", str(free_port()), "--variant", "new")
    assert proc.returncode == 0, proc.stderr
    yield mine, json.loads(proc.stdout)
    sgl_kit(mine, "lab", "down")


def test_restart_with_the_fixed_launch_keeps_piecewise_graphs(own_lab):
    env, lab = own_lab
    proc = sgl_kit(env, "--json", "lab", "restart", "--variant", "fixed")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["pid"] != lab["pid"] and status["port"] == lab["port"] and status["label"] == "variant fixed"
    info = json.loads(request(status["port"], "GET", "/server_info")[2])
    assert info["disable_piecewise_cuda_graph"] is False and info["enforce_piecewise_cuda_graph"] is True
    rows = {r["flag"]: r for r in json.loads(sgl_kit(env, "--json", "args", "lab").stdout)["fields"]}
    assert "disable_piecewise_cuda_graph" not in rows  # at its default: not listed
    assert rows["enforce_piecewise_cuda_graph"]["origin"] == "explicit"


def test_up_with_another_variant_while_one_runs_says_to_restart(own_lab):
    env, lab = own_lab
    proc = sgl_kit(env, "lab", "up", "--variant", "fixed")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"sgl-kit: error: the lab on local already runs variant new (pid {lab['pid']}); "
                           "this asked for variant fixed\n"
                           "  -> `sgl-kit lab restart --variant fixed` stops it and starts the one asked for\n")
    same = sgl_kit(env, "lab", "up", "--variant", "new")
    assert same.returncode == 0 and "already running" in same.stdout


def test_up_on_another_port_while_one_runs_says_where_it_runs(own_lab):
    env, lab = own_lab
    other = free_port()
    while other == lab["port"]:
        other = free_port()
    proc = sgl_kit(env, "lab", "up", "--port", str(other))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"sgl-kit: error: the lab on local already runs on port {lab['port']} "
                                  f"(pid {lab['pid']}); this asked for port {other}\n")
    assert f"`sgl-kit lab restart --port {other}`" in proc.stderr
    same = sgl_kit(env, "lab", "up", "--port", str(lab["port"]))
    assert same.returncode == 0 and "already running" in same.stdout


def test_a_failed_restart_says_the_old_server_was_stopped_and_how_to_bring_it_back(own_lab):
    env, lab = own_lab
    proc = sgl_kit(env, "lab", "restart", "--", *_variant_flags("new"), "--bogus-flag")
    assert proc.returncode == 2
    assert f"The lab's previous server (variant new, pid {lab['pid']}) was stopped first, so none runs now." \
        in proc.stderr
    assert f"  -> bring it back with `sgl-kit lab up --port {lab['port']} -- " in proc.stderr
    assert sgl_kit(env, "lab", "status").returncode == 3
    back = proc.stderr.split("`sgl-kit lab up ", 1)[1].split("`", 1)[0].split()
    again = sgl_kit(env, "lab", "up", *back)
    assert again.returncode == 0, again.stderr


def test_lab_down_stops_the_server(own_lab):
    env, lab = own_lab
    proc = sgl_kit(env, "lab", "down")
    assert proc.returncode == 0 and proc.stdout.startswith(f"lab: stopped pid {lab['pid']}; now not running")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{lab['pid']}").exists():
        state = Path(f"/proc/{lab['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{lab['pid']}").exists() or state == "Z"
    assert sgl_kit(env, "lab", "status").returncode == 3


@pytest.mark.slow
def test_with_the_dry_run_the_lab_serves_flags_no_snapshot_covers(env, tmp_path, env_0511):
    other = dict(env, SGL_KIT_LAB_DIR=str(tmp_path / "lab5"), SGL_KIT_LAB_DRYRUN="1")
    flags = _variant_flags("new")
    flags[flags.index("--speculative-num-steps") + 1] = "2"
    flags[flags.index("--speculative-num-draft-tokens") + 1] = "3"
    proc = sgl_kit(other, "--json", "lab", "up", "--port", str(free_port()), "--wait", "240", "--", *flags,
                   timeout=300)
    try:
        assert proc.returncode == 0, proc.stderr
        status = json.loads(proc.stdout)
        info = json.loads(request(status["port"], "GET", "/server_info")[2])
        assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (2, 3)
        assert info["disable_piecewise_cuda_graph"] is True  # rule 8, now found by real sglang code
        assert "Arguments resolved by the dry-run." in Path(status["log"]).read_text().splitlines()[0]
    finally:
        sgl_kit(other, "lab", "down")


# ---------------------------------------------------------------------------- the first hour's rough edges


@pytest.fixture
def held_default(env, tmp_path):
    """A lab directory of its own whose default port ($SGL_KIT_LAB_PORT) is held by a real listening socket
    of this test, as another server on 30000 would: yields (env, the held port)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
        mine = dict(env, SGL_KIT_LAB_DIR=str(tmp_path / "moved-lab"), SGL_KIT_LAB_PORT=str(port))
        try:
            yield mine, port
        finally:
            sgl_kit(mine, "lab", "down")


def test_lab_up_on_a_taken_default_port_listens_on_a_free_one_and_every_lab_command_finds_it(held_default,
                                                                                             tmp_path):
    env, held = held_default
    proc = sgl_kit(env, "lab", "up")
    assert proc.returncode == 0, proc.stderr
    url = re.search(r"^  url:     (http://127\.0\.0\.1:(\d+))$", proc.stdout, re.M)
    port = int(url[2])
    assert port != held
    me = " ".join(a.decode() for a in Path("/proc/self/cmdline").read_bytes().split(b"\0") if a)
    me = " ".join(me.split())
    assert proc.stdout.rstrip().splitlines()[-1] == (
        f"  port {held} is in use by pid {os.getpid()} ({me[:100]}{'...' if len(me) > 100 else ''}), so the lab "
        f"listens on {port} (--port N to choose one)")
    assert request(port, "GET", "/health")[0] == 200
    # `bench lab` measures the lab where it runs and records that URL, not the taken default port
    out = tmp_path / "lab.jsonl"
    bench = sgl_kit(env, "bench", "lab", "-n", "2", "--max-tokens", "16", "--warmup", "0", "--out", str(out))
    assert bench.returncode == 0, bench.stderr
    assert json.loads(out.read_text().splitlines()[0])["url"] == url[1]
    assert f"measured at {url[1]}; written to {out}" in bench.stdout
    assert bench.stderr == ""  # the incident's slow launch: nothing to say about it
    # the other commands that take `lab` resolve it the same way
    args = json.loads(sgl_kit(env, "--json", "args", "lab").stdout)
    assert args["server"]["port"] == port
    wrong = sgl_kit(env, "bench", "lab", "--port", str(held), "-n", "1")
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("sgl-kit: error: `lab` is the server pid ")
    assert f" on port {port}; this asked for port {held}\n  -> leave out --pid/--port" in wrong.stderr


def test_an_asked_port_is_used_as_it_is(held_default):
    env, held = held_default
    proc = sgl_kit(env, "lab", "up", "--port", str(held))
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"port {held} on local is already in use by pid {os.getpid()}" in proc.stderr
    assert "leave --port out and the lab picks a free one" in proc.stderr


def test_restart_with_a_variant_adds_the_flags_after_the_double_dash(own_lab):
    env, lab = own_lab
    proc = sgl_kit(env, "--json", "lab", "restart", "--variant", "new", "--", "--enable-metrics")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["label"] == "variant new + --enable-metrics" and status["port"] == lab["port"]
    argv = status["argv"]
    # the variant's flags are all still there, with the one added
    for flag in _variant_flags("new"):
        assert flag in argv
    assert argv[-1] == "--enable-metrics" and argv.count("--tp-size") == 1
    assert request(status["port"], "GET", "/metrics")[0] == 200  # what --enable-metrics turns on
    text = sgl_kit(env, "lab", "status").stdout
    assert "  launch:  variant new + --enable-metrics" in text
    # a flag the variant has takes the value given after --
    proc = sgl_kit(env, "--json", "lab", "restart", "--variant", "new", "--", "--speculative-num-steps", "3",
                   "--speculative-num-draft-tokens", "4")
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)["argv"]
    assert argv.count("--speculative-num-steps") == 1 and argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4" and "--trust-remote-code" in argv
    info = json.loads(request(lab["port"], "GET", "/server_info")[2])
    assert (info["speculative_num_steps"], info["tp_size"], info["trust_remote_code"]) == (3, 2, True)


def test_restart_help_says_what_the_launch_is(env):
    proc = sgl_kit(env, "lab", "restart", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "--variant NAME with flags after -- added to it" in text
    assert "flags after -- alone are the whole launch" in text


def test_every_command_on_the_lab_says_when_it_does_not_run_the_incidents_launch(own_lab):
    env, lab = own_lab
    notice = ("sgl-kit: the lab runs the `fixed` launch, not the incident's slow one as recorded "
              "(`sgl-kit lab restart --variant new` for that)")
    assert sgl_kit(env, "args", "lab").stderr == ""  # on the incident's new launch: silent
    assert sgl_kit(env, "lab", "restart", "--variant", "fixed").returncode == 0
    for argv in (("args", "lab"), ("--json", "args", "lab"), ("doctor", "lab"),
                 ("why", "disable_piecewise_cuda_graph", "lab")):
        proc = sgl_kit(env, *argv)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.splitlines()[0] == notice, argv
    # also when the flags are the fixed launch's, given whole (notebook 04's last step restarts the lab so)
    assert sgl_kit(env, "lab", "restart", "--", *_variant_flags("fixed")).returncode == 0
    assert sgl_kit(env, "lab", "status").stdout.count("  launch:  variant fixed") == 1
    assert sgl_kit(env, "args", "lab").stderr.splitlines()[0] == notice


def test_timeline_after_a_restart_shows_it_and_what_changed(own_lab):
    env, lab = own_lab
    assert sgl_kit(env, "lab", "restart", "--variant", "old").returncode == 0
    proc = sgl_kit(env, "timeline", "lab")
    assert proc.returncode == 0, proc.stderr
    assert "restarts (1): (and 1 start)" in proc.stdout
    assert "the running process started then (ps)" in proc.stdout
    assert "      speculative_num_steps: 1 -> 3" in proc.stdout
    logs = sorted(p.name for p in (Path(env["SGL_KIT_LAB_DIR"]) / "logs").iterdir())
    assert logs == ["server.log", "server.log.1"]


def test_profile_on_the_stand_in_says_what_to_run_and_leaves_no_directory(own_lab, tmp_path):
    env, lab = own_lab
    proc = subprocess.run([SGL_KIT, "profile", "lab"], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"sgl-kit: error: the lab's stand-in (pid {lab['pid']}) has no profiler")
    assert "`sgl-kit lab up --engine sglang`" in proc.stderr and "--trace FILE" in proc.stderr
    assert not (tmp_path / "runs").exists()
