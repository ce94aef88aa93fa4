"""kit.metrics against a real Prometheus (Debian's package) scraping the stand-in lab every second."""

from __future__ import annotations

import time

import pytest
from _lab_support import app_server, request, variant_fields
from _prometheus_support import free_port, start_prometheus

from kit.errors import PrometheusAuthRequired, PrometheusQueryError, PrometheusUnreachable
from kit.metrics import ENV_PASSWORD, ENV_TOKEN, ENV_USER, Prometheus, runtime_facts, scrape, timeline

pytestmark = pytest.mark.slow


def _generate(port: int, n: int) -> None:
    for i in range(n):
        status, _, body = request(port, "POST", "/generate",
                                  {"text": f"hello {i}", "sampling_params": {"max_new_tokens": 8}})
        assert status == 200, body


@pytest.fixture(scope="module")
def lab_app():
    with app_server(variant_fields("new", enable_metrics=True)) as server:
        yield server


@pytest.fixture(scope="module")
def prom(lab_app, tmp_path_factory):
    server = start_prometheus(tmp_path_factory.mktemp("prom"), [f"127.0.0.1:{lab_app.port}"])
    try:
        server.wait_for('up{job="sglang"} == 1')
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served(lab_app, prom):
    """Three requests served by the lab, and a scrape that saw them."""
    _generate(lab_app.port, 3)
    prom.wait_for("sglang:num_requests_total >= 3")
    return 3


def test_an_instant_query_returns_the_labs_series_with_its_labels(prom, lab_app, served):
    res = Prometheus(prom.url).instant("sglang:num_requests_total")
    assert list(res.frame.columns) == ["time", "metric", "series", "value", "source"]
    assert len(res.frame) == 1
    row = res.frame.iloc[0]
    assert row["metric"] == "sglang:num_requests_total"
    assert f"instance=127.0.0.1:{lab_app.port}" in row["series"] and "job=sglang" in row["series"]
    assert row["value"] >= served  # the requests this module sent (others may have run since)
    # The same number the server's own page says now, read by prometheus_client's parser.
    page = scrape(f"http://127.0.0.1:{lab_app.port}")
    now = page[page["sample"] == "sglang:num_requests_total"]["value"].iloc[0]
    assert row["value"] == now


def test_a_range_query_returns_one_point_per_step_inside_the_window(prom, served):
    prom.wait_for("count_over_time(sglang:gen_throughput[10s]) >= 9")
    end = time.time()
    res = Prometheus(prom.url).range("sglang:gen_throughput", end - 8, end, step=1)
    frame = res.frame
    assert set(frame["metric"]) == {"sglang:gen_throughput"}
    assert len(frame) >= 8  # scraped every second
    t = frame["time"].map(lambda x: x.timestamp())
    assert t.is_monotonic_increasing and t.min() >= end - 8 - 1e-3 and t.max() <= end + 1e-3
    assert (t.diff().dropna().round(3) == 1.0).all()


def test_a_missing_series_is_an_empty_answer_and_named_in_the_timeline_not_a_zero(prom, served):
    p = Prometheus(prom.url)
    assert p.instant('sglang:gen_throughput{tp_rank="7"}').empty
    tl = timeline(p, since="30s", step=1)
    # The lab runs MTP, so accept length is reported; a metric nobody reports stays out of the frame.
    assert "sglang:spec_accept_length" in set(tl.frame["metric"])
    facts = runtime_facts(p, since="30s")
    # The lab never retracts, and sglang creates the counter on the first retraction: no series, not 0.
    assert facts["retracted_requests"]["status"] == "no series"
    assert "not a zero" in facts["retracted_requests"]["why"]
    assert "values" not in facts["retracted_requests"]


def test_a_metric_this_release_does_not_declare_is_named_with_the_release(prom, served):
    from kit.metrics import metric_names

    old = metric_names("0.4.6")
    facts = runtime_facts(Prometheus(prom.url), since="30s", names=old)
    assert facts["graph_passes"]["status"] == "not declared"
    assert facts["graph_passes"]["why"] == ("sglang:cuda_graph_passes_total is not declared by sglang 0.4.6 "
                                            "(sglang/srt/metrics/collector.py read)")
    assert facts["retracted_requests"]["status"] == "not declared"
    # What 0.4.6 does declare is still measured.
    assert facts["queue_max"]["status"] == "measured"


def test_runtime_facts_measure_queue_and_cache_hits_from_the_labs_series(prom, lab_app, served):
    facts = runtime_facts(Prometheus(prom.url), since="60s")
    assert facts["queue_max"]["status"] == "measured"
    (series, value), = facts["queue_max"]["values"].items()
    assert f"instance=127.0.0.1:{lab_app.port}" in series and value >= 0
    hit = facts["cache_hit_rate"]
    assert hit["status"] == "measured" and all(0 <= v <= 1 for v in hit["values"].values())
    assert facts["accept_length_over_time"]["status"] == "measured"


def test_a_prometheus_that_is_down_is_a_clear_error_and_the_log_still_counts():
    port = free_port()  # nothing listens there
    p = Prometheus(f"http://127.0.0.1:{port}", timeout=3)
    with pytest.raises(PrometheusUnreachable) as err:
        p.instant("up")
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}: connection refused" in err.value.message
    assert "--prometheus URL" in err.value.hint
    log = ("[2026-11-30 19:04:16 TP0] Decode batch, #running-req: 1, #token: 140, token usage: 0.00, "
           "cuda graph: True, gen throughput (token/s): 31.93, #queue-req: 0, \n")
    tl = timeline(p, since="7d", end=1_796_083_200, log_text=log)
    assert any("connection refused" in problem for problem in tl.problems)
    thr = tl.frame[tl.frame["metric"] == "sglang:gen_throughput"]
    assert list(thr["value"]) == [31.93] and list(thr["source"]) == ["log"]


def test_a_url_that_is_not_prometheus_says_so(lab_app):
    with pytest.raises(PrometheusQueryError) as err:
        Prometheus(f"http://127.0.0.1:{lab_app.port}").instant("up")
    assert "HTTP 404" in err.value.message or "API JSON" in err.value.message


def test_a_bad_query_carries_prometheus_own_words(prom):
    with pytest.raises(PrometheusQueryError) as err:
        Prometheus(prom.url).instant("sum(")
    assert "bad_data" in err.value.message and "sum(" in err.value.hint


@pytest.fixture(scope="module")
def locked_prom(lab_app, tmp_path_factory):
    server = start_prometheus(tmp_path_factory.mktemp("prom-auth"), [f"127.0.0.1:{lab_app.port}"],
                              basic_auth=("kit", "s3cret-pass"))
    try:
        server.wait_for('up{job="sglang"} == 1')
        yield server
    finally:
        server.stop()


def test_basic_auth_from_the_environment_reaches_a_locked_prometheus(locked_prom):
    env = {ENV_USER: "kit", ENV_PASSWORD: "s3cret-pass"}
    res = Prometheus.from_env(locked_prom.url, env=env).instant('up{job="sglang"}')
    assert list(res.frame["value"]) == [1.0]


def test_a_locked_prometheus_without_credentials_says_which_variables_to_set(locked_prom):
    with pytest.raises(PrometheusAuthRequired) as err:
        Prometheus.from_env(locked_prom.url, env={}).instant("up")
    assert "needs authentication (HTTP 401) and none was given" in err.value.message
    assert ENV_USER in err.value.hint and ENV_TOKEN in err.value.hint and "environment only" in err.value.hint


@pytest.mark.parametrize("env, said", [
    ({ENV_USER: "kit", ENV_PASSWORD: "wrong"}, "refused basic auth as 'kit'"),
    ({ENV_TOKEN: "not-a-token"}, "refused a bearer token"),
])
def test_wrong_credentials_are_refused_by_name(locked_prom, env, said):
    with pytest.raises(PrometheusAuthRequired) as err:
        Prometheus.from_env(locked_prom.url, env=env).instant("up")
    assert said in err.value.message
    assert "wrong" not in err.value.message and "not-a-token" not in err.value.message  # no secret echoed


def test_the_timeline_with_a_locked_prometheus_keeps_the_log_and_names_the_problem(locked_prom):
    log = ("[2026-11-30 19:04:16 TP0] Decode batch, #running-req: 2, #token: 140, token usage: 0.01, "
           "gen throughput (token/s): 50.00, #queue-req: 1, \n")
    tl = timeline(Prometheus.from_env(locked_prom.url, env={}), since="1d", end=1_796_083_200, log_text=log)
    assert tl.problems and "needs authentication" in tl.problems[0]
    assert set(tl.frame["source"]) == {"log"}
    assert tl.segments["queued requests"].tolist() == [1.0]


def test_a_range_longer_than_prometheus_11000_point_limit_is_asked_in_pieces(prom, served):
    prom.wait_for('count_over_time(up{job="sglang"}[13s]) >= 12', timeout=40)
    end = time.time()
    res = Prometheus(prom.url).range("sglang:num_requests_total", end - 12, end, step=0.001)  # 12,001 steps
    t = res.frame["time"].map(lambda x: x.timestamp())
    assert len(res.frame) > 11000  # one query of this span would be refused ("exceeded maximum resolution")
    assert t.is_monotonic_increasing and t.is_unique
