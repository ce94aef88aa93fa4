"""kit.metrics.pages_facts and the doctor on the /metrics pages a bench run kept, on two run files the kit's
bench wrote against PyPI's real sglang 0.5.11 on CPU (tests/data/real_server/SOURCES.md): a default launch
under random prompts, and a launch with a 700-token KV pool under eight streams at once.

The expected numbers are read from the pages' raw exposition text with a regular expression, not with the
kit's parser, so a parsing or differencing mistake shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kit.doctor import doctor
from kit.errors import MetricsError
from kit.metrics import metric_names, pages_facts, parse_metrics_text

DATA = Path(__file__).parent / "data" / "real_server"
CLEAN = DATA / "bench-pages-clean-cpu-0.5.11.jsonl"
POOL = DATA / "bench-pages-kvpool700-cpu-0.5.11.jsonl"


def _raw(path: Path) -> list[tuple[float, str]]:
    return [(r["at"], r["text"]) for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "server_metrics"]


def _sum(text: str, sample: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{re.escape(sample)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _facts(path: Path, names="0.5.11") -> dict:
    pages = [(at, parse_metrics_text(text)) for at, text in _raw(path)]
    return pages_facts(pages, source=path.name, names=metric_names(names) if names else None)


@pytest.mark.parametrize("path", [CLEAN, POOL], ids=["clean", "kv-pool"])
def test_counters_are_what_the_server_counted_between_the_first_and_last_page(path):
    raw, facts = _raw(path), _facts(path)
    for key, sample in (("prompt_tokens", "sglang:prompt_tokens_total"), ("queue_time_count", "sglang:queue_time_seconds_count")):
        want = _sum(raw[-1][1], sample) - _sum(raw[0][1], sample)
        assert want > 0 and sum(facts[key]["values"].values()) == pytest.approx(want), key
        assert facts[key]["sampled"] is False
    span = facts["span"]
    assert span["kind"] == "pages" and span["pages"] == len(raw)
    assert span["seconds"] == pytest.approx(raw[-1][0] - raw[0][0])


def test_gauges_are_the_most_any_page_showed_and_say_they_were_sampled():
    raw, facts = _raw(POOL), _facts(POOL)
    peak = max(_sum(text, "sglang:token_usage") for _, text in raw)
    assert peak > 0.5  # the 700-token pool under eight streams filled
    assert max(facts["token_usage_max"]["values"].values()) == pytest.approx(peak)
    assert facts["token_usage_max"]["sampled"] is True
    retracted = _sum(raw[-1][1], "sglang:num_retracted_requests_total") - _sum(raw[0][1], "sglang:num_retracted_requests_total")
    got = facts["retracted_requests"]
    assert (sum(got["values"].values()) if got["status"] == "measured" else 0) == pytest.approx(retracted)


def test_a_labelled_counter_the_version_declares_and_never_counted_is_zero_not_unknown():
    """sglang 0.5.11 counts cached tokens only when a request had some, under a cache_source label
    (srt/observability/metrics_collector.py:1407), so a run with no hit has no series at all."""
    raw = _raw(CLEAN)
    assert not any("sglang:cached_tokens_total{" in text for _, text in raw)
    assert _sum(raw[-1][1], "sglang:prompt_tokens_total") > _sum(raw[0][1], "sglang:prompt_tokens_total")
    known = _facts(CLEAN)["cached_tokens"]
    assert known["status"] == "measured" and known["values"] == {} and "none was counted" in known["none"]
    assert known["site"].startswith("sglang/srt/observability/metrics_collector.py:")
    # without the version's declarations the kit cannot tell "never counted" from "not reported"
    unknown = _facts(CLEAN, names=None)["cached_tokens"]
    assert unknown["status"] == "no series" and "not a zero" in unknown["why"]


def test_one_page_counts_the_never_counted_labelled_counter_as_zero_too():
    from kit.metrics import page_facts

    at, text = _raw(CLEAN)[-1]
    one = page_facts(parse_metrics_text(text), source="the last page", names=metric_names("0.5.11"), at=at)
    assert one["cached_tokens"]["values"] == {} and "none was counted" in one["cached_tokens"]["none"]
    assert one["prompt_tokens"]["values"] == {"": _sum(text, "sglang:prompt_tokens_total")}
    assert page_facts(parse_metrics_text(text), names=None, at=at)["cached_tokens"]["status"] == "no series"


def test_one_page_is_not_a_span():
    (at, text), *_ = _raw(CLEAN)
    with pytest.raises(MetricsError, match="two /metrics pages or more") as err:
        pages_facts([(at, parse_metrics_text(text))])
    assert "page_facts" in err.value.hint


def test_the_doctor_on_a_bench_run_alone_sets_a_low_hit_rate_apart_when_the_prompts_share_nothing():
    d = doctor(bench=str(CLEAN), sglang="0.5.11")
    assert "scrapes of http://127.0.0.1:52497/metrics kept by the bench run" in d.sources["runtime"]
    assert not any(f.id in ("prefix-cache-hit-low", "radix-cache-off") for f in d.findings)
    apart = next(f for f in d.not_applicable if f.id == "prefix-cache-hit-low")
    assert "the workload's prompts share 0%" in apart.not_here and "0% came from the cache" in apart.not_here
    text = d.to_text()
    assert text.index("the answer:") < text.index("the load seen:") < text.index("the findings:")
    assert any("sent 6 requests, 1 at once" in line for line in d.load_seen), d.load_seen


def test_the_doctor_on_a_full_pool_names_the_pool_and_its_numbers():
    """Only the run file: no launch, so the pool's size is not known, but its use and the retractions are."""
    d = doctor(bench=str(POOL), sglang="0.5.11")
    raw = _raw(POOL)
    peak = max(_sum(text, "sglang:token_usage") for _, text in raw)
    retracted = _sum(raw[-1][1], "sglang:num_retracted_requests_total") - _sum(raw[0][1], "sglang:num_retracted_requests_total")
    a = d.answer
    assert a.verdict == "cause found" and a.problem_class.startswith("capacity")
    assert "the limit that holds is the KV pool" in a.strongest_signal
    assert f"token usage reached {peak:.2f}" in a.strongest_signal
    assert f"{retracted:g} requests were retracted" in a.strongest_signal
    assert "the load sent 8 at once" in a.strongest_signal
    assert "--max-total-tokens" in a.next_step and "memory" in a.risk
    data = json.loads(json.dumps(d.to_dict()))
    assert list(data["answer"])[:3] == ["verdict", "problem_class", "strongest_signal"]


def test_a_bench_run_shows_the_servers_numbers_beside_the_clients():
    from kit.bench import BenchRun

    run, raw = BenchRun.load(str(POOL)), _raw(POOL)
    side = {what: (server, client) for what, server, client in run.server_side()}

    def delta(sample: str) -> float:
        return _sum(raw[-1][1], sample) - _sum(raw[0][1], sample)

    prompt = delta("sglang:prompt_tokens_total")
    assert side["prompt tokens"][0] == f"{prompt:g}"
    # the server's count and the one its replies gave the client agree: the same 16 requests
    assert side["prompt tokens"][1] == f"{sum(r.prompt_tokens for r in run.results)} counted by the server's replies"
    assert side["requests"] == (f"{delta('sglang:queue_time_seconds_count'):g} through the queue", "16 ok of 16, 8 at once")
    waited = delta("sglang:queue_time_seconds_sum") / delta("sglang:queue_time_seconds_count")
    assert side["mean queue time"][0] == f"{waited * 1e3:.1f} ms"
    assert side["most KV token usage"][0] == f"{max(_sum(t, 'sglang:token_usage') for _, t in raw):g}"
    assert side["requests retracted"][0] == f"{delta('sglang:num_retracted_requests_total'):g}"
    text = run.to_text()
    assert "the server's side of the same minutes" in text and text.index("server /metrics:") < text.index("the server's side")
    # a run without pages has no such block
    run.server_pages = []
    assert run.server_side() == [] and "the server's side" not in run.to_text()


def test_a_bench_run_that_is_not_one_is_refused_when_it_is_the_only_evidence(tmp_path):
    from kit.errors import UsageError

    notes = tmp_path / "notes.md"
    notes.write_text("# not a run file\n")
    with pytest.raises(UsageError) as err:
        doctor(bench=str(notes))
    assert str(notes) in err.value.message and "is not a bench run file" in err.value.message
    assert "sgl-kit bench" in err.value.hint
