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
    ttft = compare(new, fixed, metric="ttft_ms")  # the prefill graph lowers time to first token
    assert ttft.verdict == "improved" and ttft.diff < 0 and ttft.unit == "ms"
