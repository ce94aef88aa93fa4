"""The lab's p2p-pcie scenario: two PCIe GPUs without peer access, found by the doctor from the lab's
own `nvidia-smi topo -p2p` stand-in, and its fix measured by kit.bench against the running lab.

Held at any load: the round the kit's runs recorded, as modelled, read robustly (tests/_lab_support.py,
``round_ms``); the mean rates the kit's verdict compares are thrown off by a stall of a busy machine
(+42 tok/s, CI [-26.6, +129.6] was seen for a modelled +10), so the verdict is held where no request was.
"""

from __future__ import annotations

import statistics
import urllib.request

import pytest
from _lab_support import free_port, p2p_rounds_ms, rate_outliers, round_ms

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
    # the cap does not bear on one stream: no question of the rule's (the known issue's asks "only with more than
    # 48 requests at once", which is conditional by its own words)
    assert not any("max-running" in q and not q.startswith("known issue") for q in diagnosis.open_questions)
    assert investigation.fix_plan(diagnosis, server) == []


def test_gpus_with_peer_access_run_the_modelled_round(lab, tmp_path):
    """What GPUs that offer peer access would buy: the lab stands in for such a machine (its scenario's
    machine fix), and sglang's own checks (read when the stand-in starts) then let custom all-reduce run."""
    from kit.bench import compare

    host = lab.host
    server = resolve_server(host, "lab")
    # both runs from an empty prefix cache: an earlier test of this module warmed it with the same prompts,
    # and the restarted server's is empty (a warm cache reads time to first token about 45% lower)
    flush = urllib.request.Request(f"http://127.0.0.1:{server.port}/flush_cache", method="POST")
    urllib.request.urlopen(flush, timeout=30).close()
    found = investigation.measure(host, server, requests=6, max_tokens=96, progress=None)
    lab.restart(machine=("p2p-unavailable",))
    try:
        after = resolve_server(host, "lab")
        assert after.env.get("SGL_KIT_LAB_MACHINE") == "p2p-unavailable"
        assert "p2p-unavailable" not in [f.id for f in doctor("lab", host=host).findings]  # topo -p2p now: OK
        fixed = investigation.measure(host, after, requests=6, max_tokens=96, progress=None)
        # the round the lab runs as found, and with peer access, by its model of the server's launch (the NCCL
        # all-reduces over PCIe, then the custom kernel's; about 24.3 and 22.2 ms)
        modelled_found, modelled_fixed = p2p_rounds_ms(after.server_info())
    finally:
        lab.restart(machine=())
    measured_found, measured_fixed = round_ms(found), round_ms(fixed)
    verdict = compare(found, fixed)
    said = (f"rounds {measured_found:.2f} -> {measured_fixed:.2f} ms measured, {modelled_found:.2f} -> "
            f"{modelled_fixed:.2f} ms modelled; {verdict}")
    print(said)
    assert measured_found == pytest.approx(modelled_found, rel=0.1), said
    assert measured_fixed == pytest.approx(modelled_fixed, rel=0.1), said
    assert measured_found / measured_fixed == pytest.approx(modelled_found / modelled_fixed, rel=0.03), said
    # the kit's verdict compares the runs' mean rates: where no request was delayed, the gain is significant
    disturbed = rate_outliers(found) + rate_outliers(fixed)
    if not disturbed:
        assert verdict.verdict == "improved" and verdict.ci_low > 0, said
    else:
        print(f"the verdict is not held: requests delayed by this machine ({disturbed} tok/s); {said}")
    ttft = [statistics.median(r.ttft_s for r in x.results if r.ok) for x in (found, fixed)]
    assert ttft[1] / ttft[0] == pytest.approx(1.0, abs=0.25), ttft  # the fix does not touch prefill
