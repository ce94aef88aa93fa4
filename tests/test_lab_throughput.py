"""The throughput model: calibration per launch variant, acceptance, load, prefill.

The args come from the dry-run's committed snapshots of the incident's launches, so these
tests check the speed the lab gives the arguments real sglang resolves.
"""

from __future__ import annotations

import random
import statistics

import pytest
from _lab_support import variant_fields

from kit.errors import KitError
from kit.lab.engine import Filler, PrefixCache, acceptance_table
from kit.lab.throughput import load_scenario, scenario_names, throughput_model


@pytest.fixture(scope="module")
def incident():
    return load_scenario("incident")


@pytest.mark.parametrize("variant", ["new", "old", "fixed"])
def test_single_stream_rate_is_inside_the_calibration_range(incident, variant):
    model = throughput_model(incident, variant_fields(variant))
    low, high = incident.calibration[variant]["tok_s"]
    assert low <= model.expected_tok_s(1) <= high


def test_the_variants_differ_for_the_incidents_reasons(incident):
    new, old, fixed = (throughput_model(incident, variant_fields(v)) for v in ("new", "old", "fixed"))
    assert (new.steps, old.steps, fixed.steps) == (1, 3, 3)
    assert not new.piecewise_cuda_graph and not old.piecewise_cuda_graph and fixed.piecewise_cuda_graph
    assert 2.7 < old.mean_tokens_per_round() < 3.0 and 1.7 < new.mean_tokens_per_round() < 2.0
    rng = random.Random(0)
    ttft_old = statistics.mean(old.prefill_time(rng, 1000, 1) for _ in range(2000))
    ttft_fixed = statistics.mean(fixed.prefill_time(rng, 1000, 1) for _ in range(2000))
    assert ttft_fixed / ttft_old == pytest.approx(incident.calibration["fixed"]["ttft_vs_old"], abs=0.03)


def test_the_fixed_rate_is_stated_as_an_assumption(incident):
    assert "ASSUMPTION" in incident.calibration["fixed"]["source"]
    assert "assumption" in incident.notice
    assert "incident" in incident.calibration["new"]["source"]


def test_rounds_carry_one_to_steps_plus_one_tokens_with_the_model_mean(incident):
    model = throughput_model(incident, variant_fields("old"))
    table = acceptance_table(model)
    assert set(table) == {1, 2, 3, 4} and len(table) == 4096
    assert statistics.mean(table) == pytest.approx(model.mean_tokens_per_round(), abs=1e-3)
    rng = random.Random(1)
    draws = [model.accepted(rng) for _ in range(20000)]
    assert min(draws) == 1 and max(draws) == 4
    assert statistics.mean(draws) == pytest.approx(model.mean_tokens_per_round(), abs=0.03)


def test_concurrency_lowers_the_rate_per_stream_but_raises_the_total(incident):
    model = throughput_model(incident, variant_fields("new"))
    per_stream = [model.expected_tok_s(n) for n in (1, 8, 32, 48)]
    totals = [n * model.expected_tok_s(n) for n in (1, 8, 32, 48)]
    assert per_stream == sorted(per_stream, reverse=True) and per_stream[-1] < per_stream[0] * 0.7
    assert totals == sorted(totals)
    assert model.max_running == 48  # the resolved max_running_requests of the incident's launch


def test_prefill_grows_with_the_tokens_not_in_the_cache(incident):
    model = throughput_model(incident, variant_fields("new"))
    assert model.prefill_time(random.Random(2), 4000, 1) > 2 * model.prefill_time(random.Random(2), 100, 1)


def test_jitter_keeps_the_mean(incident):
    model = throughput_model(incident, variant_fields("new"))
    rng = random.Random(3)
    mean = statistics.mean(model.round_time(rng, 1) for _ in range(20000))
    assert mean == pytest.approx(model.round_s, rel=0.005)


def test_without_speculative_decoding_every_step_is_one_token(incident):
    fields = variant_fields("new", speculative_algorithm=None)
    model = throughput_model(incident, fields)
    assert model.steps == 0 and set(acceptance_table(model)) == {1}
    assert model.round_s == pytest.approx(incident.params["decode"]["plain_decode_ms"]["cuda_graph"] / 1e3)


def test_unknown_scenario_names_the_known_ones():
    with pytest.raises(KitError) as err:
        load_scenario("no-such-scenario")
    assert "incident" in err.value.hint and "loadtest" in scenario_names()


def test_prefix_cache_counts_shared_prefixes_in_blocks():
    cache = PrefixCache(block=16)
    prompt = b"x" * 400  # 100 tokens at 4 bytes each
    assert cache.match_and_insert(prompt, 100) == 0
    assert cache.match_and_insert(prompt, 100) == 96
    assert cache.match_and_insert(prompt[:200] + b"y" * 200, 100) == 48
    cache.flush()
    assert cache.match_and_insert(prompt, 100) == 0


def test_filler_slices_agree_with_token_ids():
    filler = Filler(length=5000)
    text = filler.text(10, 20).decode()
    assert len(text.split()) == 10 and text.startswith(" ")
    assert [int(x) for x in filler.ids_json(10, 20).split(b",")] == filler.ids(10, 20)
    assert filler.text(5, 5) == b"" and filler.ids_json(5, 5) == b""
