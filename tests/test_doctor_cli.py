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
        assert found[0] == "speculative-steps-low" and "prefill-cuda-graph-off" in found
        assert "--speculative-num-steps 3" in data["fixed_command"]
        # under EAGLE on 0.5.11 the enforced prefill graph would not replay: a check, not a fix
        assert "--enforce-piecewise-cuda-graph" not in data["fixed_command"]
        (prefill,) = [f for f in data["findings"] if f["id"] == "prefill-cuda-graph-off"]
        assert prefill["checks"][0]["change"] == "--enforce-piecewise-cuda-graph"
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
    found = [f["id"] for f in data["findings"]]
    assert found[0] == "speculative-steps-low" and "prefill-cuda-graph-off" in found
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


# --------------------------------------------------------------------------- the incident, pasted

PASTE = Path(__file__).parent / "data" / "paste" / "incident-issue.md"  # written for the tests: SOURCES.md there
CONFIG = ROOT / "kit" / "data" / "lab" / "Qwen3.6-27B" / "config.json"


def _roofline_line(text: str) -> str:
    return next(line for line in text.splitlines() if "decode roofline" in line)


def test_doctor_on_the_pasted_incident_without_its_config():
    """No --sglang, no --model-config: the version comes from the text, the launch is read with
    that version's flags and resolved by its code, the roofline from the launch, the nvidia-smi paste
    and the Decode lines, and one line says what the steps check lacks. The one finding needs no
    config.json: 0.5.11 caps speculative decoding at 48 requests for this launch (as its own
    resolution does, kit/data/resolved/incident-new-0.5.11.json); the prefill graph's VLM rule reads
    the config, so without it prefill-cuda-graph-off is not claimed."""
    proc = sgl_kit(None, "doctor", "--paste", str(PASTE))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    flat = " ".join(out.split())
    assert flat.startswith(f"sgl-kit doctor: files, sglang 0.5.11 (stated in {PASTE} line 7, also line 45): "
                           "1 finding")
    assert "[speculative-capped-running-requests]" in flat and "(srt/server_args.py:3455)" in flat
    assert "needs sglang's flag table" not in flat and "no launch command" not in flat
    assert "not understood" not in flat  # `$ nvidia-smi` starts the table's output
    assert "2x NVIDIA RTX A6000, tp=2, 1 speculative step(s), accept 1.75" in _roofline_line(out)
    config_lines = [p for p in flat.split(" - ") if p.startswith("no model config.json")]
    assert len(config_lines) == 1
    said = config_lines[0]
    assert "speculative-steps check" in said and "--model-config FILE" in said
    assert "/root/models/Qwen3.6-27B/config.json" in said and "Hugging Face hub" in said
    assert "the launch with every fix" not in flat  # no fix, so no "fixed" launch identical to the input
    data = json.loads(sgl_kit(None, "doctor", "--paste", str(PASTE), "--json").stdout)
    assert data["sglang_version"] == "0.5.11" and data["sources"]["version"].startswith(f"stated in {PASTE} line 7")
    assert [(f["id"], f["sites"]) for f in data["findings"]] == [("speculative-capped-running-requests",
                                                                  ["srt/server_args.py:3455"])]


def test_doctor_on_the_pasted_incident_with_its_config_finds_the_steps():
    proc = sgl_kit(None, "doctor", "--paste", str(PASTE), "--model-config", str(CONFIG), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    steps = next(f for f in data["findings"] if f["id"] == "speculative-steps-low")
    assert any("accept length 1.75 with 1 step(s)" in line for line in steps["evidence"])
    assert "--speculative-num-steps 3" in data["fixed_command"] and "--tp 2" in data["fixed_command"]
    assert data["roofline"]["tp"] == 2 and data["roofline"]["accept_length"] == 1.75
    assert not any("model config" in p for p in data["problems"])
    text = sgl_kit(None, "doctor", "--paste", str(PASTE), "--model-config", str(CONFIG)).stdout
    assert "the launch with every fix:" in text


def test_doctor_paste_with_no_version_anywhere_infers_one_and_says_so(tmp_path):
    """The incident paste with its two version statements taken out (and the comment that labels it): the
    launch is read with a release inferred from its flags and dates (it used to be left unread), and the
    guess is the report's second line."""
    lines = PASTE.read_text().split("\n")
    kept = [line for line in lines[3:] if "0.5.11" not in line]
    assert len(lines) - 3 - len(kept) == 2
    paste = tmp_path / "issue.md"
    paste.write_text("\n".join(kept))
    proc = sgl_kit(None, "doctor", "--paste", str(paste))
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    head, second = proc.stdout.splitlines()[:2]
    assert head.startswith("sgl-kit doctor: files, sglang ") and " (assumed): " in head
    assert second.startswith("sglang ") and " assumed (inferred from the flags" in second
    assert "no version stated); give --sglang VERSION" in flat and "no sglang version anywhere" not in flat
    assert "no launch command" not in flat and "needs sglang's flag table" not in flat
    assert "2x NVIDIA RTX A6000, tp=2, 1 speculative step(s), accept 1.75" in _roofline_line(proc.stdout)


def test_a_version_in_the_text_loses_to_sglang_given_and_is_said(tmp_path):
    paste = tmp_path / "issue.md"
    paste.write_text(PASTE.read_text().replace("moved the box to sglang 0.5.11", "moved the box to sglang 0.5.12"))
    data = json.loads(sgl_kit(None, "doctor", "--paste", str(paste), "--json").stdout)
    assert data["sglang_version"] == "0.5.12" and data["sources"]["version"].startswith(f"stated in {paste} line 7")
    assert any("different sglang versions (0.5.12 at line 7; 0.5.11 at line 45)" in p for p in data["problems"])
    data = json.loads(sgl_kit(None, "doctor", "--paste", str(paste), "--sglang", "0.5.11", "--json").stdout)
    assert data["sglang_version"] == "0.5.11" and data["sources"]["version"] == "--sglang"
    assert any(f"the text states sglang 0.5.12 ({paste} line 7); read with 0.5.11, from --sglang" in p
               for p in data["problems"])


@pytest.mark.parametrize("form, line", [
    ("check_env", "sglang: 0.5.11"),
    ("docker image", "docker pull lmsysorg/sglang:v0.5.11-cu129"),
    ("pip", "sglang==0.5.11"),
])
def test_the_version_from_each_form_reads_the_launch(tmp_path, form, line):
    """The incident paste with its prose versions replaced by one line of another form."""
    text = PASTE.read_text().replace(" to sglang 0.5.11.", ".").replace("sglang 0.5.11 (pip), ", "")
    paste = tmp_path / "issue.md"
    paste.write_text(text.replace("### Environment\n", f"### Environment\n\n```\n{line}\n```\n"))
    data = json.loads(sgl_kit(None, "doctor", "--paste", str(paste), "--json").stdout)
    assert data["sglang_version"] == "0.5.11" and f"({form})" in data["sources"]["version"]
    assert data["roofline"]["tp"] == 2  # the launch's --tp 2, read with 0.5.11's flag table


@pytest.mark.parametrize("make, said", [
    (lambda p: p.write_bytes(b""), "it is empty"),
    (lambda p: p.write_bytes(bytes(range(256)) * 8), "it is binary (2,048 bytes, with NUL bytes), not text"),
    (lambda p: p.write_bytes(bytes(range(0x80, 0x100)) * 16), "neither UTF-8 text nor white space"),
    (None, "not text"),  # a real executable: this interpreter
])
def test_a_paste_that_is_no_text_is_one_line_and_fails(tmp_path, make, said):
    path = tmp_path / "blob"
    if make is None:
        path = Path(sys.executable).resolve()
    else:
        make(path)
    proc = sgl_kit(None, "doctor", "--paste", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert said in proc.stderr and "a paste is the text of an issue" in proc.stderr


def test_a_log_that_is_no_text_is_said_not_counted(tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 8)
    proc = sgl_kit(None, "doctor", "--log", str(blob))
    assert proc.returncode == 2 and "binary" in proc.stderr and "lines read" not in proc.stderr
    proc = sgl_kit(None, "doctor", "--log", str(blob), "--paste", str(PASTE), "--json")  # the rest still counts
    assert proc.returncode == 0, proc.stderr
    assert any(p.startswith(f"--log {blob}: it is binary") for p in json.loads(proc.stdout)["problems"])


# --------------------------------------------------------------------------- sgl-kit gates


def _incident_files(tmp_path, variant: str) -> list[str]:
    """The incident's launch as a log line and a command, both from the 0.5.11 dry-run's committed record."""
    record = json.loads((ROOT / "kit" / "data" / "resolved" / f"incident-{variant}-0.5.11.json").read_text())
    log, cmd = tmp_path / f"{variant}.log", tmp_path / f"{variant}.cmd"
    log.write_text("[2026-05-01 10:00:00] " + record["server_args_line"] + "\n")
    cmd.write_text("python -m sglang.launch_server " + record["made_by"].split(" -- ", 1)[1] + "\n")
    return ["--log", str(log), "--command", str(cmd), "--sglang", "0.5.11", "--gpu", "a6000",
            "--model-config", str(ROOT / "kit" / "data" / "lab" / "Qwen3.6-27B" / "config.json")]


def test_gates_shows_the_check_that_refuses_the_incidents_prefill_graph(tmp_path):
    proc = sgl_kit(None, "gates", "prefill-graph", *_incident_files(tmp_path, "new"), "--restored")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    flat = " ".join(out.split())  # the text wraps at the terminal's width
    assert out.startswith("the prefill (piecewise) CUDA graph, sglang 0.5.11 (the launch with it turned back on)")
    assert "verdict: never" in flat
    assert "REFUSES srt/model_executor/piecewise_cuda_graph_runner.py:454" in flat
    assert "capture_hidden_mode = FULL (2)" in flat and "eagle_worker_v2.py:707" in flat
    # as found, the auto-disable rule has already turned it off at startup
    found = json.loads(sgl_kit(None, "gates", "prefill-graph", *_incident_files(tmp_path, "new"), "--json").stdout)
    assert found["verdict"] == "never" and found["blocking"]["stage"] == "setup"
    # without speculative decoding, nothing refuses a text request: no blocking check
    plain = json.loads(sgl_kit(None, "gates", "prefill-graph", *_incident_files(tmp_path, "nospec"), "--restored",
                               "--json").stdout)
    assert plain["blocking"] is None and plain["restored"] is True
    assert any(s["where"].endswith("piecewise_cuda_graph_runner.py:454") and s["verdict"] == "passes"
               for s in plain["steps"])


def test_gates_on_a_launch_command_alone_leaves_what_sglang_computes_undecided_not_at_its_default(tmp_path):
    # No log: 0.5.11 sets piecewise_cuda_graph_tokens in __post_init__ (server_args.py:1430) from a maximum
    # that depends on the GPU's memory. Read statically without the GPU, the capture-size check is unknown
    # (it used to read the declared default, None, and say the graph never runs); with the GPU it passes.
    cmd = tmp_path / "launch.sh"
    cmd.write_text("python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp-size 2 "
                   "--trust-remote-code --mem-fraction-static 0.85\n")
    files = ["--command", str(cmd), "--sglang", "0.5.11", "--restored", "--json",
             "--model-config", str(ROOT / "kit" / "data" / "lab" / "Qwen3.6-27B" / "config.json")]
    size = "srt/model_executor/model_runner.py:2823"
    alone = json.loads(sgl_kit(None, "gates", "prefill-graph", *files).stdout)
    (step,) = [s for s in alone["steps"] if s["where"] == size]
    assert step["verdict"] == "unknown" and alone["verdict"] != "never"
    with_gpu = json.loads(sgl_kit(None, "gates", "prefill-graph", *files, "--gpu", "a6000").stdout)
    assert [s["verdict"] for s in with_gpu["steps"] if s["where"] == size] == ["passes"]
    assert with_gpu["blocking"] is None


@pytest.mark.parametrize("argv, message", [
    (["prefil-graph"], "did you mean 'prefill-graph'?"),
    (["prefill-graph"], "`sgl-kit gates lab`"),
    (["prefill-graph", "--log", "/nonexistent/server.log"], "no such file: /nonexistent/server.log"),
])
def test_gates_bad_input(argv, message):
    proc = sgl_kit(None, "gates", *argv)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_the_doctor_masks_the_launchs_secrets_in_text_and_json(tmp_path):
    # planted: a secret-named flag with a space and with "=", and a secret-named variable before the command
    secrets = {"api_key": "sk-live-9f8e7d6c5b4a3210", "admin_api_key": "adm-77aa88bb99cc", "env": "hf_AbCdEfGhIjKlMnOpQrSt"}
    launch = tmp_path / "launch.sh"
    launch.write_text(f"HF_TOKEN={secrets['env']} python -m sglang.launch_server --model-path Qwen/Qwen3-8B \\\n"
                      f"  --tp 2 --api-key {secrets['api_key']} --admin-api-key={secrets['admin_api_key']} \\\n"
                      "  --disable-cuda-graph --port 30000\n")
    env = {**os.environ, "COLUMNS": "120"}
    text = sgl_kit(env, "doctor", "--command", str(launch), "--sglang", "0.5.11")
    data = sgl_kit(env, "doctor", "--command", str(launch), "--sglang", "0.5.11", "--json")
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    assert "--disable-cuda-graph" not in json.loads(data.stdout)["fixed_command"]  # a fix was applied: it is shown
    for value in secrets.values():
        assert value not in text.stdout + text.stderr + data.stdout + data.stderr
    assert "<redacted:api_key>" in text.stdout and "masked 3 secret values" in text.stdout
    assert json.loads(data.stdout)["masked"].get("api_key", 0) >= 1
