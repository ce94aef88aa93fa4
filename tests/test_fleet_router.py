"""The fleet behind sglang's real router: three real sglang 0.5.11 servers on CPU (the shared one, one more
of the same launch, one launched with ``--chunked-prefill-size 16``), smg 1.13 (sglang's model gateway, from
PyPI) in front of them with ``--policy cache_aware``, and one real Prometheus scraping the three.

What is checked is read from the servers themselves: the drifted replica and its field come from each
server's own ``/server_info``, and the worker that took the load is the one whose own ``/metrics`` counted
the requests, not the one the test expects.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from _lab_support import free_port
from _prometheus_support import caught_up, start_prometheus
from _real_server_support import START_TIMEOUT, metric_total, stop_everything

from kit.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) * 2 + 900)]

SMG = Path(sys.executable).with_name("smg")
SHARED_PREFIX = " ".join(["The deployment runbook says every replica must answer within budget."] * 12)


def _flags_of(launch: list[str]) -> list[str]:
    from kit.server_args import server_flags

    kept, skip = [], False
    for f in server_flags(launch):
        if skip:
            skip = False
            continue
        if f in ("--port", "--host"):
            skip = True
            continue
        kept.append(f)
    return kept


def _start_real(lab_dir: str, flags: list[str], box: dict, key: str) -> None:
    from kit.hosts import LocalHost
    from kit.lab.real import RealLab

    lab = RealLab(LocalHost(), directory=lab_dir, model="qwen3", progress=lambda step: None)
    port = free_port()
    try:
        lab.up(port=port, flags=flags, timeout=START_TIMEOUT)
        box[key] = (lab, port)
    except Exception as exc:  # noqa: BLE001 -- reported by the fixture, which fails with it
        box[key] = (lab, exc)


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _generate(url: str, text: str) -> None:
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}).encode()
    req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


@pytest.fixture(scope="module")
def fleet(real_server, tmp_path_factory):
    """The three servers, the router in front and Prometheus over them; stopped at the end."""
    assert SMG.exists(), f"smg is not installed in {SMG.parent} (pyproject's dev extra pins it)"
    base = _flags_of(real_server.launch)
    box: dict = {}
    dirs = {k: str(tmp_path_factory.mktemp(f"fleet-{k}")) for k in ("same", "drifted")}
    threads = [threading.Thread(target=_start_real, args=(dirs["same"], base, box, "same")),
               threading.Thread(target=_start_real, args=(dirs["drifted"], [*base, "--chunked-prefill-size", "16"],
                                                          box, "drifted"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    router = prom = None
    try:
        for key, (_, got) in box.items():
            assert isinstance(got, int), f"the {key} server did not start: {got}"
        ports = {"shared": real_server.port, "same": box["same"][1], "drifted": box["drifted"][1]}
        workers = [f"http://127.0.0.1:{p}" for p in ports.values()]
        work = tmp_path_factory.mktemp("fleet-router")
        rport = free_port()
        log = open(work / "router.log", "wb")  # noqa: SIM115 - the process owns it
        router = subprocess.Popen([str(SMG), "launch", "--host", "127.0.0.1", "--port", str(rport), "--worker-urls",
                                   *workers, "--policy", "cache_aware", "--prometheus-port", str(free_port())],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        log.close()
        url = f"http://127.0.0.1:{rport}"
        deadline = time.monotonic() + 60
        while True:
            try:
                listed = _get(url + "/workers")["workers"]
                if len(listed) == 3 and all(w.get("is_healthy") for w in listed):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (work / "router.log").read_text()[-3000:]
            time.sleep(0.5)
        prom = start_prometheus(work / "prometheus", [f"127.0.0.1:{p}" for p in ports.values()], interval="2s")
        yield {"router": url, "ports": ports, "prometheus": prom.url, "prom": prom, "work": work}
    finally:
        if router is not None:
            router.terminate()
            try:
                router.wait(timeout=15)
            except subprocess.TimeoutExpired:
                router.kill()
        if prom is not None:
            prom.stop()
        for key, (lab, _) in box.items():
            lab.down(timeout=10)
            assert not stop_everything(dirs[key])


def test_fleet_args_over_the_router_puts_the_drifted_replica_first_with_its_field(fleet, capsys):
    code = main(["fleet", "args", "--router", fleet["router"]])
    out = capsys.readouterr().out
    drifted = f"127.0.0.1:{fleet['ports']['drifted']}"
    print(out)
    assert code == 0
    assert out.splitlines()[0] == "1 of 3 replica(s) differ from the majority"
    first = out.splitlines()[1]
    assert first.split()[0] == drifted and "launch.chunked_prefill_size" in first and "16" in first
    table = out[out.index("replica"):].splitlines()
    assert table[1].split()[0] == drifted  # the table too: deviants first
    assert "3 of 3 replica(s) answered" in out
    data = json.loads(_json(["fleet", "args", "--router", fleet["router"]], capsys))
    assert data["drift"]["order"][0] == drifted
    # the flag, and what sglang resolved from it (its piecewise graph sizes follow the chunk size)
    assert list(data["drift"]["deviants"]) == [drifted], data["drift"]["deviants"]
    assert "launch.chunked_prefill_size" in data["drift"]["deviants"][drifted]
    assert all(f.startswith("launch.") for f in data["drift"]["deviants"][drifted])
    # read through the process on this machine: its pid, and its environment
    facts = data["drift"]["facts"][drifted]
    assert any(r.startswith("pid ") for r in facts["read"]) and facts["sglang"] == "0.5.11"


def _json(argv, capsys) -> str:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return capsys.readouterr().out


def test_fleet_doctor_over_the_router_prints_the_drift_first_and_groups_the_findings(fleet, capsys):
    code = main(["fleet", "doctor", "--router", fleet["router"], "--concurrency", "3"])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "1 of 3 replica(s) differ from the majority"
    groups = [ln for ln in lines if ln.startswith("- ")]
    assert "3 of 3 replica(s) answered" in out
    for line in groups:
        assert "on every replica (3)" in line or " of 3: " in line, line
    data = json.loads(_json(["fleet", "doctor", "--router", fleet["router"], "--concurrency", "3"], capsys))
    assert set(data["diagnoses"]) == {f"127.0.0.1:{p}" for p in fleet["ports"].values()}
    for g in data["findings"]:  # "everywhere" is what the three diagnoses say, finding by finding
        on = [name for name, d in data["diagnoses"].items() if any(f["id"] == g["id"] for f in d["findings"])]
        assert sorted(on) == sorted(g["on"]) and g["everywhere"] == (len(on) == 3)


def test_balance_from_prometheus_finds_the_worker_that_took_the_shared_prefix_and_names_the_policy(fleet, capsys,
                                                                                                    tmp_path):
    ports = fleet["ports"]
    fleet["prom"].wait_for('up{job="sglang"} == 1', timeout=60, at_least=3)  # it scrapes all three already
    before = {k: metric_total(f"http://127.0.0.1:{p}", "sglang:num_requests_total") for k, p in ports.items()}
    t0 = time.time()
    for i in range(12):  # one shared prefix: cache_aware keeps it on the worker that holds it
        _generate(fleet["router"], f"{SHARED_PREFIX} Question {i}: which replica answered?")
    after = {k: metric_total(f"http://127.0.0.1:{p}", "sglang:num_requests_total") for k, p in ports.items()}
    took = {k: after[k] - before[k] for k in ports}
    busiest = max(took, key=took.get)
    assert sum(took.values()) == 12 and took[busiest] >= 9, took  # the servers' own counters
    # Prometheus holds the busy worker's count as its own page says it (scrapes are 2 s apart)
    assert caught_up(fleet["prom"], ports[busiest], "sglang:num_requests_total", timeout=60) == after[busiest]
    time.sleep(2)
    since = f"{int(time.time() - t0) + 10}s"  # the window holds the 12 requests and nothing sent after them
    plot = tmp_path / "balance.html"
    code = main(["fleet", "balance", "--router", fleet["router"], "--prometheus", fleet["prometheus"],
                 "--since", since, "--step", "2s", "--plot", str(plot)])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    finding = next(ln for ln in out.splitlines() if ln.startswith("- imbalance: "))
    assert finding.startswith(f"- imbalance: 127.0.0.1:{ports[busiest]} took {took[busiest]:.0f} of 12 requests")
    # the policy as the router's own start line says it (smg renames its process, so its argv is gone)
    assert "the router's policy is cache_aware (as the router logged it; the log of pid " in finding
    assert "shares a prefix" in finding
    html = plot.read_text().replace("\\u002f", "/")  # plotly writes "/" in its JSON as \u002f
    assert "requests/s" in html and "queued requests" in html and f"127.0.0.1:{ports[busiest]}" in html
