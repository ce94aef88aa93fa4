"""The throughput model: calibration per launch variant, acceptance, load, prefill.

The args come from the dry-run's committed snapshots of the incident's launches, so these
tests check the speed the lab gives the arguments real sglang resolves.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

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


def test_the_variants_differ_for_the_incidents_reasons(incident, sglang_source):
    from kit.lab.throughput import prefill_replay

    config = json.loads((Path(__file__).resolve().parent.parent / "kit/data/lab/Qwen3.6-27B/config.json").read_text())
    models, chains = {}, {}
    for v in ("new", "old", "fixed", "nospec", "nospec_fixed"):
        replays, chains[v] = prefill_replay(sglang_source("0.5.11"), variant_fields(v), config)
        models[v] = throughput_model(incident, variant_fields(v), prefill_replays=replays)
    new, old, fixed = models["new"], models["old"], models["fixed"]
    assert (new.steps, old.steps, fixed.steps) == (1, 3, 3)
    assert not new.piecewise_cuda_graph and not old.piecewise_cuda_graph and fixed.piecewise_cuda_graph
    assert 2.6 < old.mean_tokens_per_round() < 2.8 and 1.7 < new.mean_tokens_per_round() < 1.8
    # sglang 0.5.11 runs verify in the decode graph, never in the piecewise one: the prefill graph leaves the
    # round alone ...
    assert fixed.round_s == old.round_s and fixed.expected_tok_s() == old.expected_tok_s()
    # ... and under EAGLE its gate refuses the target's prefill (read from the source, not set by the scenario):
    # the enforced graph is captured and never replayed, so prefill takes what it took without it
    assert chains["fixed"].blocking.where == "srt/model_executor/piecewise_cuda_graph_runner.py:454"
    assert fixed.prefill_graph_replays is False and not fixed.prefill_in_graph
    rng_a, rng_b = random.Random(0), random.Random(0)
    assert [fixed.prefill_time(rng_a, 1000, 1) for _ in range(50)] == [old.prefill_time(rng_b, 1000, 1)
                                                                       for _ in range(50)]
    # without speculative decoding nothing refuses a text request: the flag pays there, by the ASSUMED amount
    plain, plain_fixed = models["nospec"], models["nospec_fixed"]
    assert chains["nospec_fixed"].blocking is None and plain_fixed.prefill_in_graph and not plain.prefill_in_graph
    rng = random.Random(0)
    ttft = statistics.mean(plain.prefill_time(rng, 1000, 1) for _ in range(2000))
    ttft_fixed = statistics.mean(plain_fixed.prefill_time(rng, 1000, 1) for _ in range(2000))
    assert ttft_fixed < ttft
    assert ttft_fixed / ttft == pytest.approx(incident.calibration["nospec_fixed"]["ttft_vs_nospec"], abs=0.03)
    assert "ASSUMED" in incident.calibration["nospec_fixed"]["source"]


def test_no_launch_reaches_the_old_deployments_70_and_the_scenario_says_so(incident):
    best = max(throughput_model(incident, variant_fields(v)).expected_tok_s() for v in ("new", "old", "fixed"))
    assert best < 0.9 * incident.calibration["baseline"]["tok_s"]
    assert "unexplained" in incident.calibration["baseline"]["source"]


def test_the_assumptions_are_labelled_as_such(incident):
    assert "piecewise_cuda_graph_runner.py:454" in incident.calibration["fixed"]["source"]
    assert "assumption" in incident.notice
    assert "write-up" in incident.calibration["new"]["source"]
    text = open(incident.path).read()
    assert "decode log lines" not in text and "2.84" not in text  # no accept length the write-up does not have


def test_the_decode_graph_off_slows_every_round(incident):
    on = throughput_model(incident, variant_fields("old"))
    off = throughput_model(incident, variant_fields("old", disable_cuda_graph=True))
    assert off.round_s > on.round_s and not off.cuda_graph


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


def test_time_to_first_token_does_not_depend_on_the_step_count(incident):
    # sglang 0.5.11 streams the first token after the target prefill and the draft extend
    # (eagle_worker_v2.py:701-725), before any draft step of the first round: steps never enter it.
    one, three = (throughput_model(incident, variant_fields(v)) for v in ("new", "old"))
    assert (one.steps, three.steps) == (1, 3)
    assert one.prefill_time(random.Random(0), 142, 1) == pytest.approx(three.prefill_time(random.Random(0), 142, 1))


def test_the_draft_extend_adds_to_the_prefill_only_with_speculative_decoding(incident):
    fields = dict(variant_fields("old"))
    spec = throughput_model(incident, fields)
    plain = throughput_model(incident, {**fields, "speculative_algorithm": None})
    def at(model):
        return model.prefill_time(random.Random(0), 1000, 1)

    extra = at(spec) - at(plain)
    assert 0 < extra < 0.05 * at(plain)  # one draft layer against 64 target layers  # one draft layer against 64 target layers


def test_p2p_scenario_custom_all_reduce_follows_the_machine(monkeypatch):
    from kit.lab.throughput import MACHINE_ENV, custom_all_reduce_on

    p2p = load_scenario("p2p-pcie")
    fields = {"tp_size": 2, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
              "speculative_num_draft_tokens": 4}
    monkeypatch.delenv(MACHINE_ENV, raising=False)
    as_found = throughput_model(p2p, fields)
    assert not custom_all_reduce_on(p2p, fields)
    monkeypatch.setenv(MACHINE_ENV, "p2p-unavailable")
    fixed = throughput_model(p2p, fields)
    assert custom_all_reduce_on(p2p, fields) and fixed.round_s < as_found.round_s
    gain = fixed.expected_tok_s() / as_found.expected_tok_s() - 1
    low, high = p2p.calibration["fixed_machine"]["gain"]  # club-3090 PR #928's measured 2x3090 range
    assert low < gain < high
    monkeypatch.setenv(MACHINE_ENV, "no-such-fix")
    with pytest.raises(KitError, match="no machine fix no-such-fix"):
        throughput_model(p2p, fields)


def test_p2p_scenario_quotes_its_public_numbers():
    text = (load_scenario("p2p-pcie").path and open(load_scenario("p2p-pcie").path).read())
    for url in ("https://github.com/haohervchb/sglang-V100/pull/2", "https://github.com/noonghunna/club-3090/pull/928",
                "https://github.com/noonghunna/club-3090/issues/1229"):
        assert url in text
    assert "| 8 KB | 20.3 us | 5.0 us |" in text and "+12.5% / +7.1%" in text
