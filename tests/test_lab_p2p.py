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


def test_the_doctor_finds_p2p_missing_models_it_and_offers_no_fix_for_gns(lab, tmp_path):
    host = lab.host
    server = resolve_server(host, "lab")
    run = investigation.measure(host, server, requests=6, max_tokens=96, progress=None,
                                out=str(tmp_path / "as-found.jsonl"))
    diagnosis = doctor("lab", host=host, bench=str(run.path))
    (p2p,) = [f for f in diagnosis.findings if f.id == "p2p-unavailable"]
    assert "GPU0-GPU1: GNS" in p2p.evidence[0]  # read from the lab's topo -p2p stand-in
    assert p2p.estimate.basis == "modelled" and 0.03 < p2p.impact < 0.2
    assert any("134 all-reduces per round" in i for i in p2p.estimate.inputs)
    assert any("4x Tesla V100 (PCIe)" in i and "no peer access" in i for i in p2p.estimate.inputs)
    # GNS: the GPU itself offers no peer access, so nothing is prescribed and nothing is planned
    assert p2p.changes == [] and p2p.advice == [] and "GNS" in p2p.avoid[0]
    assert p2p.sites and p2p.sites[0].startswith("srt/distributed/device_communicators/custom_all_reduce_utils.py:")
    assert not any("max-running" in q for q in diagnosis.open_questions)  # it does not bear on one stream
    assert investigation.fix_plan(diagnosis, server) == []


def test_gpus_with_peer_access_make_decode_faster_by_about_the_modelled_share(lab, tmp_path):
    """What GPUs that offer peer access would buy: the lab stands in for such a machine (its scenario's
    machine fix), and sglang's own checks (read when the stand-in starts) then let custom all-reduce run."""
    host = lab.host
    server = resolve_server(host, "lab")
    modelled = next(f for f in doctor("lab", host=host).findings if f.id == "p2p-unavailable").impact
    before = investigation.measure(host, server, requests=8, max_tokens=96, progress=None)
    lab.restart(machine=("p2p-unavailable",))
    try:
        after_server = resolve_server(host, "lab")
        assert after_server.env.get("SGL_KIT_LAB_MACHINE") == "p2p-unavailable"
        assert "p2p-unavailable" not in [f.id for f in doctor("lab", host=host).findings]  # topo -p2p: OK
        after = investigation.measure(host, after_server, requests=8, max_tokens=96, progress=None)
    finally:
        lab.restart(machine=())
    rate = [r.summary().loc["decode_tok_s", "mean"] for r in (before, after)]
    gain = rate[1] / rate[0] - 1
    # the modelled share of decode lost is the gain's 1 - 1/(1+g); CPU noise on a shared machine moves
    # each mean by a few percent, so only the direction and the order of magnitude are held
    assert gain > 0 and 0.3 * modelled < 1 - 1 / (1 + gain) < 3 * modelled, (rate, modelled)
