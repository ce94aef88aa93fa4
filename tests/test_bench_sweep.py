"""Sweeps, goodput and the comparison of two sweeps, against the lab's app over real HTTP on loopback.

The lab's engine gives each launch its speed from the incident's throughput model: the launch "old"
(three draft steps) decodes faster per request than "new" (one), and more concurrency lowers the rate per
request a little while raising the total, so a sweep of each shows what a sweep must show.
"""

from __future__ import annotations

import json

import pytest
from _lab_support import AppServer, app_server, variant_fields
from hypothesis import given
from hypothesis import strategies as st

import kit
from kit.bench import (
    BenchConfig,
    BenchError,
    BenchRun,
    RequestResult,
    Sweep,
    compare_sweeps,
    goodput,
    parse_slo,
    sweep,
)
from kit.cli import main

LEVELS = [1, 2, 4]
SMALL = {"requests": 4, "max_tokens": 16}


def _url(server: AppServer) -> str:
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """One sweep of each launch, concurrency 1, 2, 4; the lines each announced."""
    said: list[str] = []
    out = {}
    for variant in ("new", "old"):
        with app_server(variant_fields(variant)) as server:
            out[variant] = sweep(_url(server), LEVELS, out_dir=tmp_path_factory.mktemp(f"sweep-{variant}"),
                                 progress=said.append if variant == "new" else None, label=variant,
                                 slo="ttft=10s,itl=1s", **SMALL)
    return out, said


def test_a_sweep_raises_the_total_not_the_rate_per_request(sweeps):
    found, said = sweeps
    new = found["new"]
    assert said == [f"concurrency {c}: {n} of 3 (4 requests)" for n, c in enumerate(LEVELS, 1)]
    assert new.concurrencies == LEVELS and all(p.ok == p.requests == 4 for p in new.points)
    totals = [p.total_tok_s for p in new.points]
    rates = [p.per_request_tok_s for p in new.points]
    assert totals == sorted(totals) and totals[-1] > 2.5 * totals[0], totals  # four streams against one
    assert all(rate <= rates[0] * 1.05 for rate in rates), rates  # the rate one user sees does not rise
    for p in new.points:
        run = new.run(p)
        assert run.config.concurrency == p.concurrency and run.totals["ok"] == 4
        assert p.total_tok_s == pytest.approx(run.totals["output_tokens"] / run.duration_s)
        assert p.ttft_mean_ms <= p.ttft_p90_ms * 1.0001 and p.goodput == 1.0
        assert (new.dir / p.run).is_file() and p.run == f"c{p.concurrency}.jsonl"  # relative to the manifest
    assert "per-request tok/s" in new.to_text() and "<table" in new._repr_html_()


def test_the_manifest_round_trips(sweeps):
    new = sweeps[0]["new"]
    record = json.loads(new.manifest.read_text())
    assert record["kind"] == "sweep" and record["slo"] == "ttft=10s,itl=1s" and record["stopped"] is None
    assert [p["run"] for p in record["points"]] == ["c1.jsonl", "c2.jsonl", "c4.jsonl"]
    for where in (new.dir, new.manifest, str(new.dir)):
        again = Sweep.load(where)
        assert again.to_dict() == new.to_dict() and again.to_text() == new.to_text()
    assert Sweep.load(new.dir).max_load().concurrency == 4
    with pytest.raises(BenchError, match="no sweep manifest") as err:
        Sweep.load(new.dir / "nowhere")
    assert "sgl-kit bench sweep" in err.value.hint


def test_compare_sweeps_names_the_faster_launch_and_a_sweep_does_not_dominate_itself(sweeps, tmp_path):
    found = sweeps[0]
    faster = compare_sweeps(found["new"], found["old"].dir)
    assert faster.dominates == "B" and faster.front_dominates == "B"
    assert faster.headline == ("B dominates A at every concurrency measured (1, 2, 4): more total tok/s and more "
                               "per-request tok/s")
    assert all(v.total == 1 and v.per_request == 1 for v in faster.levels)
    assert compare_sweeps(found["old"], found["new"]).headline.startswith("A dominates B at every concurrency")
    same = compare_sweeps(found["new"], found["new"])
    assert same.dominates is None and same.front_dominates is None
    assert same.headline.startswith("neither dominates") and "the two Pareto fronts match" in same.to_text()
    assert [p.concurrency for p in faster.front_b] == LEVELS  # each level trades rate for total: all on the front
    page = faster.save_html(tmp_path / "cmp.html")
    text = page.read_text()
    assert "plotly" in text and "B dominates A" in text
    assert 'src="https://cdn.plot.ly' not in text and len(text) > 1_000_000  # plotly.js inlined: opens offline
    fig = faster.plot()
    assert len(fig.layout.annotations) >= 2  # the two panels' titles
    labels = [t for trace in fig.data if trace.text is not None for t in trace.text]
    assert "c=4" in labels
    assert json.loads(json.dumps(faster.to_dict()))["dominates"] == "B" and "<br>" in faster._repr_html_()


def test_max_load_is_the_highest_concurrency_within_the_slo_or_none_with_why(sweeps):
    new = sweeps[0]["new"]
    loose = new.max_load("ttft=10s")
    assert loose.concurrency == 4 and "sweep further" in loose.why
    none = new.max_load("ttft=1ms", fraction=0.5)
    assert none.concurrency is None and "no concurrency measured meets ttft<=1ms" in none.why
    plain = Sweep.load(new.dir)
    plain.slo = None
    with pytest.raises(BenchError, match="without an SLO"):
        plain.max_load()


def test_a_point_that_fails_stops_the_sweep_and_the_manifest_keeps_what_finished(tmp_path):
    with app_server(variant_fields("new")) as server:
        def down_at_two(line: str) -> None:
            if line.startswith("concurrency 2:"):
                server.app.up = False  # the lab answers 503, as a server that is shutting down

        with pytest.raises(BenchError) as err:
            sweep(_url(server), LEVELS, out_dir=tmp_path / "a", progress=down_at_two, requests=3, max_tokens=8)
        assert "the sweep stopped at concurrency 2 (2 of 3)" in err.value.message
        assert "finished: concurrency 1" in err.value.hint
        kept = Sweep.load(tmp_path / "a")
        assert kept.concurrencies == [1] and kept.stopped.startswith("concurrency 2 (2 of 3)")
        # without a warmup, every request fails: the point is not a measurement, and the sweep says so
        with pytest.raises(BenchError, match=r"all 3 requests failed \(http x3\)") as err:
            sweep(_url(server), [1, 2], out_dir=tmp_path / "b", progress=None, requests=3, warmup=0)
        assert "no point finished" in err.value.hint and Sweep.load(tmp_path / "b").points == []


# -- goodput -----------------------------------------------------------------------------


def _result(i: int, ok: bool = True, ttft: float | None = None, itl: float | None = None,
            e2e: float | None = None) -> RequestResult:
    return RequestResult(i, ok=ok, ttft_s=ttft, itl_token_ms=itl, e2e_s=e2e, error_kind=None if ok else "http")


def _run(results, duration: float | None = 4.0) -> BenchRun:
    return BenchRun(BenchConfig(), "http://127.0.0.1:1", list(results), duration_s=duration)


HAND = [
    _result(0, ttft=0.200, itl=30, e2e=0.8),  # meets both
    _result(1, ttft=0.700, itl=20, e2e=1.1),  # time to first token over 500 ms
    _result(2, ttft=0.300, itl=60, e2e=1.3),  # latency between tokens over 50 ms
    _result(3, ttft=None, itl=None, e2e=0.9),  # succeeded without a first token or a decode: not measured
    _result(4, ok=False),  # failed: never good
    _result(5, ttft=0.100, itl=10, e2e=0.4),  # meets both
]


def test_goodput_counted_by_hand(tmp_path):
    g = goodput(_run(HAND), "ttft=500ms,itl=50ms")
    assert (g.requests, g.good, g.failed) == (6, 2, 1)
    assert g.fraction == pytest.approx(2 / 6) and g.per_s == pytest.approx(2 / 4.0)
    assert g.misses == {"ttft": 1, "itl": 1} and g.unmeasured == {"ttft": 1, "itl": 1}
    assert g.line() == ("goodput (ttft<=500ms, itl<=50ms): 2 of 6 requests met every objective (33.3%), 0.5 good "
                        "requests/s over 4.00 s; missed: ttft over 1, itl over 1, ttft not measured 1, itl not "
                        "measured 1, failed 1")
    assert "as in AIPerf" in g.to_text() and g.to_dict()["fraction"] == pytest.approx(1 / 3)
    # e2e alone: requests 0, 3 and 5 finish within a second; 1 and 2 do not; 4 failed
    e2e = goodput(_run(HAND), "e2e=1s")
    assert (e2e.good, e2e.misses, e2e.unmeasured) == (3, {"e2e": 2}, {"e2e": 0})
    # the same from the run file, and a run that did not finish has no rate
    path = _run(HAND).to_jsonl(tmp_path / "hand.jsonl")
    assert goodput(path, "ttft=500ms,itl=50ms").good == 2
    unfinished = goodput(_run(HAND, duration=None), "ttft=500ms")
    assert unfinished.per_s is None and "did not finish" in unfinished.line()
    assert goodput(_run([]), "ttft=1s").fraction is None
    assert kit.goodput is goodput and "<div>" in g._repr_html_()


@pytest.mark.parametrize("text, spec", [
    ("ttft=500ms,itl=50ms", "ttft=500ms,itl=50ms"),
    (" TTFT = 0.5s , e2e=2s ", "ttft=500ms,e2e=2s"),
    ("itl:50ms,ttft:1.5s", "ttft=1.5s,itl=50ms"),
    ({"e2e": "3s"}, "e2e=3s"),
])
def test_parse_slo_reads_the_accepted_forms(text, spec):
    slo = parse_slo(text)
    assert slo.spec == spec and parse_slo(slo.spec) == slo


@pytest.mark.parametrize("text, message", [
    ("ttf=5", "unknown SLO key 'ttf' in 'ttf=5' (did you mean ttft?)"),
    ("ttft=fast", "cannot read the ttft limit 'fast' in the SLO 'ttft=fast': it is not a number with ms or s"),
    ("ttft=500", "it has no unit"),
    ("ttft=0ms", "must be above zero"),
    ("ttft=1s,ttft=2s", "ttft is given twice"),
    ("ttft", "it is not KEY=VALUE"),
    ("", "no SLO"),
])
def test_a_typo_in_the_slo_names_what_was_tried_and_the_form(text, message):
    with pytest.raises(BenchError) as err:
        parse_slo(text)
    assert message in err.value.message
    assert "ttft=500ms,itl=50ms" in err.value.hint and "ms or s" in err.value.hint


maybe = st.one_of(st.none(), st.floats(0.001, 5.0))
results = st.lists(st.builds(lambda ok, t, i, e: (ok, t, i, e), st.booleans(), maybe, maybe, maybe), max_size=40)
limits = st.floats(0.005, 5.0)


def _from(rows) -> BenchRun:
    return _run([_result(n, ok=ok, ttft=t, itl=None if i is None else i * 1e3, e2e=e) for n, (ok, t, i, e) in
                 enumerate(rows)])


@given(results, limits, limits, st.floats(0.01, 1.0))
def test_tightening_an_slo_never_raises_its_goodput(rows, ttft, itl, factor):
    run = _from(rows)
    loose = parse_slo({"ttft": f"{ttft}s", "itl": f"{itl}s"})
    g = goodput(run, loose)
    for key in ("ttft", "itl"):
        assert goodput(run, loose.tightened(key, factor)).good <= g.good
    assert goodput(run, parse_slo({"ttft": f"{ttft}s", "itl": f"{itl}s", "e2e": "1s"})).good <= g.good
    assert goodput(run, parse_slo({"ttft": f"{ttft}s"})).good >= g.good  # one objective fewer
    assert 0 <= g.good <= len(rows) - g.failed
    if rows:
        assert 0.0 <= g.fraction <= 1.0


@given(results, limits)
def test_a_failed_request_is_never_good(rows, ttft):
    run = _from(rows)
    before = goodput(run, {"ttft": f"{ttft}s"})
    for r in run.results:
        r.ok = False
    after = goodput(run, {"ttft": f"{ttft}s"})
    assert after.good == 0 and after.failed == len(rows) and after.good <= before.good


# -- the command line -------------------------------------------------------------------


def test_sgl_kit_bench_sweep_against_the_lab(tmp_path, capsys):
    with app_server(variant_fields("new")) as server:
        argv = ["bench", "sweep", _url(server), "--concurrency", "1,2", "--requests", "3", "--max-tokens", "8",
                "--warmup", "0", "--out", str(tmp_path / "s"), "--slo", "ttft=10s,itl=1s"]
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert "sweep: concurrency 1: 1 of 2 (3 requests)" in err and "sweep: concurrency 2: 2 of 2" in err
        assert "per-request tok/s" in out and "goodput" in out
        assert "most load within the SLO: concurrency 2 is the highest measured" in out
        assert (tmp_path / "s" / "sweep.json").is_file()
        assert main([*argv[:-6], "--out", str(tmp_path / "j"), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert [p["concurrency"] for p in data["sweep"]["points"]] == [1, 2] and data["max_load"] is None
        # a plain bench with --slo prints its goodput too
        assert main(["bench", _url(server), "-n", "3", "--max-tokens", "8", "--warmup", "0", "--out",
                     str(tmp_path / "one.jsonl"), "--slo", "ttft=10s"]) == 0
        assert "goodput (ttft<=10s): 3 of 3 requests met every objective (100.0%)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["bench", "sweep", "http://127.0.0.1:1", "--slo", "ttf=5"], "unknown SLO key 'ttf'"),
    (["bench", "http://127.0.0.1:1", "--slo", "ttft=fast"], "it is not a number with ms or s"),
    (["bench", "http://127.0.0.1:1", "-c", "1,2"], "a plain bench runs at one concurrency, not 1,2"),
    (["bench", "sweep"], "sweep takes one target, got 0"),
    (["bench", "sweep", "http://127.0.0.1:1", "--slo", "ttft=1s", "--slo-fraction", "2"], "--slo-fraction"),
])
def test_cli_errors_exit_2_and_say_what_to_do(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "->" in err


def test_a_concurrency_that_is_no_number_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "sweep", "http://127.0.0.1:1", "-c", "1,two"])
    assert done.value.code == 2 and "is not a positive integer or a comma list" in capsys.readouterr().err


def test_bench_compare_of_two_sweeps_prints_the_dominance_and_writes_the_plot(sweeps, capsys):
    from kit.cli.bench_sweep import is_sweep

    found = sweeps[0]
    new, old = found["new"], found["old"]
    assert is_sweep(new.dir) and is_sweep(new.manifest) and not is_sweep(new.dir / "c1.jsonl")
    assert main(["bench", "compare", str(new.dir), str(old.dir)]) == 0
    out = capsys.readouterr().out
    assert "B dominates A at every concurrency measured (1, 2, 4)" in out
    page = old.dir / "compare-new-vs-old.html"
    assert f"the plot (self-contained HTML): {page}" in out
    assert page.is_file() and "plotly" in page.read_text()


def test_the_new_verbs_are_public_and_their_results_render_in_a_notebook():
    from kit.bench import Goodput, MaxLoad, SweepComparison

    assert {"sweep", "compare_sweeps", "goodput", "Sweep", "SweepComparison", "Goodput"} <= set(kit.__all__)
    assert kit.sweep is sweep and kit.compare_sweeps is compare_sweeps and kit.Sweep is Sweep
    for cls in (Sweep, SweepComparison, Goodput, MaxLoad):
        assert callable(getattr(cls, "_repr_html_", None)) and callable(getattr(cls, "to_text", None)), cls
