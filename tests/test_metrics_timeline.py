"""The timeline across a real restart: the lab (a process) restarted with another launch, scraped by a real Prometheus.

The lab writes a fresh log on each start, so the test keeps the first run's log and joins
the two, as a rotated or journald log of a real box holds both runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _lab_support import free_port, request
from _prometheus_support import start_prometheus

from kit.metrics import Prometheus, log_series, metric_names, runtime_facts, timeline

pytestmark = pytest.mark.slow


def _flags(variant: str) -> list[str]:
    from kit.lab.control import variants

    flags, skip = variants()[variant].flags(), ("--model-path", "--host", "--port")
    kept = [f for i, f in enumerate(flags) if f not in skip and (i == 0 or flags[i - 1] not in skip)]
    return [*kept, "--enable-metrics", "--decode-log-interval", "5"]


def _generate(port: int, n: int, tokens: int = 24) -> None:
    for i in range(n):
        status, _, body = request(port, "POST", "/generate",
                                  {"text": f"tell me {i}", "sampling_params": {"max_new_tokens": tokens}})
        assert status == 200, body


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """Prometheus, the lab started with launch `new`, three requests, a restart with `old`, one request."""
    from kit.hosts import LocalHost
    from kit.lab.control import Lab

    mp = pytest.MonkeyPatch()
    mp.setenv("SGL_KIT_LAB_DRYRUN", "0")
    port = free_port()
    prom = start_prometheus(tmp_path_factory.mktemp("prom-restart"), [f"127.0.0.1:{port}"])
    lab = Lab(LocalHost(), directory=str(tmp_path_factory.mktemp("lab-restart")))
    try:
        first = lab.up(flags=_flags("new"), port=port)
        t0 = time.time()
        prom.wait_for('up{job="sglang"} == 1')
        _generate(port, 3)
        prom.wait_for("sglang:num_requests_total >= 3")
        log1 = Path(first.log).read_text()
        before = time.time()
        second = lab.restart(flags=_flags("old"))
        after = time.time()
        _generate(port, 1)
        prom.wait_for("sglang:num_requests_total < 3")
        time.sleep(2)
        log2 = Path(second.log).read_text()
        yield {"prom": prom, "port": port, "t0": t0, "before": before, "after": after, "log": log1 + log2,
               "second": second, "dir": tmp_path_factory.mktemp("restart-files")}
    finally:
        lab.down()
        prom.stop()
        mp.undo()


def _span(r) -> dict:
    """From just after the first start to now, with the end fixed here: a slow argument or a slow
    import after this point cannot shorten the span (it starts after the first startup line)."""
    end = time.time()
    return {"since": end - r["t0"] - 1, "end": end}


def test_the_restart_is_marked_once_with_the_launch_that_changed(restarted):
    r = restarted
    names = metric_names("0.5.11")
    tl = timeline(Prometheus(r["prom"].url), step=1, log_text=r["log"], process_started=r["second"].started_at,
                  names=names, **_span(r))
    assert len(tl.restarts) == 1, tl.to_text()
    restart = tl.restarts[0]
    assert r["before"] - 2 <= restart.at <= r["after"] + 2
    assert any("went down" in e for e in restart.evidence), restart.evidence
    assert any("startup line in the log" in e for e in restart.evidence)
    changes = {flag: (a, b) for flag, a, b in restart.launch_changes}
    assert changes["speculative_num_steps"] == (1, 3)
    assert changes["speculative_num_draft_tokens"] == (2, 4)
    assert restart.version == ("0.5.11", "0.5.11")
    # One segment each side of the restart, each with its own measured throughput.
    assert len(tl.segments) == 2
    assert tl.segments["gen throughput (tok/s)"].notna().all()
    text = tl.to_text()
    assert "speculative_num_steps: 1 -> 3" in text and "restarts (1):" in text


def test_the_decode_log_is_a_series_of_the_same_shape_that_plots_with_the_metrics(restarted):
    r = restarted
    logged = log_series(r["log"])
    assert list(logged.columns) == ["time", "metric", "series", "value", "source"]
    thr = logged[logged["metric"] == "sglang:gen_throughput"]
    assert len(thr) >= 2 and (thr["value"] > 0).all() and set(thr["series"]) == {"tp_rank=0"}
    assert (logged[logged["metric"] == "log:prefill_new_tokens"]["value"] > 0).any()
    tl = timeline(Prometheus(r["prom"].url), step=1, log_text=r["log"], **_span(r))
    assert {"prometheus", "log"} <= set(tl.frame[tl.frame["metric"] == "sglang:gen_throughput"]["source"])
    fig = tl.figure()
    sources = {trace.name.split("[")[1].split("]")[0] for trace in fig.data if "[" in trace.name}
    assert sources == {"prometheus", "log"}
    assert len(fig.layout.shapes) == 1  # the restart line


def test_runtime_facts_read_the_accept_length_over_time_and_the_decode_log(restarted):
    r = restarted
    facts = runtime_facts(Prometheus(r["prom"].url), log_text=r["log"], **_span(r))
    over = facts["accept_length_over_time"]
    assert over["status"] == "measured"
    points = [v for series in over["series"].values() for _, v in series]
    assert points and all(v >= 1 for v in points if v)  # accept length counts the verified token itself
    dec = facts["decode_log"]
    assert dec["status"] == "measured" and dec["lines"] == sum(sum(c.values()) for c in dec["by_running_req"].values())


def test_sgl_kit_timeline_prints_the_restart_and_json_for_scripts(restarted):
    r = restarted
    log = r["dir"] / "server.log"
    log.write_text(r["log"])
    span = _span(r)
    base = [sys.executable, "-m", "kit.cli", "timeline", "--prometheus", r["prom"].url, "--since",
            f"{int(span['since'])}s", "--end", f"{span['end']:.3f}",
            "--step", "1s", "--log", str(log), "--sglang", "0.5.11"]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "restarts (1):" in proc.stdout and "speculative_num_steps: 1 -> 3" in proc.stdout
    assert "missing: sglang:" not in proc.stdout.replace("missing: sglang:spec", "")  # all panels reported
    proc = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    doc = json.loads(proc.stdout)
    assert len(doc["restarts"]) == 1 and doc["version"] == "0.5.11"
    assert {"flag": "speculative_num_steps", "before": 1, "after": 3} in doc["restarts"][0]["launch_changes"]


def test_sgl_kit_timeline_with_prometheus_down_and_no_log_is_one_line_with_a_hint():
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "timeline", "--prometheus", f"http://127.0.0.1:{port}",
                           "--since", "1h", "--prometheus-timeout", "3"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"sgl-kit: error: no series to show: cannot reach Prometheus at "
                                  f"http://127.0.0.1:{port}: connection refused")
    assert "\n  -> " in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------- the accept length over time


def _accept_now(port: int) -> float:
    """The accept length the server's own /metrics page reports now (sglang:spec_accept_length)."""
    from kit.metrics import scrape

    page = scrape(f"http://127.0.0.1:{port}/metrics", timeout=10)
    values = page[page["family"] == "sglang:spec_accept_length"]["value"]
    assert len(values), "the lab reports no sglang:spec_accept_length"
    return float(values.iloc[0])


@pytest.fixture(scope="module")
def dropped(tmp_path_factory):
    """Prometheus, the lab on launch `old` (3 speculative steps), then restarted on `new` (1 step)."""
    from kit.hosts import LocalHost
    from kit.lab.control import Lab

    mp = pytest.MonkeyPatch()
    mp.setenv("SGL_KIT_LAB_DRYRUN", "0")
    port = free_port()
    prom = start_prometheus(tmp_path_factory.mktemp("prom-drop"), [f"127.0.0.1:{port}"])
    lab = Lab(LocalHost(), directory=str(tmp_path_factory.mktemp("lab-drop")))
    try:
        lab.up(flags=_flags("old"), port=port)
        t0 = time.time()
        prom.wait_for('up{job="sglang"} == 1')
        _generate(port, 3)
        before_value = _accept_now(port)
        prom.wait_for(f"sglang:spec_accept_length == {before_value}", at_least=1)
        time.sleep(5)  # several scrapes of the first launch
        before = time.time()
        lab.restart(flags=_flags("new"))
        after = time.time()
        _generate(port, 3)
        after_value = _accept_now(port)
        prom.wait_for(f"sglang:spec_accept_length == {after_value}", at_least=1)
        time.sleep(5)
        yield {"prom": prom, "t0": t0, "before": before, "after": after, "values": (before_value, after_value)}
    finally:
        lab.down()
        prom.stop()
        mp.undo()


def _accept_findings(prom, t0: float):
    from kit.doctor import RULES, diagnose
    from kit.doctor.evidence import Evidence
    from kit.doctor.rules_metrics import add_runtime

    ev = Evidence("lab")
    ev.version = "0.5.11"
    end = time.time()  # fixed here, so the span holds everything since t0 however slow what follows is
    add_runtime(ev, prometheus=Prometheus(prom.url), since=end - t0 + 1, end=end)
    assert ev.runtime is not None, ev.problems
    return diagnose(ev, only=[r for r in RULES if r.id == "accept-length-dropped"]).findings


def test_a_drop_of_the_accept_length_is_found_with_its_time_and_the_servers_own_values(dropped):
    r = dropped
    first, second = r["values"]
    assert second < first * 0.9, r["values"]  # what the server itself reported on each launch
    found = _accept_findings(r["prom"], r["t0"])
    assert [f.id for f in found] == ["accept-length-dropped"]
    text = " ".join(found[0].evidence)
    assert f"the median fell from {first:.2f}" in text and f"to {second:.2f}" in text, text
    assert found[0].estimate.basis == "not estimated" and "sgl-kit timeline" in text
    # the drop is placed at the restart, within a scrape or two
    at = text.split(f"to {second:.2f} (")[1].split(" to ")[0]
    from datetime import datetime

    when = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    assert r["before"] - 3 <= when <= r["after"] + 5, (at, r["before"], r["after"])


def test_a_rise_of_the_accept_length_is_not_a_drop(restarted):
    r = restarted  # launch new (1 step), then old (3 steps): the accept length rose
    assert _accept_findings(r["prom"], r["t0"]) == []
