"""`sgl-kit doctor` as a user runs it: against the lab's launches, from files, and with bad input.

The lab runs as a real process in a temporary directory; its server_args line, decode lines and
/server_info come from the lab (sglang 0.5.11's resolution, the scenario's speed model).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _lab_support import free_port

pytestmark = pytest.mark.slow

SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"
ROOT = Path(__file__).resolve().parent.parent
HW = Path(__file__).parent / "data" / "hardware"


def sgl_kit(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def old_cmd(tmp_path_factory) -> str:
    """The incident's old launch command, as the kit records it (kit/data/resolved)."""
    record = json.loads((ROOT / "kit" / "data" / "resolved" / "incident-old-0.5.11.json").read_text())
    path = tmp_path_factory.mktemp("baseline") / "old.cmd"
    path.write_text("python -m sglang.launch_server " + " ".join(record["argv"]) + "\n")
    return str(path)


@pytest.fixture(scope="module", params=["new", "fixed"])
def lab(request, tmp_path_factory):
    env = dict(os.environ, SGL_KIT_LAB_DIR=str(tmp_path_factory.mktemp(f"lab-{request.param}")),
               SGL_KIT_LAB_DRYRUN="0")
    proc = sgl_kit(env, "--json", "lab", "up", "--port", str(free_port()), "--variant", request.param)
    assert proc.returncode == 0, proc.stderr
    # Some decode lines in its log, as a server that served a request has.
    port = json.loads(proc.stdout)["port"]
    bench = sgl_kit(env, "bench", f"http://127.0.0.1:{port}", "-n", "2", "--max-tokens", "64", "--warmup", "0",
                    "--out", str(tmp_path_factory.mktemp("runs") / "run.jsonl"))
    assert bench.returncode == 0, bench.stderr
    yield request.param, env
    sgl_kit(env, "lab", "down")


def test_doctor_lab_against_the_old_launch(lab, old_cmd):
    variant, env = lab
    proc = sgl_kit(env, "doctor", "lab", "--baseline", old_cmd, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    found = [f["id"] for f in data["findings"]]
    if variant == "new":
        assert found[:2] == ["speculative-steps-low", "prefill-cuda-graph-off"]
        assert "--speculative-num-steps 3" in data["fixed_command"]
        assert "--enforce-piecewise-cuda-graph" in data["fixed_command"]
    else:
        assert not {"speculative-steps-low", "prefill-cuda-graph-off"} & set(found)
    assert data["roofline"]["gpu"] == "NVIDIA RTX A6000" and data["roofline"]["ceiling_tok_s"] > 0
    assert "stand" in data["hardware"]["note"]  # the lab says its GPUs are a stand-in
    text = sgl_kit(env, "doctor", "lab", "--baseline", old_cmd)
    assert text.returncode == 0 and text.stdout.startswith("sgl-kit doctor: lab, sglang 0.5.11:")
    assert "decode roofline" in text.stdout


def test_doctor_from_files(tmp_path):
    log = ROOT / "tests" / "data" / "provenance" / "incident-0.5.11.log"
    config = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
    proc = sgl_kit(None, "doctor", "--log", str(log), "--model-config", str(config), "--sglang", "0.5.11",
                   "--topo", str(HW / "topo_2x_rtx5090_pcie_phb_tabs.txt"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [f["id"] for f in data["findings"]][:2] == ["speculative-steps-low", "prefill-cuda-graph-off"]
    assert data["hardware"]["topology"]["links"]["GPU0-GPU1"] == "PHB"
    assert data["roofline"]["ceiling_tok_s"] is None and "no GPU" in data["roofline"]["note"]


@pytest.mark.parametrize("argv, message", [
    ([], "nothing to examine"),
    (["--log", "/nonexistent/server.log"], "no such file: /nonexistent/server.log"),
    (["lab", "--log", __file__], "evidence files go without a TARGET"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_doctor_bad_input(argv, message):
    proc = sgl_kit(None, "doctor", *argv)
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_doctor_dead_ssh_host_fails_fast():
    proc = sgl_kit(None, "doctor", "ssh://nobody@127.0.0.1:1", "--timeout", "5", timeout=60)
    assert proc.returncode == 2 and "127.0.0.1:1" in proc.stderr and "Traceback" not in proc.stderr


INCIDENTS = Path(__file__).resolve().parent.parent / "data" / "incidents"


def test_doctor_paste_of_a_whole_issue(tmp_path):
    """A whole issue body (sgl-project/sglang#7212, as posted): its launch script is found and read
    flag by flag with the script's variables; the cut-off server_args line is said, first."""
    issue = INCIDENTS / "sglang-7212-script-cut-server-args" / "issue.md"
    proc = sgl_kit(None, "doctor", "--paste", str(issue), "--sglang", "0.4.6.post5", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert "launch at lines 9-24" in data["sources"][f"paste {issue}"]
    assert "--tp-size 4" in data["fixed_command"] and "--max-running-requests 128" in data["fixed_command"]
    assert any("cut off before its first field" in p for p in data["problems"])


def test_doctor_cut_off_server_args_line_names_the_unknown_fields(tmp_path):
    log = ROOT / "tests" / "data" / "server_args" / "cut-mid-field.log"
    proc = sgl_kit(None, "doctor", "--log", str(log), "--sglang", "0.5.11", "--json")
    assert proc.returncode == 0, proc.stderr
    cut = [p for p in json.loads(proc.stdout)["problems"] if "is cut off after" in p]
    assert cut and "fields are unknown, not defaults" in cut[0]


def test_doctor_baseline_of_decode_batch_lines_only():
    log = ROOT / "tests" / "data" / "provenance" / "incident-0.5.11.log"
    baseline = INCIDENTS / "sglang-1338-decode-only" / "server.log"
    proc = sgl_kit(None, "doctor", "--log", str(log), "--sglang", "0.5.11", "--baseline", str(baseline), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert "9 Decode batch lines, no server_args line" in data["sources"]["baseline"]
    assert not any("--baseline" in p for p in data["problems"])


def test_evidence_from_pasted_files_keeps_what_it_read_and_says_what_not(tmp_path):
    """kit.doctor.from_files on corpus texts: Decode batch lines alone, sglang's notices with their
    line, a Kubernetes env block given to --environ (the last one written for this test)."""
    from kit.doctor import from_files

    ev = from_files(log=str(INCIDENTS / "sglang-26248-hybrid-retraction" / "server.log"))
    assert ev.decode["max_token_usage"] == 1.0 and ev.decode["max_queue_req"] == 3
    assert any("Decode batch lines are read alone" in p for p in ev.problems)

    ev = from_files(log=str(INCIDENTS / "sglang-38846-mamba-cap-notice" / "issue.md"))
    capped = [m for m in ev.messages if "capped to 9 by the mamba state cache" in m.text]
    assert capped and capped[0].line == 5 and capped[0].kind == "notice"

    env = tmp_path / "env.yaml"
    env.write_text("env:\n  - name: NCCL_P2P_DISABLE\n    value: \"1\"\n  - name: HOME\n    value: /root\n")
    ev = from_files(environ=str(env))
    assert ev.environ == {"NCCL_P2P_DISABLE": "1"} and "env blocks" in ev.sources["environ"]
