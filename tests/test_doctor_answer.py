"""The answer's verdict "fine" and its basis, on a real server log: sglang issue 10053's (data/incidents/
sglang-10053-fine-single-stream, posted verbatim), one stream decoding with `cuda graph: True` and nothing
queued, a server its thread calls fine.

The thread names neither the GPU nor the model, so the roofline here rests on the test's own assumption, written
by the test and said so: an RTX A6000 and tp 1, with a 7B model (whose ceiling the log's rate is near) and with a
3B one (whose ceiling is far above it). What is checked is the verdict's rule: fine when every check holds (no
queue, no retraction, graphs in use, the single-stream rate at FINE_SHARE of the roofline or more), and not when
the rate is under it, with each check's numbers read from the log.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit.doctor import doctor
from kit.doctor.answer import FINE_SHARE

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "data" / "incidents" / "sglang-10053-fine-single-stream" / "server.log"
CATALOG = ROOT / "kit" / "data" / "model_configs"


def _assumed(tmp_path: Path, model: str) -> dict:
    """The test's assumption (not the thread's): the launch that served this log, on one RTX A6000."""
    launch = tmp_path / "launch.sh"  # written by this test
    launch.write_text(f"python -m sglang.launch_server --model-path Qwen/{model} --tp 1 --port 30000\n")
    return {"log": str(LOG), "command": str(launch), "gpu": "a6000",
            "model_config": str(CATALOG / f"Qwen--{model}.json")}


def _decode_lines() -> list[str]:
    return [line for line in LOG.read_text().splitlines() if "Decode batch." in line]


def test_a_steady_stream_near_its_roofline_with_graphs_and_no_queue_is_fine(tmp_path):
    d = doctor(**_assumed(tmp_path, "Qwen2.5-7B-Instruct"))
    a = d.answer
    lines = _decode_lines()
    whole = [line for line in lines if "#queue-req:" in line]  # the paste cuts its last line
    assert whole and all("cuda graph: True" in line and "#queue-req: 0" in line for line in whole)
    assert a.verdict == "fine", a.rows()
    assert a.problem_class.startswith("none") and a.best_guess == "nothing to change in the launch"
    share = d.roofline.measured_tok_s / d.roofline.ceiling_tok_s
    assert share >= FINE_SHARE
    assert f"{d.roofline.measured_tok_s:.1f} tok/s" in a.strongest_signal and f"{share:.0%} of the roofline" in a.strongest_signal
    basis = " | ".join(a.basis)
    assert "#queue-req at most 0" in basis
    assert f"`cuda graph: True` on every Decode batch line that shows the column ({len(lines)} line(s) read)" in basis
    usage = max(float(x) for x in re.findall(r"token usage: ([0-9.]+)", "\n".join(lines)))
    assert f"token usage at most {usage:.2f}" in basis
    # what the release database matches is said, and is not what the server showed
    if any(f.id == "known-issue" for f in d.findings):
        assert "none shows in this evidence" in basis


def test_the_same_rate_far_under_the_roofline_is_not_fine(tmp_path):
    d = doctor(**_assumed(tmp_path, "Qwen2.5-3B-Instruct"))
    share = d.roofline.measured_tok_s / d.roofline.ceiling_tok_s
    assert share < FINE_SHARE
    assert d.answer.verdict != "fine"
    assert any(f"{share:.0%} of the roofline" in b for b in d.answer.basis) or d.answer.verdict == "cause found"


def test_without_a_gpu_and_model_the_verdict_waits_for_the_roofline():
    d = doctor(log=str(LOG))
    a = d.answer
    assert a.verdict == "no cause found" and not d.findings
    assert "collect: " in a.next_step and "the measured rate against the roofline: no roofline" in a.next_step
    # the checks the log can answer are answered
    assert any("`cuda graph: True`" in b for b in a.basis) and any("#queue-req at most 0" in b for b in a.basis)


@pytest.mark.parametrize("model", ["Qwen2.5-7B-Instruct"])
def test_the_fine_answer_is_first_in_the_text_and_the_json(tmp_path, model):
    d = doctor(**_assumed(tmp_path, model))
    text = d.to_text()
    assert text.index("the answer:") < text.index("verdict:") < text.index("problem class:")
    assert "fine" in text.split("verdict:", 1)[1].splitlines()[0]
    assert d.to_dict()["answer"]["verdict"] == "fine"
