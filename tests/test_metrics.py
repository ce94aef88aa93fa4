"""kit.metrics without Prometheus: the /metrics page, the names a release declares, the log as a series."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from _lab_support import app_server, request, variant_fields
from hypothesis import given
from hypothesis import strategies as st

from kit.errors import MetricsError, PrometheusUnreachable
from kit.metrics import (
    COLUMNS,
    Prometheus,
    declared_metrics,
    log_series,
    metric_names,
    parse_duration,
    parse_metrics_text,
    scrape,
    startup_times,
    timeline,
)
from kit.server_args import parse_log_all

DATA = Path(__file__).resolve().parent / "data"
DECODE_LINES = (DATA / "logs" / "decode_lines.txt").read_text()
JOURNALD = (DATA / "server_args" / "sglang-0.5.23-journald.log").read_text()


@pytest.fixture(scope="module")
def lab_page():
    with app_server(variant_fields("new", enable_metrics=True)) as server:
        status, _, body = request(server.port, "POST", "/generate",
                                  {"text": "hi", "sampling_params": {"max_new_tokens": 4}})
        assert status == 200, body
        yield server


def test_the_labs_page_parses_into_families_with_types(lab_page):
    page = scrape(f"http://127.0.0.1:{lab_page.port}/metrics")
    kinds = dict(zip(page["family"], page["type"], strict=True))
    assert kinds["sglang:gen_throughput"] == "gauge"
    assert kinds["sglang:time_to_first_token_seconds"] == "histogram"
    served = page[page["sample"] == "sglang:num_requests_total"]
    assert served["value"].tolist() == [1.0]  # the one request this module sent
    assert "tp_rank=0" in page[page["family"] == "sglang:num_queue_reqs"]["series"].iloc[0]


def test_every_family_the_lab_exports_is_declared_by_sglang_0_5_11(lab_page):
    page = scrape(f"http://127.0.0.1:{lab_page.port}")
    names = metric_names("0.5.11")
    undeclared = [f for f in set(page["family"]) if not (names.find(f) or names.find(f + "_total"))]
    assert undeclared == []


def test_a_page_that_is_not_the_exposition_format_is_a_clear_error():
    with pytest.raises(MetricsError) as err:
        parse_metrics_text("sglang:gen_throughput{tp_rank=0 12\n", source="box:30000/metrics")
    assert err.value.message.startswith("box:30000/metrics is not in Prometheus text format")
    assert "--enable-metrics" in err.value.hint


def test_a_server_without_enable_metrics_says_how_to_turn_it_on():
    with app_server(variant_fields("new")) as server, pytest.raises(MetricsError) as err:
        scrape(f"http://127.0.0.1:{server.port}")
    assert "HTTP 404" in err.value.message and "--enable-metrics" in err.value.hint


@pytest.mark.parametrize("version, path", [("0.4.6", "srt/metrics/collector.py"),
                                           ("0.5.11", "srt/observability/metrics_collector.py"),
                                           ("0.5.23", "srt/observability/metrics_collector.py")])
def test_the_names_come_from_the_collector_of_that_release_with_their_lines(sglang_source, version, path):
    from kit.hosts import LocalHost
    from kit.source import SourceTree

    tree = SourceTree.at(LocalHost(), sglang_source(version))
    names = declared_metrics(tree)
    assert names.files == [path]
    decl = names.find("sglang:gen_throughput")
    assert decl.kind == "gauge"
    file, line = decl.site.rsplit(":", 1)
    text = tree.read(path, int(line), int(line) + 2).text
    assert "Gauge(" in text and '"sglang:gen_throughput"' in text


def test_labelled_counters_and_what_an_old_release_lacks():
    new, old = metric_names("0.5.23"), metric_names("0.4.6")
    passes = new.find("sglang:cuda_graph_passes_total")
    assert passes.kind == "counter" and passes.labels == ("mode",) and passes.series == ("sglang:cuda_graph_passes_total",)
    assert new.find("sglang:time_to_first_token_seconds_bucket").kind == "histogram"
    assert old.missing("sglang:cuda_graph_passes_total") == (
        "sglang:cuda_graph_passes_total is not declared by sglang 0.4.6 (sglang/srt/metrics/collector.py read)")
    assert old.missing("sglang:gen_throughput") is None


def test_decode_and_prefill_lines_become_series_of_the_metrics_shape():
    frame = log_series(DECODE_LINES)
    assert tuple(frame.columns) == COLUMNS and set(frame["source"]) == {"log"}
    # Line 2 (issue 4759): `[2025-03-24 02:56:41 TP0] Decode batch. ... accept len: 2.54, gen throughput (token/s): 39.33`
    at = pd.Timestamp("2025-03-24 02:56:41", tz="UTC")
    row = frame[(frame["time"] == at) & (frame["metric"] == "sglang:spec_accept_length")]
    assert row["value"].tolist() == [2.54] and row["series"].tolist() == ["tp_rank=0"]
    assert frame[(frame["time"] == at) & (frame["metric"] == "sglang:gen_throughput")]["value"].tolist() == [39.33]
    # Line 1 is a Prefill batch line: its queue stays apart from the decode lines' queue.
    prefill = frame[frame["series"] == "kind=prefill,tp_rank=0"]
    assert prefill["metric"].tolist() == ["sglang:num_queue_reqs"]
    assert frame[frame["metric"] == "log:prefill_new_tokens"]["value"].tolist() == [128.0]
    # cuda graph: False/True (pull 13023) as 0/1.
    assert set(frame[frame["metric"] == "sglang:is_cuda_graph"]["value"]) == {0.0, 1.0}


def test_log_lines_without_a_time_are_counted_not_placed():
    line = "Decode batch, #running-req: 3, #token: 10, token usage: 0.10, gen throughput (token/s): 9.00, #queue-req: 0,"
    frame = log_series(line + "\n")
    assert len(frame) == 0 and frame.attrs["untimed"] == 1


def test_one_startup_logged_raw_then_resolved_is_one_startup_and_journald_times_get_a_year():
    starts = startup_times(parse_log_all(JOURNALD))
    assert [s.source for _, s in starts] == ["line 5", "line 8"]  # lines 2 and 5 are one startup (raw, resolved)
    assert all(s.stage == "resolved" for _, s in starts)
    year = pd.Timestamp.now(tz="UTC").year
    t0 = pd.Timestamp(starts[0][0], unit="s", tz="UTC")
    assert (t0.month, t0.day, t0.hour, t0.minute) == (5, 1, 10, 0) and t0.year in (year, year - 1)


def test_a_timeline_from_a_log_alone_marks_the_restart_and_what_the_launch_changed():
    t1 = startup_times(parse_log_all(JOURNALD))[1][0]
    tl = timeline(None, log_text=JOURNALD, since="3h", end=t1 + 3600)
    kinds = [r.kind for r in tl.restarts]
    assert kinds == ["start", "restart"]
    changes = {f: (a, b) for f, a, b in tl.restarts[1].launch_changes}
    assert changes["speculative_num_steps"] == (3, 1) and changes["speculative_num_draft_tokens"] == (4, 2)
    assert tl.restarts[1].version == ("0.5.23", "0.5.23")
    assert tl.version == "0.5.23"
    # No series at all: each panel's metric is named, none is drawn as zero.
    assert len(tl.frame) == 0 and set(tl.missing) == {"sglang:gen_throughput", "sglang:spec_accept_length",
                                                      "sglang:num_queue_reqs", "sglang:num_running_reqs",
                                                      "sglang:token_usage"}
    assert all("not a zero" in why for why in tl.missing.values())


def test_a_prometheus_url_without_a_scheme_is_refused_before_any_call():
    with pytest.raises(PrometheusUnreachable) as err:
        Prometheus("localhost:9090")
    assert "e.g. http://127.0.0.1:9090" in err.value.hint


@given(st.integers(0, 48), st.integers(0, 59), st.integers(0, 59))
def test_durations_add_up(h, m, s):
    text = "".join(f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (s, "s")) if n) or "0s"
    assert parse_duration(text) == h * 3600 + m * 60 + s


def test_a_duration_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a duration: '24 hours'"):
        parse_duration("24 hours")


def test_sgl_kit_metrics_compares_a_page_with_its_release(lab_page):
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "metrics", f"http://127.0.0.1:{lab_page.port}",
                           "--sglang", "0.5.11"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "sglang 0.5.11 declares" in out
    reported = out.split("reported: ", 1)[1].split("\n", 1)[0].split(", ")
    assert "sglang:gen_throughput" in reported
    not_reported = out.split("not zeros): ", 1)[1].split("\n", 1)[0].split(", ")
    assert "sglang:num_retracted_requests_total" in not_reported and "sglang:gen_throughput" not in not_reported
    assert "sglang:cuda_graph_passes_total" in reported  # the lab's stand-in count of passes by mode


def test_the_figure_of_an_empty_timeline_says_so_instead_of_failing():
    tl = timeline(None, log_text="no decode lines here\n", since="1h", end=1_796_083_200)
    fig = tl.figure()
    assert len(fig.data) == 0 and fig.layout.annotations[0].text == "no series in this span"


def test_the_figure_puts_each_metric_in_its_panel_and_the_log_dotted():
    frame = log_series(DECODE_LINES)
    from kit.display import metrics_timeline

    fig = metrics_timeline(frame, panels={"tok/s": "sglang:gen_throughput", "queue": "sglang:num_queue_reqs"})
    assert [a.text for a in fig.layout.annotations] == ["tok/s", "queue"]
    assert {t.line.dash for t in fig.data} == {"dot"}
    assert sum(len(t.x) for t in fig.data if t.yaxis == "y") == 6  # the six decode lines' throughput


def test_a_restart_onto_another_release_names_both_versions():
    docker = (DATA / "server_args" / "sglang-0.2.x-docker.log").read_text()
    both = docker + JOURNALD  # one box's history: a 0.2.9 container, later a 0.5.23 service
    starts = startup_times(parse_log_all(both))
    tl = timeline(None, log_text=both, since=starts[-1][0] - starts[0][0] + 3600, end=starts[-1][0] + 60)
    upgrade = next(r for r in tl.restarts if r.version and r.version[0] != r.version[1])
    assert upgrade.version == ("0.2.9", "0.5.23")
    assert "sglang 0.2.9 -> 0.5.23" in tl.to_text()
