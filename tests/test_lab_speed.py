"""The lab's real speed: kit.bench against the running stand-in, measured against its throughput model.

The lab is a model of the incident (kit/data/scenarios/incident.yaml), not a GPU; what this
checks is that the tokens it streams arrive at the rate its model says, for the slow launch
and the fixed one, and that the comparison between them says what the incident says.
"""

from __future__ import annotations

import pytest
from _lab_support import free_port

from kit.bench import bench, compare
from kit.hosts import LocalHost
from kit.lab.control import Lab
from kit.lab.throughput import load_scenario, throughput_model
from kit.server_args import effective_args
from kit.target import discover

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SGL_KIT_LAB_DRYRUN", "0")  # the committed snapshots: a start takes a second
    lab = Lab(LocalHost(), directory=str(tmp_path_factory.mktemp("speed-lab")))
    try:
        yield lab
    finally:
        lab.down()
        mp.undo()


def _measure(lab: Lab, variant: str, tmp_path, port: int):
    status = lab.restart(variant=variant, port=port)
    assert status.healthy and status.label == f"variant {variant}"
    server = next(s for s in discover(lab.host) if s.pid == status.pid)
    model = throughput_model(load_scenario(), effective_args(server).fields)
    run = bench(status.url, requests=6, concurrency=1, max_tokens=96, warmup=1, progress=None,
                out=tmp_path / f"{variant}.jsonl")
    assert run.totals["ok"] == 6 and run.totals["failed"] == 0
    return run, model


def test_each_launch_streams_at_its_models_rate_and_the_fix_is_an_improvement(lab, tmp_path):
    port = free_port()
    new, new_model = _measure(lab, "new", tmp_path, port)
    fixed, fixed_model = _measure(lab, "fixed", tmp_path, port)
    for run, model in ((new, new_model), (fixed, fixed_model)):
        measured = run.summary().loc["decode_tok_s", "mean"]
        assert measured == pytest.approx(model.expected_tok_s(), rel=0.05), (run.path, model)
    assert new_model.expected_tok_s() < 40 < 50 < fixed_model.expected_tok_s() < 57  # the write-up's ranges
    verdict = compare(new, fixed)
    assert verdict.verdict == "improved" and verdict.ci_low > 10
    # the fixed launch enforces the prefill graph, but under EAGLE its gate refuses the target's prefill
    # (read from 0.5.11 when the stand-in starts): time to first token stays within the noise
    assert fixed_model.prefill_graph_replays is None  # this test builds the model without the source ...
    ttft = compare(new, fixed, metric="ttft_ms")
    assert abs(ttft.rel_diff) < 0.1 and ttft.unit == "ms", ttft  # ... the server it measures reads it


def test_the_prefill_graph_lowers_time_to_first_token_only_without_speculative_decoding(lab, tmp_path):
    port = free_port()
    plain, _ = _measure(lab, "nospec", tmp_path, port)
    enforced, _ = _measure(lab, "nospec_fixed", tmp_path, port)
    ttft = compare(plain, enforced, metric="ttft_ms")
    assert ttft.verdict == "improved" and ttft.rel_diff < -0.1, ttft
    assert compare(plain, enforced).verdict != "improved"  # decode does not run in the prefill graph
