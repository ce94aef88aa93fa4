"""The lab's p2p-pcie scenario: two PCIe GPUs without peer access, found by the doctor from the lab's
own `nvidia-smi topo -p2p` stand-in, and its fix measured by kit.bench against the running lab.

The lab emits each speculative round on a wall-clock schedule (kit/lab/engine.py), so a machine too busy to
run it on time (two shared cores under a full test run) delays some chunks and bunches the ones after them.
A request whose first or last chunk is hit measures a decode rate far from the others, which widens the
bootstrap interval of the means the kit compares (+42 tok/s, CI [-26.6, +129.6] was seen, for a modelled
+10). The round time, read as the median gap between chunks over a whole run, hardly moves: that is
what is held to the model here, at any load; the kit's verdict is held where no request was hit.
"""

from __future__ import annotations

import statistics

import pytest
from _lab_support import free_port

from kit import investigation
from kit.doctor import doctor
from kit.hosts import LocalHost
from kit.lab.control import Lab
from kit.lab.throughput import MACHINE_ENV, load_scenario, throughput_model
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


def _round_ms(run) -> float:
    """A run's round in ms. The lab's schedule never drifts, so a chunk that left late moves only the spans
    it ends: per request, the median over pairs of chunks at least half the request apart of the time per
    round between them, then the median over the requests (each chunk is one round)."""
    per_request = []
    for r in run.results:
        t = r.chunk_t_ms if r.ok else []
        n = len(t)
        if n > 3:
            per_request.append(statistics.median((t[j] - t[i]) / (j - i) for i in range(n) for j in range(i + n // 2, n)))
    return statistics.median(per_request)


def _outliers(run, within: float = 0.05) -> list[float]:
    """The requests' decode rates more than ``within`` away from the run's median (chunks a stall delayed)."""
    rates = [r.decode_tok_s for r in run.results if r.ok]
    mid = statistics.median(rates)
    return [round(x, 1) for x in rates if abs(x / mid - 1) > within]


def test_the_doctor_finds_p2p_missing_and_models_it_and_the_fix_makes_decode_faster(lab, tmp_path, monkeypatch):
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
    found, fixed = validation.results[0], validation.results[-1]
    # The round the lab runs as found, and once peer access is on, by its model of the server's launch
    # (the NCCL all-reduces over PCIe, then the custom kernel's; about 24.3 and 22.2 ms).
    scenario, fields = load_scenario("p2p-pcie"), server.server_info()
    monkeypatch.delenv(MACHINE_ENV, raising=False)
    modelled_found = throughput_model(scenario, fields).round_s * 1e3
    monkeypatch.setenv(MACHINE_ENV, "p2p-unavailable")
    modelled_fixed = throughput_model(scenario, fields).round_s * 1e3
    # what the kit's runs recorded, chunk by chunk: each run's round, and the fix's speedup, as modelled
    measured_found, measured_fixed = _round_ms(found.run), _round_ms(fixed.run)
    said = (f"rounds {measured_found:.2f} -> {measured_fixed:.2f} ms measured, {modelled_found:.2f} -> "
            f"{modelled_fixed:.2f} ms modelled; {fixed.vs_previous}")
    print(said)
    assert measured_found == pytest.approx(modelled_found, rel=0.1), said
    assert measured_fixed == pytest.approx(modelled_fixed, rel=0.1), said
    assert measured_found / measured_fixed == pytest.approx(modelled_found / modelled_fixed, rel=0.03), said
    # The kit's verdict compares the runs' mean rates: where no request was delayed, the fix is significant.
    disturbed = _outliers(found.run) + _outliers(fixed.run)
    if not disturbed:
        assert fixed.vs_previous.verdict == "improved" and fixed.vs_previous.ci_low > 0, said
    else:
        print(f"the verdict is not held: requests delayed by this machine ({disturbed} tok/s); {said}")
    # Each run starts from an empty prefix cache (the kit flushes it before each): without that, the
    # as-found run would read a cache the measurement above warmed, and the step a cold one (+80%). The
    # fix does not touch prefill (the model adds the all-reduces to the decode round only), so the median
    # times to first token agree: within 5% on a quiet machine, within 25% on a busy one (about 0.1 s each,
    # where a few ms of waiting for a core count: -13% was seen beside eight busy processes), far from +80%.
    ttft = [statistics.median(r.ttft_s for r in x.run.results if r.ok) for x in (found, fixed)]
    assert ttft[1] / ttft[0] == pytest.approx(1.0, abs=0.25), (ttft, fixed.ttft_vs_previous)
    after = resolve_server(host, "lab")
    assert after.env.get("SGL_KIT_LAB_MACHINE") == "p2p-unavailable"
    again = doctor("lab", host=host)
    assert "p2p-unavailable" not in [f.id for f in again.findings]  # topo -p2p now reports OK
