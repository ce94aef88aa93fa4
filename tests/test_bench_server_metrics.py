"""A bench run keeps the server's own ``/metrics`` pages beside its requests (kit/bench/server_pages.py).

Against the stand-in lab's HTTP app (tests/_lab_support.py), which serves sglang 0.5.11's ``/generate`` and,
with ``enable_metrics`` (sglang's ``--enable-metrics``), its Prometheus page with ``sglang:num_requests_total``
counted as each request finishes; without it, ``/metrics`` answers 404 as sglang does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _lab_support import app_server, request, variant_fields

from kit.bench import BenchConfig, BenchError, BenchRun, bench
from kit.bench.server_pages import MAX_PAGES, ServerPages, mask_labels
from kit.metrics import parse_metrics_text

HINT = "start the server with --enable-metrics to record its side"
DATA = Path(__file__).resolve().parent / "data" / "real_server" / "bench-native-cpu-0.5.11.jsonl"


@pytest.fixture(scope="module")
def lab():
    with app_server(variant_fields("new", enable_metrics=True)) as server:
        yield server


def _url(server) -> str:
    return f"http://127.0.0.1:{server.port}"


def _records(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _served(text: str) -> float:
    page = parse_metrics_text(text)
    return float(page[page["sample"] == "sglang:num_requests_total"]["value"].sum())


def _run(server, tmp_path, name="run", **options) -> BenchRun:
    options = {"requests": 4, "concurrency": 2, "max_tokens": 8, "warmup": 1, **options}
    return bench(_url(server), out=tmp_path / f"{name}.jsonl", progress=None, **options)


def test_pages_bracket_the_requests_and_count_them(lab, tmp_path):
    before = _served(request(lab.port, "GET", "/metrics")[2].decode())
    run = _run(lab, tmp_path, server_metrics_interval=0.2)
    assert run.totals["ok"] == 4
    pages = run.server_pages
    assert len(pages) >= 2 and [at for at, _ in pages] == sorted(at for at, _ in pages)
    # the first page before the first request was sent, the last after the last one had finished
    sent = [run.clock_origin_at + r.start_s for r in run.results]
    done = [run.clock_origin_at + r.start_s + r.e2e_s for r in run.results]
    assert pages[0][0] < min(sent) and pages[-1][0] > max(done)
    # the server's count between them is the run's requests; the warmup went through before the first page
    assert _served(pages[-1][1]) - _served(pages[0][1]) == 4
    assert _served(pages[0][1]) == before + 1
    # the file holds them in the order taken, after the requests, and reads back the same
    records = _records(run.path)
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "run" and kinds[-1] == "end" and "server_metrics_unavailable" not in kinds
    stored = [r for r in records if r["kind"] == "server_metrics"]
    assert [(r["at"], r["text"]) for r in stored] == pages
    assert set(stored[0]) == {"kind", "at", "text"} and records[-1]["server_metrics_failures"] == 0
    again = BenchRun.load(run.path)
    assert again.server_pages == pages and again.server_metrics_problem is None
    assert again.clock_origin_at == run.clock_origin_at
    line = next(n for n in run.notes() if n.startswith("server /metrics:"))
    assert line == f"server /metrics: {len(pages)} pages over {pages[-1][0] - pages[0][0]:.1f} s (every 0.2 s)"
    assert line in run.to_text() and line in again.to_text() and "server /metrics:" in again._repr_html_()
    # and a run written whole (to_jsonl) keeps them too
    copy = BenchRun.load(again.to_jsonl(tmp_path / "copy.jsonl"))
    assert copy.server_pages == pages and copy.notes() == again.notes()


def test_a_server_without_metrics_is_one_line_and_the_run_goes_on(tmp_path):
    with app_server(variant_fields("new")) as server:  # no --enable-metrics: /metrics is 404
        run = _run(server, tmp_path, requests=3, server_metrics_interval=0.1)
    assert run.totals["ok"] == 3 and run.totals["finished"]
    why = f"GET {_url(server)}/metrics: HTTP 404 Not Found; {HINT}"
    assert run.server_metrics_problem == why and run.server_pages == []
    assert [n for n in run.notes() if "/metrics" in n] == [f"server /metrics: {why}"]
    records = _records(run.path)
    assert [r for r in records if r["kind"].startswith("server_metrics")] == [
        {"kind": "server_metrics_unavailable", "why": why}]
    assert records[-2] == {"kind": "server_metrics_unavailable", "why": why}  # after the requests, before the end
    assert records[-1]["server_metrics_failures"] == 1  # the first read failed: no more were tried
    again = BenchRun.load(run.path)
    assert again.server_metrics_problem == why and again.server_pages == [] and f"server /metrics: {why}" in again.to_text()


def test_a_later_failure_is_counted_once_and_the_pages_before_it_kept(tmp_path):
    with app_server(variant_fields("new", enable_metrics=True)) as server:
        def progress(result):  # the server stops serving its page once the first request finished
            server.app.fields["enable_metrics"] = False

        run = bench(_url(server), out=tmp_path / "cut.jsonl", progress=progress, requests=4, concurrency=1,
                    max_tokens=8, warmup=0, server_metrics_interval=0.05)
    assert run.totals["ok"] == 4
    assert len(run.server_pages) >= 1 and run.server_metrics_failures >= 2  # a read during the run, and the last
    assert run.server_metrics_problem.startswith(f"GET {_url(server)}/metrics: HTTP 404 Not Found; ")
    assert "read before it are kept" in run.server_metrics_problem and HINT not in run.server_metrics_problem
    records = _records(run.path)
    assert sum(r["kind"] == "server_metrics_unavailable" for r in records) == 1
    assert records[-1]["server_metrics_failures"] == run.server_metrics_failures
    line = [n for n in run.notes() if n.startswith("server /metrics:")]
    assert len(line) == 1 and f"; {run.server_metrics_failures} reads failed, the first: GET " in line[0]
    assert BenchRun.load(run.path).server_metrics_failures == run.server_metrics_failures


def test_interval_zero_reads_nothing_and_says_nothing(lab, tmp_path):
    run = _run(lab, tmp_path, requests=2, server_metrics_interval=0)
    assert run.totals["ok"] == 2
    assert run.server_pages == [] and run.server_metrics_problem is None and run.server_metrics_failures == 0
    assert not any(r["kind"].startswith("server_metrics") for r in _records(run.path))
    assert "/metrics" not in run.to_text()


def test_an_old_run_file_reads_with_no_pages_and_no_line():
    run = BenchRun.load(DATA)  # written before the pages were kept
    assert run.results and run.server_pages == [] and run.server_metrics_problem is None
    assert run.clock_origin_at is None and "/metrics" not in run.to_text()


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "2", True])
def test_a_bad_interval_is_refused(bad):
    with pytest.raises(BenchError, match="server_metrics_interval must be 0 or more seconds"):
        BenchConfig(server_metrics_interval=bad)


def test_the_cap_keeps_the_first_and_the_last_evenly(lab):
    async def read() -> ServerPages:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            pages = ServerPages(session, _url(lab), 0.01, cap=6)
            await pages.first()
            first = pages.pages[0]
            pages.start()
            deadline = time.monotonic() + 60
            while pages.reads < 14 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            asked = time.time()
            await pages.finish()
            return pages, first, asked

    pages, first, asked = asyncio.run(read())
    assert pages.reads >= 15 and pages.failures == 0  # 14 and the last
    kept = pages.pages
    assert 2 <= len(kept) <= 6 and kept[0] == first and kept[-1][0] >= asked
    assert pages.every >= 0.01 * 4  # thinned at least twice (at the 7th and the 10th read): the spacing doubled
    assert [at for at, _ in kept] == sorted(at for at, _ in kept)
    assert MAX_PAGES == 200


def test_secret_named_label_values_are_masked_and_the_page_still_parses():
    page = ('# TYPE sglang:server_info gauge\nsglang:server_info{model="m",api_key="sk-abc\\"def",port="1"} 1.0\n'
            'sglang:num_requests_total{model="m"} 3.0\n')
    masked = mask_labels(page)
    assert "sk-abc" not in masked and 'api_key="<redacted>"' in masked and 'port="1"' in masked
    assert len(parse_metrics_text(masked)) == 2
    plain = 'sglang:num_requests_total{model_name="m",sort_key="x"} 3.0\n'
    assert mask_labels(plain) is plain


def test_the_command_line_prints_the_line(lab, tmp_path):
    out = tmp_path / "cli.jsonl"
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "bench", _url(lab), "--requests", "2", "--max-tokens", "6",
                           "--warmup", "0", "--out", str(out), "--server-metrics-interval", "0.5"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    pages = BenchRun.load(out).server_pages
    assert len(pages) >= 2
    assert f"server /metrics: {len(pages)} pages over " in proc.stdout and " s (every 0.5 s)" in proc.stdout


def test_ctrl_c_keeps_the_pages_read_so_far(lab, tmp_path):
    out = tmp_path / "cut.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "bench", _url(lab), "-n", "200", "--max-tokens", "8",
                             "--warmup", "0", "--out", str(out), "--server-metrics-interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count('"kind":"request"') < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    kept = BenchRun.load(out)
    assert not kept.totals["finished"] and 2 <= len(kept.results) < 200
    assert len(kept.server_pages) >= 1 and kept.server_pages[0][0] < kept.clock_origin_at


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_real_sglang_page_is_kept_and_counts_the_run(real_server, tmp_path):
    """PyPI's sglang 0.5.11 on CPU with --enable-metrics (tests/_real_server_support.py): its own page parses in
    full before the run, and its request counter moves by the run's requests between the first and last page."""
    run = bench(real_server.url, out=tmp_path / "real.jsonl", progress=None, requests=3, max_tokens=8, warmup=1,
                input_len=16, server_metrics_interval=0.5)
    assert run.totals["ok"] == 3 and run.server_metrics_problem is None, run.server_metrics_problem
    pages = run.server_pages
    assert len(pages) >= 2 and pages[0][0] < run.clock_origin_at + run.results[0].start_s
    assert _served(pages[-1][1]) - _served(pages[0][1]) == 3
    assert BenchRun.load(run.path).server_pages == pages
