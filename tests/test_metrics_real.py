"""The doctor's rules over what the server did (kit.doctor.rules_metrics), on a real Prometheus (Debian's
package) scraping a real CPU sglang server of this module's own (it is relaunched, so the session's shared
one is not used): PyPI's sglang 0.5.11 with a tiny Qwen3 (tests/_real_server_support.py). Every number a rule shows is checked against the server's own
``/metrics`` page, read directly at both ends of the span, never against what a launch was meant to do.

The real server shows the prefix cache (repeated and distinct prompts), queueing and retraction (after a
relaunch with ``--max-running-requests 4`` and a KV pool of 600 tokens), and its graph passes by mode:
all of them eager, since it has no GPU. What only a GPU shows, decode passes replayed in CUDA graphs up
to the captured batch size and eager above it, comes from the stand-in lab (kit/lab), which counts
them by its own model: said so in those tests.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from _lab_support import app_server, free_port, request, variant_fields
from _prometheus_support import caught_up, start_prometheus
from _real_server_support import START_TIMEOUT, serve_real

from kit.doctor import RULES, diagnose, from_server
from kit.doctor.evidence import Evidence
from kit.doctor.rules_metrics import LOW_CACHE_HIT, QUEUE_SHARE, add_runtime, evidence_gaps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) * 2 + 900)]

ROOT = Path(__file__).resolve().parent.parent
# The samples whose values the tests read from the server's page at both ends of each span.
SAMPLES = ("sglang:prompt_tokens_total", "sglang:cached_tokens_total", "sglang:queue_time_seconds_sum",
           "sglang:time_to_first_token_seconds_sum", "sglang:num_retracted_requests_total",
           "sglang:cuda_graph_passes_total")
SHARED = " ".join(f"shared{j}" for j in range(60))  # one prompt sent again and again: the radix cache keeps it
CROWDED = ["--max-running-requests", "4", "--max-total-tokens", "600"]  # 8 requests of 150 tokens do not fit


@dataclass
class Span:
    start: float
    end: float
    before: dict
    after: dict

    def delta(self, sample: str) -> float:
        """What the server's page counted in the span. A sample missing before it is a counter sglang had
        not created yet (it creates one on its first increment), so it counted from zero."""
        return (self.after[sample] or 0.0) - (self.before[sample] or 0.0)

    @property
    def since(self) -> float:
        return self.end - self.start


def _generate(port: int, text: str, tokens: int = 8) -> dict:
    status, _, body = request(port, "POST", "/generate", {"text": text, "sampling_params": {
        "max_new_tokens": tokens, "ignore_eos": True}}, timeout=900)  # a queued request waits for the others
    assert status == 200, body
    return json.loads(body)["meta_info"]


def _span(prom, port: int, load, samples=SAMPLES) -> Span:
    before = {s: caught_up(prom, port, s) for s in samples}
    start = time.time()
    load()
    after = {s: caught_up(prom, port, s) for s in samples}
    return Span(start, time.time(), before, after)


def _concurrent(port: int, n: int, tokens: int, text=lambda i: f"request {i} " + "word " * 30) -> None:
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        list(pool.map(lambda i: _generate(port, text(i), tokens), range(n)))


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """A real server of this module's own (it is relaunched: the session's shared one is never changed),
    Prometheus scraping it every second, and three spans of its own traffic: the same prompt six times, six
    distinct prompts (the default launch), then 8 requests at once after a relaunch with CROWDED flags."""
    from kit.investigation import relaunch
    from kit.server_args import server_flags

    servers = serve_real(tmp_path_factory, "qwen3", set_lab_dir=False)
    mine = next(servers)
    port = mine.port
    prom = start_prometheus(tmp_path_factory.mktemp("prom-real"), [f"127.0.0.1:{port}"])
    try:
        prom.wait_for('up{job="sglang"} == 1')
        _generate(port, SHARED)  # the first sight of the shared prompt, outside the spans
        spans = {"repeat": _span(prom, port, lambda: [_generate(port, SHARED) for _ in range(6)]),
                 "distinct": _span(prom, port, lambda: [_generate(port, f"{i}{i} " + " ".join(
                     f"v{i}w{j}" for j in range(60))) for i in range(6)])}
        default = mine.server()
        relaunch(mine.host, default, [*server_flags(default.argv), *CROWDED], timeout=START_TIMEOUT)
        crowded = mine.server()
        assert crowded.server_info()["max_running_requests"] == 4
        _generate(port, "warm up")  # the new process' counters exist from here on
        spans["crowded"] = _span(prom, port, lambda: _concurrent(port, 8, 150))
        yield {"prom": prom, "port": port, "spans": spans, "server": crowded, "real": mine}
    finally:
        prom.stop()
        servers.close()  # stops it and its workers (serve_real's finally)


def _diagnosis(runs, span: Span, *ids: str, names=None):
    server = runs["real"].server()
    ev = from_server(runs["real"].host, server)
    add_runtime(ev, server=server, prometheus=runs["prom"].url, since=span.since, end=span.end)
    assert ev.runtime is not None, ev.problems
    only = [r for r in RULES if r.id in ids]
    return ev, diagnose(ev, only=only)


def _found(diagnosis, rule_id: str):
    """The finding of that rule, ranked or listed apart (a GPU rule on this CPU server is listed apart)."""
    return next((f for f in diagnosis.findings + diagnosis.not_applicable if f.id == rule_id), None)


# ---------------------------------------------------------------------------- the prefix cache


def test_distinct_prompts_fire_the_cache_rule_with_the_servers_own_counts(real_runs):
    span = real_runs["spans"]["distinct"]
    ev, d = _diagnosis(real_runs, span, "prefix-cache-hit-low")
    prompt, cached = span.delta("sglang:prompt_tokens_total"), span.delta("sglang:cached_tokens_total")
    assert prompt > 0 and cached / prompt < LOW_CACHE_HIT  # the server's own page: few tokens from the cache
    assert ev.runtime["prompt_tokens"]["values"] == {"": prompt}
    assert sum(ev.runtime["cached_tokens"]["values"].values()) == cached
    finding = _found(d, "prefix-cache-hit-low")
    assert finding is not None, d.to_text()
    assert f"{prompt:g} prompt tokens: {cached / prompt:.1%} came from the prefix cache" in finding.evidence[0]
    assert finding.estimate.basis == "not estimated" and finding.estimate.inputs
    assert "srt/observability/metrics_collector.py:1273" in finding.sites  # cached_tokens_total, declared there


def test_a_repeated_prompt_is_served_from_the_cache_and_the_rule_stays_quiet(real_runs):
    span = real_runs["spans"]["repeat"]
    ev, d = _diagnosis(real_runs, span, "prefix-cache-hit-low")
    prompt, cached = span.delta("sglang:prompt_tokens_total"), span.delta("sglang:cached_tokens_total")
    assert prompt > 0 and cached / prompt >= LOW_CACHE_HIT
    assert sum(ev.runtime["cached_tokens"]["values"].values()) == cached
    assert _found(d, "prefix-cache-hit-low") is None


# ---------------------------------------------------------------------------- queueing and retraction


def test_more_requests_than_max_running_requests_fire_the_queue_rule_measured(real_runs):
    span = real_runs["spans"]["crowded"]
    ev, d = _diagnosis(real_runs, span, "queue-time-measured")
    waited, ttft = span.delta("sglang:queue_time_seconds_sum"), span.delta("sglang:time_to_first_token_seconds_sum")
    finding = _found(d, "queue-time-measured")
    assert finding is not None, d.to_text()
    assert finding.estimate.basis == "measured" and finding.estimate.metric == "time to first token"
    assert finding.estimate.share == pytest.approx(min(1.0, waited / ttft), rel=1e-9)
    queued = max(ev.runtime["queue_max"]["values"].values())
    assert 1 <= queued <= 8 - 1  # 8 sent at once; at least one runs (the KV pool admits fewer than 4 here)
    assert any(f"{waited:.3f} s" in line for line in finding.evidence)


def test_one_request_at_a_time_does_not_queue(real_runs):
    span = real_runs["spans"]["repeat"]
    ev, d = _diagnosis(real_runs, span, "queue-time-measured")
    waited, ttft = span.delta("sglang:queue_time_seconds_sum"), span.delta("sglang:time_to_first_token_seconds_sum")
    assert ttft > 0 and waited / ttft < QUEUE_SHARE  # the server's own numbers
    assert max(ev.runtime["queue_max"]["values"].values()) == 0
    assert _found(d, "queue-time-measured") is None


def test_a_small_kv_pool_retracts_and_the_rule_counts_what_the_server_counted(real_runs):
    span = real_runs["spans"]["crowded"]
    ev, d = _diagnosis(real_runs, span, "requests-retracted-measured")
    retracted = span.delta("sglang:num_retracted_requests_total")
    assert retracted >= 1, "the crowded launch did not retract: the test's load no longer reaches it"
    assert ev.runtime["retracted_requests"]["values"] == {"": retracted}
    finding = _found(d, "requests-retracted-measured")
    assert finding is not None and f": {retracted:g} requests retracted" in finding.evidence[0]
    log = real_runs["real"].server().log_text()
    assert "KV cache pool is full. Retract requests." in log  # sglang's own words for the same event


def test_without_a_retraction_the_counter_is_missing_and_said_so_not_zero(real_runs):
    span = real_runs["spans"]["repeat"]
    if span.after["sglang:num_retracted_requests_total"] is not None:
        pytest.fail("the default launch retracted a request; the quiet case needs a span without one")
    ev, d = _diagnosis(real_runs, span, "requests-retracted-measured")
    assert ev.runtime["retracted_requests"]["status"] == "no series"
    assert _found(d, "requests-retracted-measured") is None
    gap = next(g for g in d.unanswered if g.startswith("retracted requests"))
    assert "not a zero" in gap and "creates it on the first retraction" in gap
    assert "srt/observability/metrics_collector.py:318" in gap  # where 0.5.11 declares it


# ---------------------------------------------------------------------------- graph passes by mode


def test_the_cpu_servers_decode_passes_are_all_eager_and_the_rule_says_it_does_not_apply(real_runs):
    span = real_runs["spans"]["crowded"]
    ev, d = _diagnosis(real_runs, span, "decode-passes-eager", "prefill-passes-eager")
    passes = ev.runtime["graph_passes"]["values"]
    page = span.delta("sglang:cuda_graph_passes_total")
    assert sum(passes.values()) == page and set(passes) == {"decode_none", "prefill_none"}
    decode, prefill = _found(d, "decode-passes-eager"), _found(d, "prefill-passes-eager")
    assert f"decode_none {passes['decode_none']:g}" in decode.evidence[0]
    assert decode.estimate.reason.startswith("does not apply: device = 'cpu'") and not decode.changes
    assert prefill is not None and "srt/observability/metrics_collector.py:985" in " ".join(prefill.evidence)


# Prometheus sees the running batch only when it scrapes (every second here): six requests at once must run
# together over several scrapes for the batch of six to be seen at all, whatever the machine's load.
SCRAPES_WHILE_SIX_RUN = 4


@pytest.fixture(scope="module")
def lab_graphs(tmp_path_factory):
    """The stand-in lab (what only a GPU shows): decode graphs captured up to batch 2, requests one at a time,
    then six at once, long enough that several scrapes of a real Prometheus see all six running."""
    from kit.lab.throughput import load_scenario, throughput_model

    fields = variant_fields("new", enable_metrics=True, cuda_graph_max_bs=2)
    # the lab's modelled decode speed of one stream among six (about 36 tok/s: its round time and accept rate)
    six_tokens = int(throughput_model(load_scenario("incident"), fields).expected_tok_s(6) * SCRAPES_WHILE_SIX_RUN)
    with app_server(fields) as lab:
        prom = start_prometheus(tmp_path_factory.mktemp("prom-lab"), [f"127.0.0.1:{lab.port}"])
        try:
            prom.wait_for('up{job="sglang"} == 1')
            _generate(lab.port, "warm up", 16)
            samples = ("sglang:cuda_graph_passes_total",)
            one = _span(prom, lab.port, lambda: [_generate(lab.port, f"one {i}", 32) for i in range(3)], samples)
            many = _span(prom, lab.port, lambda: _concurrent(lab.port, 6, six_tokens), samples)
            yield {"prom": prom, "port": lab.port, "fields": fields, "one": one, "many": many}
        finally:
            prom.stop()


def _lab_diagnosis(lab_graphs, span: Span):
    from kit.launch_file import source_tree

    ev = Evidence("lab", version="0.5.11", args=dict(lab_graphs["fields"]), tree=source_tree(None, "0.5.11"))
    add_runtime(ev, prometheus=lab_graphs["prom"].url, since=span.since, end=span.end,
                selector=f'{{instance="127.0.0.1:{lab_graphs["port"]}"}}')
    return ev, diagnose(ev, only=[r for r in RULES if r.id == "decode-passes-eager"])


def test_stand_in_decode_above_the_captured_batch_runs_eager_and_the_fix_raises_it(lab_graphs):
    span = lab_graphs["many"]
    ev, d = _lab_diagnosis(lab_graphs, span)
    passes = ev.runtime["graph_passes"]["values"]
    assert sum(passes.values()) == span.delta("sglang:cuda_graph_passes_total")  # the lab's own page
    assert passes["decode_none"] > 0 and passes["decode_cuda_graph"] > 0
    finding = _found(d, "decode-passes-eager")
    assert finding is not None, d.to_text()
    # the six ran together for several scrapes; the largest batch a scrape saw is above the captured 2
    running = max(ev.runtime["running_max"]["values"].values())
    assert 2 < running <= 6, ev.runtime["running_max"]
    assert any("above the largest captured batch, cuda_graph_max_bs = 2" in e for e in finding.evidence)
    assert [str(c) for c in finding.changes] == [f"--cuda-graph-max-bs {int(running)}"]
    assert "srt/observability/metrics_collector.py:981" in finding.sites


def test_stand_in_one_request_at_a_time_replays_the_graph_and_the_rule_is_quiet(lab_graphs):
    span = lab_graphs["one"]
    ev, d = _lab_diagnosis(lab_graphs, span)
    assert ev.runtime["graph_passes"]["values"].get("decode_none", 0.0) == 0.0
    assert ev.runtime["graph_passes"]["values"]["decode_cuda_graph"] > 0
    assert _found(d, "decode-passes-eager") is None


# ---------------------------------------------------------------------------- the CLI and bad input


def _doctor_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kit.cli", "doctor", "lab", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_sgl_kit_doctor_with_prometheus_on_the_real_server(real_runs):
    span = real_runs["spans"]["crowded"]
    since = f"{int(time.time() - span.start) + 1}s"
    lab = {"SGL_KIT_LAB_DIR": real_runs["real"].lab_dir}  # target "lab": this module's server
    proc = _doctor_cli("--prometheus", real_runs["prom"].url, "--since", since, env=lab)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    print(out)
    for rid in ("queue-time-measured", "requests-retracted-measured", "decode-passes-eager"):
        assert f"[{rid}]" in out, rid
    assert f"Prometheus at {real_runs['prom'].url}" in json.loads(_doctor_cli(
        "--prometheus", real_runs["prom"].url, "--since", since, "--json", env=lab).stdout)["sources"]["runtime"]


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    doc["ids"] = [f["id"] for f in doc["findings"] + doc["not_applicable"]]
    return doc


def test_a_prometheus_that_is_down_is_one_problem_and_the_rest_of_the_evidence_counts(real_server):
    port = free_port()
    doc = _json(_doctor_cli("--prometheus", f"http://127.0.0.1:{port}", "--prometheus-timeout", "3", "--json"))
    said = [p for p in doc["problems"] if "Prometheus" in p]
    assert len(said) == 1 and f"cannot reach Prometheus at http://127.0.0.1:{port}: connection refused" in said[0]
    assert "decode-cuda-graph-off" in doc["ids"]  # the server's own evidence still counts
    assert "queue-time-measured" not in doc["ids"] and "runtime" not in doc["sources"]


def test_a_locked_prometheus_names_the_variables_and_never_echoes_the_secret(real_server, tmp_path):
    locked = start_prometheus(tmp_path / "prom-locked", [f"127.0.0.1:{real_server.port}"],
                              basic_auth=("kit", "s3cret-pass"))
    try:
        bare = _json(_doctor_cli("--prometheus", locked.url, "--json", env={"SGL_KIT_PROMETHEUS_USER": ""}))
        said = " ".join(p for p in bare["problems"] if "Prometheus" in p)
        assert "needs authentication (HTTP 401) and none was given" in said and "SGL_KIT_PROMETHEUS_USER" in said
        assert "decode-cuda-graph-off" in bare["ids"]
        proc = _doctor_cli("--prometheus", locked.url, "--json", env={"SGL_KIT_PROMETHEUS_USER": "kit",
                                                                     "SGL_KIT_PROMETHEUS_PASSWORD": "wrong-pass-123"})
        assert "wrong-pass-123" not in proc.stdout + proc.stderr
        assert any("refused basic auth as 'kit'" in p for p in _json(proc)["problems"])
        proc = _doctor_cli("--prometheus", locked.url, "--since", "5m", "--json",
                           env={"SGL_KIT_PROMETHEUS_USER": "kit", "SGL_KIT_PROMETHEUS_PASSWORD": "s3cret-pass"})
        assert _json(proc)["sources"]["runtime"].startswith(f"Prometheus at {locked.url}")
        assert "s3cret-pass" not in proc.stdout + proc.stderr
    finally:
        locked.stop()


def test_a_metric_this_release_does_not_declare_is_named_and_the_rest_is_measured(real_runs):
    """sglang 0.4.6 declares no cuda_graph_passes_total: read against its names, the real series of that
    family is 'not declared', named with the files read, while what 0.4.6 declares is measured."""
    from kit.doctor import Case
    from kit.metrics import Prometheus, metric_names, runtime_facts

    span = real_runs["spans"]["crowded"]
    facts = runtime_facts(Prometheus(real_runs["prom"].url), since=span.since, end=span.end,
                          names=metric_names("0.4.6"))
    assert facts["graph_passes"]["status"] == "not declared"
    assert facts["queue_max"]["status"] == "measured"
    ev = Evidence("files", version="0.4.6", runtime=facts)
    d = diagnose(ev, only=[r for r in RULES if r.id in ("decode-passes-eager", "queue-time-measured")])
    assert _found(d, "decode-passes-eager") is None
    gap = next(g for g in evidence_gaps(Case(ev)) if g.startswith("graph passes by mode"))
    assert "sglang:cuda_graph_passes_total is not declared by sglang 0.4.6 (sglang/srt/metrics/collector.py read)" in gap


# ---------------------------------------------------------------------------- notebook 01's time series


def _values(array) -> list[float]:
    """A plotly array as saved in a notebook: a list, or plotly's typed array ({"dtype", "bdata"})."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return [float(v) for v in array if v is not None]


def test_notebook_01_plots_the_real_servers_series_from_the_real_prometheus(real_runs, tmp_path):
    import urllib.parse

    import papermill

    notebooks = ROOT / "notebooks"
    out = tmp_path / "01_symptom.ipynb"
    papermill.execute_notebook(
        str(notebooks / "01_symptom.ipynb"), str(out), kernel_name="python3", progress_bar=False, cwd=str(notebooks),
        execution_timeout=600,
        parameters={"target": "local", "server_port": real_runs["port"], "lab_launch": "", "requests": 2,
                    "max_tokens": 16, "baseline_tok_s": 0.0, "prometheus_url": real_runs["prom"].url,
                    "timeline_since": "30m"})
    cells = json.loads(out.read_text())["cells"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    figures = [o["data"]["application/vnd.plotly.v1+json"] for o in outputs
               if "application/vnd.plotly.v1+json" in o.get("data", {})]
    fig = next(f for f in figures if (f["layout"].get("title") or {}).get("text") == "What the server did")
    traces = {t["name"].split(" [")[0] + " [" + t["name"].split(" [")[1].split("]")[0] + "]": t for t in fig["data"]}
    for label in ("gen throughput (tok/s)", "queued requests", "running requests", "token usage"):
        assert f"{label} [prometheus]" in traces, sorted(traces)  # "[prometheus] <labels>" when the log adds a series
    # The queue the crowded launch built, as plotted, against what Prometheus itself holds for the server
    # (its stored name, asked directly): 8 were sent at once, and at least one ran.
    plotted = max(_values(traces["queued requests [prometheus]"]["y"]))
    query = f'max_over_time(sglang_num_queue_reqs{{instance="127.0.0.1:{real_runs["port"]}"}}[30m])'
    held = float(real_runs["prom"].get("/api/v1/query?" + urllib.parse.urlencode({"query": query}))
                 ["data"]["result"][0]["value"][1])
    assert 1 <= plotted <= held <= 8 - 1
    text = "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "missing: sglang:spec_accept_length" in text  # the CPU server runs no speculative decoding: named
    assert "queue-time-measured" in text  # the runtime rules' findings over the same span
    (tmp_path.parent / "01_symptom_real_prometheus.ipynb").write_bytes(out.read_bytes())


# ---------------------------------------------------------------------------- a case keeps the series


def test_a_capture_with_prometheus_keeps_the_series_and_replays_them_offline(real_runs, tmp_path, monkeypatch):
    """`sgl-kit capture --prometheus`: the series the runtime rules read are kept in the case, and the replay
    reads them there (no network connection at all), to the same answer."""
    import json
    import socket

    import kit
    from kit.case import compare_case

    result = kit.capture("local", tmp_path / "case", port=int(real_runs["port"]), prometheus=real_runs["prom"].url,
                         since="15m", interval=0)
    assert "prometheus.json" in result.files, result.missing
    kept = json.loads((tmp_path / "case" / "prometheus.json").read_text())
    assert kept["queue_time_sum"]["status"] == "measured" and kept["span"].get("kind") != "page"
    recorded = json.loads((tmp_path / "case" / "findings.json").read_text())
    assert recorded["sources"]["runtime"].startswith(f"Prometheus at {real_runs['prom'].url}")
    connect = socket.socket.connect

    def refuse(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"the replay opened a network connection: {address}")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    diagnosis, diff = compare_case(tmp_path / "case")
    assert not diff.differs, diff.to_text()
    assert diagnosis.to_dict()["sources"]["runtime"] == "the Prometheus series kept in prometheus.json"
    assert {r["id"] for r in recorded["findings"]} == {f.id for f in diagnosis.findings}
