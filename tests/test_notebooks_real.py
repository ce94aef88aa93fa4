"""The guided notebooks run with papermill against a real sglang server, reached over real SSH.

PyPI's sglang 0.5.11 on CPU (tests/_real_server_support.py), on the test sshd's box. The structure
rules of the notebooks are checked in tests/test_notebooks.py.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from _notebook_support import cells as _cells
from _notebook_support import outputs as _outputs
from _notebook_support import source as _source
from _real_server_support import START_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
# the server's start and five notebooks on two shared cores: the first test carries both
pytestmark = pytest.mark.timeout(int(START_TIMEOUT) + 1800)


# -- the guided notebooks against a real sglang server ----------------------------------------------
#
# PyPI's sglang 0.5.11 on CPU with a tiny Qwen3 (tests/_real_server_support.py, one server per test
# session), reached over the test sshd as a real box would be, with lab_launch = "" so nothing restarts
# it. 00-04: their prose and outputs must follow what this server shows, not the incident.
REAL_NOTEBOOKS = {
    "00_connect": {},
    "01_symptom": {"requests": 2, "max_tokens": 16, "baseline_tok_s": 0.0},
    "02_config": {"baseline": "defaults"},  # no known-good launch of this server: sglang's own defaults
    "03_auto_disable": {},
    "04_fix_and_validate": {"requests": 3, "max_tokens": 32, "baseline_tok_s": 0.0},
}


@pytest.fixture(scope="module")
def real_story(real_server, sshd, tmp_path_factory):
    import papermill

    out = tmp_path_factory.mktemp("real-story")
    timings = {}
    # This module fixture runs before the per-test check of the shared server (conftest's
    # _shared_real_servers): the same check here, so that the notebooks start on a server that answers.
    if problem := real_server.problem():
        import warnings

        warnings.warn(f"the shared real_server was not fit before the notebooks: {problem}; restarted it",
                      stacklevel=1)
        real_server.restore()
    for name, extra in REAL_NOTEBOOKS.items():
        if name == "04_fix_and_validate":
            extra = {**extra, "summary_path": str(out / "validation.json")}
        started = time.monotonic()
        try:
            papermill.execute_notebook(
                str(NOTEBOOKS / f"{name}.ipynb"), str(out / f"{name}.ipynb"), kernel_name="python3",
                progress_bar=False, cwd=str(NOTEBOOKS), execution_timeout=600,
                parameters={"target": sshd.alias, "ssh_config": str(sshd.ssh_config),
                            "server_port": real_server.port, "lab_launch": "", **extra})
        except Exception as exc:
            # say what state the server is in, so that a failure here tells a dead server from a notebook's fault
            raise AssertionError(f"notebook {name} failed after {time.monotonic() - started:.0f} s; the shared "
                                 f"server then: {real_server.problem(wait=10) or 'up and answering'}") from exc
        timings[name] = time.monotonic() - started
    print("notebooks on the real server over SSH: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return out, real_server


def _html(path: Path) -> str:
    return "\n".join("".join(o.get("data", {}).get("text/html", "")) for c in _cells(path) for o in c.get("outputs", []))


def _everything(path: Path) -> str:
    """The notebook's markdown and every output, as one text."""
    cells = _cells(path)
    return "\n".join([_source(c) for c in cells if c["cell_type"] == "markdown"] + _outputs(path))


@pytest.mark.ssh
@pytest.mark.slow
def test_the_guided_notebooks_follow_a_real_cpu_server(real_story):
    out, real_server = real_story
    text = {name: _everything(out / f"{name}.ipynb") for name in REAL_NOTEBOOKS}
    server = real_server.server()
    assert "<ServerProcess sglang 0.5.11" in text["00_connect"] and "sglang.launch_server" in text["00_connect"]
    # the tiny model answers faster than a busy client reads: a request whose tokens came at once gets no rate,
    # and the symptom says so rather than divide by a span of a few milliseconds (kit.bench)
    assert ("tok/s per request (median of 2)" in text["01_symptom"]
            or "no decode rate: none of its 2 requests streamed its decode tokens over time" in text["01_symptom"])
    # 03: the rule that fired on this server is sglang's non-CUDA rule, decided by its CPU engine variable
    story = text["03_auto_disable"]
    assert "Rule '5. Non-CUDA hardware (AMD, NPU, CPU, MPS, XPU, etc.)' fired at srt/server_args.py:" in story
    assert "SGLANG_USE_CPU_ENGINE='1'" in story and f"/proc/{server.pid}/environ" in story
    # and nothing of the incident's multimodal story, nor its GPU fixes
    for incident in ("Qwen3_5ForConditionalGeneration", "is_multimodal`. The kit follows", "--language-only is not it",
                     "the way out is --enforce-piecewise-cuda-graph"):
        assert incident not in story, incident
    assert "This server has no GPU (device = 'cpu')" in story
    # the dry-run of the same launch, with the server's SGLANG_ variables, agrees on the site
    assert "with SGLANG_USE_CPU_ENGINE=1): sglang's own run wrote it at srt/server_args.py:1215" in story
    assert "-> agree" in story
    # the doctor's finding for the prefill graph (its summary line names the first few; its table, all)
    assert "prefill-cuda-graph-off" in story + _html(out / "03_auto_disable.ipynb")


@pytest.mark.ssh
@pytest.mark.slow
def test_02_sorts_the_real_servers_differences_from_sglangs_defaults(real_story):
    from kit.provenance import explain_server

    out, real_server = real_story
    server = real_server.server()
    printed = "\n".join(_outputs(out / "02_config.ipynb"))
    info = server.server_info()
    assert info["disable_piecewise_cuda_graph"] is True and info["disable_cuda_graph"] is True
    assert "Against the baseline (sglang 0.5.11's defaults with this server's model" in printed
    # each flag sglang changed on its own, with the site the static reading says fired on this server
    for flag in ("disable_piecewise_cuda_graph", "disable_cuda_graph"):
        site = next(s for s in explain_server(server, flag).fired if "server_args" in s.file)
        assert (f"- `{flag}`: False there, True here, and no flag asked for it: sglang set it: "
                f"{site.where.removeprefix('sglang/')}") in printed, flag
    assert "5. Non-CUDA hardware" in printed
    assert "(flag = 'disable_piecewise_cuda_graph' first)" in printed
    # nothing of the incident: no speculative decoding here, no 27B model, no multimodal rule
    for incident in ("speculative_num_steps", "EAGLE", "Qwen3.6", "Qwen3_5", "Multimodal"):
        assert incident not in printed, incident


@pytest.mark.ssh
@pytest.mark.slow
def test_04_on_a_cpu_server_has_nothing_to_fix_and_shows_its_measured_launch(real_story):
    from kit.bench import BenchRun

    out, real_server = real_story
    data = json.loads((out / "validation.json").read_text())
    printed = "\n".join(_outputs(out / "04_fix_and_validate.ipynb"))
    assert data["planned"] == 0 and data["applied"] is False and len(data["steps"]) == 1
    # the doctor's GPU-only findings, each with why it does not apply
    for finding in ("decode-cuda-graph-off", "attention-backend-mismatch", "prefill-cuda-graph-off"):
        assert [x for x in data["not_applicable"] if f"({finding}): does not apply: device = 'cpu'" in x], finding
    # each listed with why (a GPU rule: device = 'cpu'; a workload rule: what the load did not show)
    assert all("does not apply: " in x and x in printed for x in data["not_applicable"])
    assert "no step: the doctor found no change of flags to try on this server" in printed
    run = BenchRun.load(data["steps"][0]["run"])
    rate = float(run.summary().loc["decode_tok_s", "mean"])
    if math.isnan(rate):  # every answer arrived in one read (a busy machine): no decode rate, and it says so
        assert data["before_tok_s"] is None
        assert "Measured as found: no decode rate (no request streamed its tokens over time)" in printed
    else:
        assert rate == pytest.approx(data["before_tok_s"]) and f"Measured as found: {rate:.1f} tok/s" in printed
    assert run.totals["ok"] == 3 and all(r.count_source == "server" for r in run.results)
    assert f"{run.totals['output_tokens']} output tokens counted by the server" in printed
    assert "Nothing to fix" in printed and "no improvement is claimed" in printed
    # no speedup invented, no incident's fix relaunched
    for claim in ("faster", "improved", "The symptom is", "relaunching with", "speculative"):
        assert claim not in data["conclusion"] and claim not in printed, claim
