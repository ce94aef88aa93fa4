"""`sgl-kit args` and `sgl-kit why` as a user runs them, on real sglang sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_cli import sgl_kit

DATA = Path(__file__).parent / "data"
LOG = DATA / "provenance" / "incident-0.5.11.log"
QWEN36 = DATA / "provenance" / "qwen3.6-27b" / "config.json"

OLD = ("python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp 2 "
       "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 4 --mamba-scheduler-strategy extra_buffer\n")
NEW = ("python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp 2 "
       "--speculative-algorithm EAGLE --speculative-num-steps 1 "
       "--mamba-scheduler-strategy extra_buffer\n")


@pytest.fixture(scope="module")
def pkg(sglang_source) -> str:
    return sglang_source("0.5.11")


def test_args_parse_prints_every_field_of_the_incident_log():
    proc = sgl_kit("args", "parse", str(LOG))
    assert proc.returncode == 0, proc.stderr
    assert "368 fields" in proc.stdout.splitlines()[0]  # every ServerArgs field of 0.5.11, as sglang logs them
    rows = {line.split("=")[0].strip(): line.split("=", 1)[1].strip() for line in proc.stdout.splitlines()[1:]}
    assert len(rows) == 368
    assert rows["disable_piecewise_cuda_graph"] == "True" and rows["speculative_num_steps"] == "1"
    assert rows["chunked_prefill_size"] == "4096"  # resolved by sglang at startup, not the None of the dataclass


def test_args_parse_json_and_a_cut_line(tmp_path):
    text = LOG.read_text()
    cut = text[: text.index("disable_piecewise_cuda_graph=") + 10]
    path = tmp_path / "cut.log"
    path.write_text(cut)
    proc = sgl_kit("--json", "args", "parse", str(path))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["truncated"] is True and data["fields"]["speculative_num_steps"] == 1
    assert "disable_piecewise_cuda_graph" not in data["fields"]


def test_args_parse_without_server_args_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("[2026-04-30 21:14:01] Load weight begin.\n")
    proc = sgl_kit("args", "parse", str(path))
    assert proc.returncode == 2 and "server_args=" in proc.stderr and str(path) in proc.stderr
    assert "->" in proc.stderr and "Traceback" not in proc.stderr


def test_args_diff_of_two_launch_commands(tmp_path, pkg):
    (tmp_path / "old.cmd").write_text(OLD)
    (tmp_path / "new.cmd").write_text(NEW)
    proc = sgl_kit("--json", "args", "diff", str(tmp_path / "old.cmd"), str(tmp_path / "new.cmd"),
                   "--package-dir", pkg)
    assert proc.returncode == 0, proc.stderr
    rows = {r["flag"]: (r["a"], r["b"]) for r in json.loads(proc.stdout)["differences"]}
    assert rows["speculative_num_steps"] == (3, 1)
    assert rows["speculative_num_draft_tokens"] == (4, None)
    assert "tp_size" not in rows


# The incident's old launch, as recorded with its dry-run (kit/data/resolved/incident-old-0.5.11.json).
INCIDENT_OLD = "python -m sglang.launch_server " + json.loads(
    (Path(__file__).parent.parent / "kit/data/resolved/incident-old-0.5.11.json").read_text()
)["made_by"].split(" -- ", 1)[1] + " --tp-size 2\n"
MODEL = Path(__file__).parent.parent / "kit/data/resolved/models/qwen3.6-27b/config.json"


def _diff_rows(stdout: str) -> dict:
    return {r["flag"]: r for r in json.loads(stdout)["rows"]}


def test_args_diff_of_a_command_and_a_log_without_the_dry_run(tmp_path, pkg):
    (tmp_path / "old.cmd").write_text(INCIDENT_OLD)
    argv = ["args", "diff", str(tmp_path / "old.cmd"), str(LOG), "--package-dir", pkg, "--no-dryrun"]
    data = json.loads(sgl_kit("--json", *argv).stdout)
    rows = _diff_rows(json.dumps(data))
    assert all(r["a"] != r["b"] for r in rows.values())  # a row is a difference, never `None -> None`
    asked = {n for n, r in rows.items() if r["group"] == "asked"}
    assert asked == {"speculative_num_steps", "speculative_num_draft_tokens"}
    assert (rows["speculative_num_steps"]["a"], rows["speculative_num_steps"]["a_origin"]) == (3, "asked")
    piecewise = rows["disable_piecewise_cuda_graph"]
    assert (piecewise["group"], piecewise["a"], piecewise["a_origin"], piecewise["b"], piecewise["b_origin"]) == (
        "resolved", False, "default", True, "not the default")
    assert rows["random_seed"]["group"] == "volatile"
    assert "not resolved: --no-dryrun" in data["a"]["method"]
    text = sgl_kit(*argv).stdout
    assert "random_seed" not in text.split("not shown:")[0]  # hidden unless --all
    assert len(text.splitlines()) <= 40  # one screen


def test_args_diff_resolves_the_command_with_the_dry_run(tmp_path, pkg, env_0511):
    (tmp_path / "old.cmd").write_text(INCIDENT_OLD)
    proc = sgl_kit("--json", "args", "diff", str(tmp_path / "old.cmd"), str(LOG), "--package-dir", pkg,
                   "--model", str(MODEL), "--gpu", "a6000")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["a"]["method"] == "resolved by the dry-run of sglang 0.5.11"
    rows = _diff_rows(proc.stdout)
    assert {n for n, r in rows.items() if r["group"] != "volatile"} == {
        "speculative_num_steps", "speculative_num_draft_tokens"}
    same = {r["flag"]: r for r in data["same_changed"]}
    assert same["disable_piecewise_cuda_graph"] == {"flag": "disable_piecewise_cuda_graph", "default": False,
                                                    "value": True, "where": "srt/server_args.py:1230"}
    text = sgl_kit("args", "diff", str(tmp_path / "old.cmd"), str(LOG), "--package-dir", pkg,
                   "--model", str(MODEL), "--gpu", "a6000").stdout
    assert "disable_piecewise_cuda_graph False -> True (srt/server_args.py:1230)" in " ".join(text.split())
    assert len(text.splitlines()) <= 25
    # A command file does not say which GPU it ran on: without --gpu it is not resolved, and says so.
    proc = sgl_kit("--json", "args", "diff", str(tmp_path / "old.cmd"), str(LOG), "--package-dir", pkg,
                   "--model", str(MODEL))
    assert proc.returncode == 0, proc.stderr
    method = json.loads(proc.stdout)["a"]["method"]
    assert "not resolved: no GPU given" in method and "--gpu" in method


def test_args_diff_needs_a_flag_table_for_commands(tmp_path):
    (tmp_path / "a.cmd").write_text(OLD)
    proc = sgl_kit("args", "diff", str(tmp_path / "a.cmd"), str(LOG))
    assert proc.returncode == 2 and "--sglang" in proc.stderr


def test_why_names_rule_8_locally(pkg):
    proc = sgl_kit("why", "disable_piecewise_cuda_graph", "--package-dir", pkg, "--log", str(LOG),
                   "--model-config", str(QWEN36))
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "1 fired" in first and "value in the log: True" in first
    fired = [line for line in proc.stdout.splitlines() if line.startswith("fired")]
    assert len(fired) == 1 and "srt/server_args.py:1230" in fired[0] and "8. Multimodal / VLM models" in fired[0]


@pytest.mark.ssh
def test_why_over_ssh_finds_config_json_beside_the_logged_model_path(sshd, pkg, tmp_path):
    # The log names model_path /root/models/Qwen3.6-27B; lay the config out where the log says.
    model_dir = tmp_path / "models" / "Qwen3.6-27B"
    model_dir.mkdir(parents=True)
    shutil.copy(QWEN36, model_dir / "config.json")
    log = tmp_path / "server.log"
    log.write_text(LOG.read_text().replace("/root/models/Qwen3.6-27B", str(model_dir)))
    proc = sgl_kit("--json", "why", "disable_piecewise_cuda_graph", sshd.alias, "--package-dir", pkg,
                   "--log", str(log), "--ssh-config", str(sshd.ssh_config))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["fired"] == ["sglang/srt/server_args.py:1230"] and data["version"] == "0.5.11"
