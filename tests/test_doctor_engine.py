"""The doctor's engine: declared facts decide what runs and what is said about what did not; a rule that
reads an undeclared fact fails (strict mode, set for the test run by tests/conftest.py); the order is the
declared one, never registration; one rule's bug never aborts a diagnosis; the guide's tables are
generated from the rules; each rule has committed real evidence that makes it fire and stay silent
(tests/data/rule_cases/), or is a known gap."""

from __future__ import annotations

import random
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import kit.doctor
from kit.doctor import RULES, diagnose, from_files
from kit.doctor.facts import FACTS, UndeclaredFact, names
from kit.doctor.rulebase import in_group, ordered
from kit.doctor.ruletable import BEGIN, END, fact_table, rule_table

REPO = Path(__file__).resolve().parent.parent
INCIDENTS = REPO / "data" / "incidents"
CASES = REPO / "tests" / "data" / "rule_cases"
sys.path.insert(0, str(REPO / "benchmarks"))
import incident_hit_rate as hits  # noqa: E402

CORPUS = hits.cases()


def _incident(name: str):
    """The evidence of a corpus case as benchmarks/incident_hit_rate.py builds it (the release stated)."""
    data = yaml.safe_load((INCIDENTS / name / "case.yaml").read_text())
    files = list(dict.fromkeys(str(INCIDENTS / name / item["file"]) for item in data["evidence"]))
    ev = from_files(paste=files, sglang=data.get("reader_version"))
    release = re.fullmatch(r"\d+\.\d+(\.\d+)?(\.?post\d+|rc\d+)?", str(data["version"]))
    ev.version = str(data["version"]) if release else None
    return ev


# --------------------------------------------------------------------------- declarations


def test_every_rule_declares_known_facts_and_a_known_order():
    ids = {r.id for r in RULES}
    for r in RULES:
        assert names(r.reads) | names(r.uses) <= set(FACTS), (r.id, names(r.reads) | names(r.uses) - set(FACTS))
        assert not names(r.reads) & names(r.uses), r.id
        if not isinstance(r.after, str):
            assert set(r.after) <= ids, r.id
    assert ordered(list(RULES))  # no cycle


def test_the_metrics_group_is_declared_not_sliced():
    group = {r.id for r in in_group("metrics")}
    assert group == {"decode-passes-eager", "prefill-passes-eager", "queue-time-measured",
                     "requests-retracted-measured", "prefix-cache-hit-low", "accept-length-dropped"}
    assert all("runtime" in r.reads for r in in_group("metrics"))


def test_after_findings_and_after_ids_order_the_rules():
    first = next(r for r in RULES if r.id == "radix-cache-off")
    late = replace(first, id="zz-late", after="findings")
    mid = replace(first, id="aa-after-radix", after=("radix-cache-off",))
    order = [r.id for r in ordered([late, mid, first])]
    assert order == ["radix-cache-off", "aa-after-radix", "zz-late"]
    with pytest.raises(ValueError, match="cycle"):
        ordered([replace(first, after=("aa-after-radix",)), mid])


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_every_rule_reads_only_what_it_declares_on_the_corpus(path):
    # strict mode (tests/conftest.py): an undeclared read raises UndeclaredFact out of diagnose
    assert kit.doctor.facts.strict()
    diagnose(_incident(path.name))


def test_an_undeclared_read_fails_in_strict_mode(monkeypatch):
    ev = _incident("sglang-4048-context-over-pool")
    # kv-pool-full's own declarations, and a condition that reads the ready line's numbers besides
    sneaky = replace(next(r for r in RULES if r.id == "kv-pool-full"), id="sneaky",
                     when=lambda case: [f"the pool: {case.ev.capacity}"])
    with pytest.raises(UndeclaredFact, match="rule sneaky read capacity without declaring it"):
        diagnose(ev, only=[sneaky])


# --------------------------------------------------------------------------- what was not checked


def test_a_rule_without_its_facts_is_not_checked_and_says_how_to_get_them():
    d = diagnose(_incident("sglang-4048-context-over-pool"))
    why = dict(d.skipped)
    assert why["decode-passes-eager"].startswith("not checked: needs what the server did, from its metrics")
    assert "--prometheus URL" in why["decode-passes-eager"]
    assert "--trace FILE" in why["trace-cpu-bound"]
    assert "decode-passes-eager" not in d.checked
    gpus = next(q for q in d.unanswered if q.startswith("the GPUs: not in the evidence"))
    assert "attention-backend-mismatch" in gpus and "--nvidia-smi FILE" in gpus


# --------------------------------------------------------------------------- order


def test_findings_do_not_depend_on_registration_order(monkeypatch):
    ev = _incident("sglang-4759-spec-throughput")
    want = [(f.id, f.estimate) for f in diagnose(ev).findings]
    assert len(want) >= 2
    for seed in (1, 2, 3):
        shuffled = list(RULES)
        random.Random(seed).shuffle(shuffled)
        monkeypatch.setattr(kit.doctor, "RULES", shuffled)
        assert [(f.id, f.estimate) for f in diagnose(_incident("sglang-4759-spec-throughput")).findings] == want


# --------------------------------------------------------------------------- exceptions


def _broken(case):
    raise ZeroDivisionError("a bug")


def test_a_failing_rule_leaves_a_problem_and_the_others_run(monkeypatch):
    broken = replace(next(r for r in RULES if r.id == "kv-pool-full"), id="broken-rule", when=_broken)
    ev = _incident("sglang-6778-token-usage-096")
    with pytest.raises(ZeroDivisionError):  # strict (the test run): it raises
        diagnose(ev, only=[broken, *RULES])
    monkeypatch.setenv("SGL_KIT_STRICT_RULES", "0")
    d = diagnose(_incident("sglang-6778-token-usage-096"), only=[broken, *RULES])
    assert "rule broken-rule failed: ZeroDivisionError: a bug; the other rules ran" in d.problems
    assert "kv-pool-full" in [f.id for f in d.findings]


# --------------------------------------------------------------------------- the guide


def _generated(text: str, name: str) -> str:
    begin = text.index(BEGIN[name]) + len(BEGIN[name])
    return text[begin:text.index(END, begin)].strip()


def test_the_guide_tables_are_generated_from_the_rules():
    guide = (REPO / "docs" / "guide.md").read_text()
    assert _generated(guide, "rules") == rule_table(), "run: python -m kit.doctor.ruletable, paste into docs/guide.md"
    assert _generated(guide, "facts") == fact_table(), "run: python -m kit.doctor.ruletable, paste into docs/guide.md"


def test_the_known_issues_coverage_tables_are_generated_from_the_database():
    from kit.doctor.ruletable import tables

    doc = (REPO / "docs" / "known-issues.md").read_text()
    for name in ("coverage", "recent"):
        assert _generated(doc, name) == tables()[name][1], "run: python -m kit.doctor.ruletable --write"


# --------------------------------------------------------------------------- each rule's real cases

# Rules no committed real evidence makes fire, with why. This list only shrinks: a rule listed here that
# gains a "fires" case fails the test below until it is taken off.
KNOWN_GAPS = {
    "decode-batches-above-graph-ceiling": "no committed log has `cuda graph: False` Decode batch lines above cuda_graph_max_bs",
    "speculative-accept-low": "no committed log shows an accept length under half of what a round can carry",
    "chunked-prefill-off-for-vlm": "no committed case runs an architecture sglang counts as a VLM with its config.json",
    "tp-across-slow-link": "no committed case pairs a tp > 1 launch with `nvidia-smi topo -m` of its own box",
    "nccl-p2p-disabled": "no committed case holds a TP server's environment with NCCL_P2P_DISABLE",
    "quantization-not-native-on-gpu": "no committed case launches a quantized checkpoint on a GPU below the method's "
                                      "capability or FP8 on an SM 8.x GPU, with its sglang version",
    "custom-all-reduce-off": "no committed launch turns custom all-reduce off with tp > 1",
    "attention-backend-mismatch": "no committed launch with torch_native or a backend its GPU cannot run",
    "prefill-chunks-hold-decode": "no committed log has Prefill batch lines of full chunks while requests decode",
    "differs-from-baseline": "no committed pair of a launch and its known-good baseline",
    "accept-length-dropped": "no committed /metrics page or Prometheus range (its tests run a live real server: tests/test_metrics_real.py)",
    "trace-decode-eager": "the one committed trace is of sglang on CPU: no CUDA kernels, graphs or collectives",
    "trace-communication-share": "the one committed trace is of sglang on CPU: no CUDA kernels, graphs or collectives",
    "trace-cpu-bound": "the one committed trace is of sglang on CPU: no CUDA kernels, graphs or collectives",
}


def _evidence(spec: dict):
    if "incident" in spec:
        return _incident(spec["incident"])
    files = {k: (str(REPO / v) if k not in ("sglang", "gpu") else str(v)) for k, v in spec.items() if k != "trace"}
    ev = from_files(**files)
    if spec.get("bench"):  # the server's /metrics pages the run kept: what the server did under that load
        from kit.doctor import runtime_from_bench

        runtime_from_bench(ev)
    if spec.get("trace"):
        from kit.doctor.rules_trace import add_trace

        add_trace(ev, [str(REPO / t) for t in spec["trace"]])
    return ev


def _rule_cases():
    out = []
    for path in sorted(CASES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for kind in ("fires", "silent"):
            for n, spec in enumerate(data.get(kind) or []):
                out.append(pytest.param(path.stem, kind, spec, id=f"{path.stem}-{kind}-{n}"))
    return out


def test_every_rule_has_real_cases_or_is_a_known_gap():
    have = {p.stem: yaml.safe_load(p.read_text()) for p in CASES.glob("*.yaml")}
    ids = {r.id for r in RULES}
    assert set(have) <= ids, set(have) - ids
    for rid in sorted(ids):
        data = have.get(rid) or {}
        assert data.get("silent"), f"{rid}: no committed evidence on which it stays silent ({CASES}/{rid}.yaml)"
        if rid in KNOWN_GAPS:
            assert not data.get("fires"), f"{rid} has a firing case now: take it off KNOWN_GAPS"
        else:
            assert data.get("fires"), f"{rid}: no committed real evidence that makes it fire; add one or a KNOWN_GAPS entry"


@pytest.mark.parametrize("rule_id,kind,spec", _rule_cases())
def test_a_rule_case(rule_id, kind, spec):
    d = diagnose(_evidence(spec))
    rule = next(r for r in RULES if r.id == rule_id)
    findings, context = [f.id for f in d.findings], [f.id for f in d.context]
    # a context rule's finding describes the launch, not a cause: it goes to Diagnosis.context, never to findings;
    # one that does not apply on this hardware or workload (a GPU rule on a CPU log) is found, and listed apart
    apart = [f.id for f in d.not_applicable]
    assert not set(apart) & set(findings)
    found = context if rule.context else findings + apart
    assert rule_id not in (findings if rule.context else context), (findings, context)
    if kind == "fires":
        assert rule_id in found, (found, d.skipped)
    else:
        assert rule_id not in found
