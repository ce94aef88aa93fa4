"""The lab's p2p-pcie scenario: two PCIe GPUs without peer access, found by the doctor from the lab's
own `nvidia-smi topo -p2p` stand-in, and its fix measured by kit.bench against the running lab."""

from __future__ import annotations

import pytest
from _lab_support import free_port

from kit import investigation
from kit.doctor import doctor
from kit.hosts import LocalHost
from kit.lab.control import Lab
from kit.target import resolve_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SGL_KIT_LAB_DRYRUN", "0")  # the committed snapshots (p2p-pcie-new-0.5.11.json)
    directory = str(tmp_path_factory.mktemp("p2p-lab"))
    mp.setenv("SGL_KIT_LAB_DIR", directory)
    lab = Lab(LocalHost(), directory=directory)
    status = lab.up(port=free_port(), scenario="p2p-pcie")
    assert status.healthy and status.scenario == "p2p-pcie"
    try:
        yield lab
    finally:
        lab.down()
        mp.undo()


def test_the_doctor_finds_p2p_missing_and_models_it_and_the_fix_makes_decode_faster(lab, tmp_path):
    host = lab.host
    server = resolve_server(host, "lab")
    run = investigation.measure(host, server, requests=6, max_tokens=96, progress=None,
                                out=str(tmp_path / "as-found.jsonl"))
    diagnosis = doctor("lab", host=host, bench=str(run.path))
    (p2p,) = [f for f in diagnosis.findings if f.id == "p2p-unavailable"]
    assert "GPU0-GPU1: GNS" in p2p.evidence[0]  # read from the lab's topo -p2p stand-in
    assert p2p.estimate.basis == "modelled" and 0.03 < p2p.impact < 0.2
    assert any("134 all-reduces per round" in i for i in p2p.estimate.inputs)
    assert not any("max-running" in q for q in diagnosis.open_questions)  # it does not bear on one stream
    plan = investigation.fix_plan(diagnosis, server)
    assert [(s.finding, s.machine) for s in plan] == [("p2p-unavailable", ["p2p-unavailable"])]
    validation = investigation.validate(host, "lab", server, plan, requests=6, max_tokens=96, progress=None,
                                        diagnosis=diagnosis)
    fixed = validation.results[-1]
    assert fixed.vs_previous.verdict == "improved" and fixed.vs_previous.ci_low > 0
    # The as-found run came after the measurement above, with the same prompts: without the cache flush
    # before each run it would read a warm prefix cache and the relaunched step a cold one (+80%).
    # Within 5%: a few percent of CPU noise between two runs can be significant for the bootstrap
    # (+2.9%, CI [+0.2, +4.8] was seen once), so the verdict itself is not asserted.
    assert abs(fixed.ttft_vs_previous.rel_diff) < 0.05, fixed.ttft_vs_previous
    after = resolve_server(host, "lab")
    assert after.env.get("SGL_KIT_LAB_MACHINE") == "p2p-unavailable"
    again = doctor("lab", host=host)
    assert "p2p-unavailable" not in [f.id for f in again.findings]  # topo -p2p now reports OK
