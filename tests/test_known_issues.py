"""kit.doctor.known_issues, the known-issue rule and `sgl-kit known-issues`.

Every entry of kit/data/known_issues/ is checked against the schema, and matched against a case
generated from its own trigger (every key held), then against cases with one key flipped (that key
not held). The CLI is checked for its structure only: the database's content grows by itself.
"""

from __future__ import annotations

import json
import re

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from kit.cli import main
from kit.doctor import RULES, Case, diagnose
from kit.doctor import known_issues as ki
from kit.doctor.evidence import Evidence
from kit.hardware import GPU, Hardware, gpu_profiles, match_gpu

ENTRIES = ki.load()
IDS = [str(e.get("id")) for e in ENTRIES]


def test_the_database_is_found_and_has_the_entries_the_kit_names():
    assert len(ENTRIES) >= 3
    assert {"ki-qwen35-prefill-graph-off-as-multimodal", "ki-v047-qwen3-decode-halved",
            "ki-v048-rtx4090-slowdown"} <= set(IDS)
    assert all(e["_file"].endswith(".yaml") for e in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_entry_passes_the_schema(entry):
    assert ki.validate(entry, ENTRIES) == []


# --------------------------------------------------------------------------- generated cases

def _release_in(spec_text: str, inside: bool = True) -> str:
    """A release number inside (or outside) a PEP 440 range, from the numbers the range names."""
    spec = SpecifierSet(spec_text, prereleases=True)
    named = [Version(v) for v in re.findall(r"\d+(?:\.\d+)+(?:\.post\d+|rc\d+)?", spec_text)]
    candidates = []
    for v in named:
        major, minor, micro = (list(v.release) + [0, 0])[:3]
        candidates += [str(v), f"{major}.{minor}.{micro + 1}", f"{major}.{minor}.{max(micro - 1, 0)}",
                       f"{major}.{minor + 1}.0", f"{major}.{max(minor - 1, 0)}.0", f"{major}.{minor}.{micro}.post1"]
    candidates += ["0.0.1", "0.1.0", "0.4.0", "0.5.0", "9.9.9", "99.0.0"]
    for c in candidates:
        if (Version(c) in spec) is inside:
            return c
    raise AssertionError(f"no release {'inside' if inside else 'outside'} {spec_text}")


def _int_in(value, inside: bool = True) -> int:
    # From 1: a TP, DP or EP size of 0 is no size (the server, and the matcher, read it as 1).
    for n in list(range(1, 300)) + [512, 1024]:
        if ki.in_range(n, value) is inside:
            return n
    raise AssertionError(f"no integer {'inside' if inside else 'outside'} {value!r}")


def _first(value):
    return value[0] if isinstance(value, list) else value


def _gpu_for(trigger: dict) -> tuple[str, str]:
    """(name, compute capability) of a GPU that meets the trigger's GPU keys: a GPU of the table when one
    does, else a name of its own with the capability the SM range asks."""
    keys = {k: trigger[k] for k in ("gpu_vendor", "sm", "gfx", "gpu_names") if k in trigger}
    named = [match_gpu(n) for n in ki._items(keys.get("gpu_names", []))]
    pool = [p for p in named if p is not None] if "gpu_names" in keys else list(gpu_profiles().values())
    for p in pool:
        if "gpu_vendor" in keys and p.vendor not in ki._items(keys["gpu_vendor"]):
            continue
        if "sm" in keys and (p.sm is None or not ki.in_range(p.sm, keys["sm"])):
            continue
        if "gfx" in keys and p.gfx not in ki._items(keys["gfx"]):
            continue
        return p.name, ""
    if "gfx" in keys or keys.get("gpu_vendor") == "amd":
        raise AssertionError(f"no AMD GPU of the table meets {keys}: add it to kit/data/gpus.yaml")
    sm = _int_in(keys["sm"]) if "sm" in keys else 90
    name = str(_first(keys["gpu_names"])) if "gpu_names" in keys else "NVIDIA Generated GPU"
    return (name if "nvidia" in name.lower() else f"NVIDIA {name}"), f"{sm // 10}.{sm % 10}"


def _other_gpu(trigger: dict, key: str) -> tuple[str, str]:
    """A GPU that fails ``key`` of the trigger."""
    wanted = trigger[key]
    for p in gpu_profiles().values():
        if key == "gpu_vendor" and p.vendor not in ki._items(wanted):
            return p.name, ""
        if key == "sm" and p.vendor == "nvidia" and not ki.in_range(p.sm, wanted):
            return p.name, ""
        if key == "gfx" and p.gfx not in ki._items(wanted):
            return p.name, ""
        if key == "gpu_names" and not ki.gpu_named(p.name, wanted):
            return p.name, ""
    raise AssertionError(f"no GPU of the table fails {key} {wanted!r}")


def _other(value):
    """A value that is none of ``value``'s items."""
    if isinstance(value, bool):
        return not value
    items = ki._items(value)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return max(items) + 1
    return "not-" + "-".join(map(str, items))


def generated(entry: dict, flip: str | None = None) -> Evidence:
    """Evidence meeting every key of the entry's trigger; with ``flip``, one key (``release``, a trigger
    key, ``fields.NAME`` or ``env.NAME``) made not to hold."""
    trigger = entry.get("trigger") or {}
    args: dict = {"tp_size": 1, "dp_size": 1, "ep_size": 1, "quantization": None, "speculative_algorithm": None,
                  "disaggregation_mode": "null", "lora_paths": None, "enable_lora": False}
    config: dict = {"architectures": ["GeneratedForCausalLM"], "model_type": "generated"}
    environ: dict = {}
    gpu = None
    for key, wanted in trigger.items():
        if key == "fields":
            for name, value in wanted.items():
                args[name] = _first(value) if not isinstance(value, bool) else value
                if flip == f"fields.{name}":
                    args[name] = _other(value)
        elif key == "env":
            for name, value in wanted.items():
                environ[name] = str(_first(value))
                if flip == f"env.{name}":
                    environ[name] = str(_other(value))
        elif key in ("attention_backend", "moe_runner_backend", "sampling_backend", "quantization",
                     "speculative_algorithm"):
            args[key] = _other(wanted) if flip == key else _first(wanted)
        elif key in ("architectures", "model_type"):
            value = _other(wanted) if flip == key else _first(wanted)
            config[key] = [value] if key == "architectures" else value
        elif key in ("tp", "dp", "ep"):
            args[f"{key}_size"] = _int_in(wanted, inside=flip != key)
        elif key == "pd_disaggregation":
            args["disaggregation_mode"] = "prefill" if wanted is (flip != key) else "null"
        elif key == "lora":
            args["lora_paths"] = ["adapter=/models/adapter"] if wanted is (flip != key) else None
    if any(k in trigger for k in ("gpu_vendor", "sm", "gfx", "gpu_names")):
        gpu = _other_gpu(trigger, flip) if flip in ("gpu_vendor", "sm", "gfx", "gpu_names") else _gpu_for(trigger)
    version = _release_in(str(entry["affected"]), inside=flip != "release")
    ev = Evidence("generated", version=version, args=args, environ=environ, model_config=config,
                  sources={"version": "--sglang"})
    if gpu is not None:
        ev.hardware = Hardware("generated", [GPU(0, gpu[0], compute_cap=gpu[1])])
    return ev


def _keys(entry: dict) -> list[str]:
    out = ["release"]
    for key, wanted in (entry.get("trigger") or {}).items():
        out += [f"{key}.{name}" for name in wanted] if key in ("fields", "env") else [key]
    return out


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_entry_matches_a_case_made_from_its_trigger(entry):
    found = ki.match(entry, Case(generated(entry)))
    assert found.status == "matches", [c for c in found.checks if c.status != "held"]
    assert {c.key for c in found.checks} == set(_keys(entry))


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_entry_fails_when_one_key_is_flipped(entry):
    for key in _keys(entry):
        found = ki.match(entry, Case(generated(entry, flip=key)))
        assert found.status == "no", (key, found.checks)
        assert found.check(key).status == "not held", (key, found.check(key))


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_entry_is_partial_without_its_facts_and_says_what_to_send(entry):
    ev = generated(entry)
    ev.args, ev.model_config, ev.hardware, ev.environ = {}, None, None, None
    found = ki.match(entry, Case(ev))
    assert found.check("release").status == "held"
    if len(found.checks) > 1:
        assert found.status == "partial" and found.needs
        assert "not checked" in found.question()


def test_ranges_and_the_gpu_table():
    assert ki.in_range(95, ">=90,<100") and not ki.in_range(100, ">=90,<100")
    assert ki.in_range(4, ">=2") and not ki.in_range(1, ">=2") and ki.in_range(8, 8)
    assert ki.int_range("fast") is None and ki.int_range(True) is None
    entry = {"id": "ki-x", "affected": ">=0.5.0", "trigger": {"sm": ">=90,<100", "tp": ">=2"}}
    h100 = Evidence("t", version="0.5.1", args={"tp_size": 2}, sources={"version": "--sglang"},
                    hardware=Hardware("t", [GPU(0, "NVIDIA H100 80GB HBM3")]))
    assert ki.match(entry, Case(h100)).status == "matches"
    b200 = Evidence("t", version="0.5.1", args={"tp_size": 2}, sources={"version": "the log x"},
                    hardware=Hardware("t", [GPU(0, "NVIDIA B200")]))
    assert ki.match(entry, Case(b200)).check("sm").status == "not held"
    mi300 = Evidence("t", version="0.5.1", args={"tp_size": 2}, hardware=Hardware("t", [GPU(0, "AMD Instinct MI300X")]))
    m = ki.match(entry, Case(mi300))
    assert m.check("sm").status == "not held" and "amd" in m.check("sm").fact
    assert "assumed" in m.check("release").fact  # the version's source is not recorded: the match says so
    odd = Evidence("t", version="0.5.1", args={"tp_size": 2}, hardware=Hardware("t", [GPU(0, "NVIDIA Mystery 9")]))
    assert ki.match(entry, Case(odd)).status == "partial"
    assert "nvidia-smi" in ki.match(entry, Case(odd)).check("sm").needs


def test_gpu_names_are_whole_gpus_not_parts_of_a_name():
    def holds(gpu: str, names: list[str]) -> str:
        entry = {"id": "ki-x", "affected": ">=0.5.0", "trigger": {"gpu_names": names}}
        ev = Evidence("t", version="0.5.1", sources={"version": "--sglang"},
                      hardware=Hardware("t", [GPU(0, gpu, compute_cap="9.0")]))
        return ki.match(entry, Case(ev)).check("gpu_names").status

    assert holds("NVIDIA H20", ["H20"]) == "held"
    assert holds("NVIDIA GeForce RTX 4090", ["RTX 4090"]) == "held"
    assert holds("NVIDIA H20-3e", ["H20-3e"]) == "held"  # a GPU the table lacks, by its own name
    assert holds("NVIDIA H200", ["H20"]) == "not held"
    assert holds("NVIDIA H20-3e", ["H20"]) == "not held"
    assert holds("NVIDIA GB200", ["B200"]) == "not held"
    assert holds("NVIDIA A100-SXM4-80GB", ["A10"]) == "not held"


def test_the_schema_check_refuses_what_it_should(tmp_path):
    good = next(e for e in ENTRIES if e["id"] == "ki-v048-rtx4090-slowdown")
    assert ki.validate(good, ENTRIES) == []
    bad = {**good, "trigger": {"gpus": ["H20"]}, "affected": "0.4.8", "fixed_in": "0.4.x", "confidence": "sure",
           "sources": ["https://example.com/x"], "area": "speed", "colour": 1}
    problems = " | ".join(ki.validate(bad, ENTRIES + [good]))
    for part in ("trigger key 'gpus'", "not a PEP 440 specifier", "confidence 'sure'", "sources name no",
                 "area 'speed'", "unknown key 'colour'", "is not unique", "neither a release nor 'unfixed'"):
        assert part in problems, part
    inside = {**good, "fixed_in": "0.4.8", "fixed_basis": "tag: x"}
    assert any("inside affected" in p for p in ki.validate(inside, ENTRIES))
    no_check = {**good, "fixed_in": "0.4.9", "fixed_basis": "wheel"}
    assert any("fixed_check" in p for p in ki.validate(no_check, ENTRIES))
    intro = {"release": "0.4.8", "file": "srt/x.py", "text": "a line", "absent_in": "0.4.7"}
    assert ki.validate({**good, "introduced_basis": "wheel", "introduced_check": intro}, ENTRIES) == []
    for wrong, part in ((dict(intro, release="0.4.7"), "introduced_check.release 0.4.7 has the line but is outside"),
                        (dict(intro, absent_in="0.4.8"), "absent_in 0.4.8 lacks the line but is inside"),
                        (dict(intro, text=""), "introduced_check needs"), (dict(intro, seen="x"), "key 'seen'")):
        assert any(part in p for p in ki.validate({**good, "introduced_basis": "wheel", "introduced_check": wrong},
                                                  ENTRIES)), part
    assert any("introduced_basis must be 'wheel'" in p
               for p in ki.validate({**good, "introduced_basis": "reporter", "introduced_check": intro}, ENTRIES))
    prose = {**good, "fix": {"workaround": ["tune with tuning_fused_moe_triton.py"], "workaround_checked": ["0.4.8"]}}
    assert any("not a flag" in p for p in ki.validate(prose, ENTRIES))
    flags = {**good, "fix": {"workaround": ["--attention-backend triton", "SGLANG_X=1 (env)"],
                             "workaround_checked": ["0.4.8"]}}
    assert ki.validate(flags, ENTRIES) == []
    assert ki.validate({**good, "trigger": {}}, ENTRIES) == []  # every deployment of the affected releases
    assert "missing trigger" in ki.validate({k: v for k, v in good.items() if k != "trigger"}, ENTRIES)
    assert any(p.startswith("trigger must be a mapping") for p in ki.validate({**good, "trigger": ["tp"]}, ENTRIES))
    ranges = {**good, "trigger": {"tp": "two", "lora": "yes", "gpu_vendor": "intel"}}
    assert len([p for p in ki.validate(ranges, ENTRIES) if p.startswith("trigger.")]) == 3


def test_impact_share_from_the_sources_numbers():
    assert ki.impact_share({"symptom": {"metric": "decode tok/s", "change": "75 -> 45 tok/s"}}) == pytest.approx(0.4)
    assert ki.impact_share({"symptom": {"metric": "throughput", "change": "1,300 -> 2,100 tok/s"}}) == \
        pytest.approx(1 - 1300 / 2100)
    assert ki.impact_share({"symptom": {"metric": "memory", "change": "10 -> 20 GB"}}) is None
    assert ki.impact_share({"symptom": {"metric": "ttft", "change": "no number"}}) is None


# --------------------------------------------------------------------------- the rule

KNOWN = [r for r in RULES if r.id == "known-issue"]


def test_the_rule_gives_one_finding_per_match_measured_elsewhere_ranked_after_the_cases_own():
    from kit.doctor.result import Impact

    entry = next(e for e in ENTRIES if e["id"] == "ki-v047-qwen3-decode-halved")
    ev = generated(entry)
    d = diagnose(ev, only=KNOWN)
    (f,) = [f for f in d.findings if entry["id"] in f.title]
    assert f.impact_basis == "measured elsewhere" and f.impact == pytest.approx(0.4)
    assert "https://github.com/sgl-project/sglang/issues/7070" in " ".join(f.evidence)
    assert "known-issue" in d.checked
    own = Impact(0.05, "modelled", "x")
    assert own.rank < f.estimate.rank < Impact(None, "not estimated", "y").rank


def test_a_partial_match_is_an_open_question_not_a_finding():
    entry = next(e for e in ENTRIES if e["id"] == "ki-v047-qwen3-decode-halved")
    ev = generated(entry)
    ev.model_config = None
    d = diagnose(ev, only=KNOWN)
    assert not [f for f in d.findings if entry["id"] in f.title]
    assert any(entry["id"] in q and "not checked: architectures" in q for q in d.open_questions)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.get("workload")], ids=lambda e: e["id"])
def test_an_issue_of_the_traffic_is_a_question_about_the_traffic_not_a_finding(entry):
    d = diagnose(generated(entry), only=KNOWN)  # the launch meets every key of the trigger
    assert not [f for f in d.findings if entry["id"] in f.title]
    (q,) = [q for q in d.open_questions if entry["id"] in q]
    assert f"only with {entry['workload']}" in q


@pytest.mark.parametrize("path, status", [
    ("/models/Qwen3-32B", "not held"),                        # names another family of the database
    ("/models/MiniMax-M2.5", "unknown"),                       # the issue's family: only config.json tells
    ("/models/our-finetune-v2", "unknown"),                    # names no family
    ("/models/DeepSeek-R1-Distill-Qwen-32B", "unknown"),       # names two: the path does not tell
])
def test_without_config_json_a_model_path_of_another_family_rules_an_architecture_out(path, status):
    entry = next(e for e in ENTRIES if (e.get("trigger") or {}).get("architectures") == ["MiniMaxM2ForCausalLM"])
    ev = generated(entry)
    ev.model_config = None
    ev.args["model_path"] = path
    m = ki.match(entry, Case(ev))
    check = m.check("architectures")
    assert check.status == status, check.fact
    assert m.status == ("no" if status == "not held" else "partial")
    if status == "not held":
        assert path in check.fact and "qwen" in check.fact


def test_a_summary_counts_the_issues_of_the_traffic_and_keeps_the_cases_own_questions():
    from kit.doctor.result import brief_questions

    entries = [e for e in ENTRIES if e.get("workload")][:3]
    questions = ["the GPUs' links were not read: `nvidia-smi topo -m`"]
    for entry in entries:
        questions += [q for q in diagnose(generated(entry), only=KNOWN).open_questions if entry["id"] in q]
    brief = brief_questions(questions)
    assert brief[0] == questions[0] and len(brief) == 2
    assert brief[1].startswith(f"{len(entries)} known issue(s)") and not any(e["id"] in brief[1] for e in entries)
    assert brief_questions(questions[:1]) == questions[:1]


def test_the_doctor_lists_the_known_issues_apart_from_the_cases_own_questions():
    from kit.display import diagnosis_view

    entry = next(e for e in ENTRIES if e.get("workload"))
    d = diagnose(generated(entry), only=KNOWN)
    d.open_questions.insert(0, "a question of this case alone")
    n = len(d.known_issue_questions)
    assert d.own_questions == [d.open_questions[0]] and n == len(d.open_questions) - 1
    assert any(q.startswith(entry["id"]) for q in d.known_issue_questions)
    text = d.to_text(width=400)
    own, known = text.index("what else to check:"), text.index(f"known issues of this release that may apply ({n};")
    assert own < text.index("a question of this case alone") < known < text.index(entry["id"])
    html = diagnosis_view(d)._repr_html_()
    assert "what else to check (1)" in html and f"known issues of this release that may apply ({n})" in html


def test_the_notebook_table_holds_what_the_text_lists():
    from kit.doctor.known_report import report

    found = report(ki.evidence_for("0.4.6", "h100"), upgrade_to="0.5.23")
    for which in ("matches", "partial", "fixes", "brings"):
        frame = found.to_frame(which)
        assert list(frame["id"]) == [m.id for m in getattr(found, which)]
        assert all(f"- {i} [" in found.to_text() for i in frame["id"])
    assert found._repr_html_().count("<table") == sum(bool(getattr(found, w)) for w in
                                                      ("matches", "partial", "fixes", "brings"))


# --------------------------------------------------------------------------- the CLI

def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["known-issues", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_a_release_and_a_gpu(capsys):
    code, out, _ = _cli(capsys, "--sglang", "0.5.9", "--gpu", "h100")
    assert code == 0 and "known issues for sglang 0.5.9 on NVIDIA H100 80GB HBM3 (nvidia, SM90)" in out
    assert "\nmatches:" in out and "\nmay apply" in out
    code, out, _ = _cli(capsys, "--sglang", "0.5.9", "--gpu", "h100", "--json")
    data = json.loads(out)
    assert data["sglang"] == "0.5.9" and data["gpus"][0]["sm"] == 90 and data["entries"] == len(ENTRIES)
    for m in data["matches"] + data["partial"]:
        assert m["checks"][0]["key"] == "release" and m["checks"][0]["status"] == "held"
        assert m["sources"] and m["status"] in ("matches", "partial")
    assert all(m["needs"] for m in data["partial"])


def test_cli_an_upgrade(capsys):
    code, out, _ = _cli(capsys, "--sglang", "0.4.6", "--gpu", "h100", "--upgrade-to", "0.5.23")
    assert code == 0 and "fixed by upgrading to 0.5.23" in out and "brought by upgrading to 0.5.23" in out
    code, out, _ = _cli(capsys, "--sglang", "0.4.6", "--gpu", "h100", "--upgrade-to", "0.5.23", "--json")
    up = json.loads(out)["upgrade"]
    assert up["to"] == "0.5.23"
    for m in up["fixes"]:
        assert Version("0.4.6") in SpecifierSet(m["affected"]) and Version("0.5.23") not in SpecifierSet(m["affected"])
    for m in up["brings"]:
        assert Version("0.5.23") in SpecifierSet(m["affected"]) and Version("0.4.6") not in SpecifierSet(m["affected"])
    # the migrated entries: 0.4.7 -> 0.4.8 fixes the 0.4.7 one (open: no model given) and brings the 4090 one
    code, out, _ = _cli(capsys, "--sglang", "0.4.7", "--gpu", "rtx4090", "--upgrade-to", "0.4.8", "--json")
    up = json.loads(out)["upgrade"]
    assert "ki-v047-qwen3-decode-halved" in [m["id"] for m in up["fixes"]]
    assert "ki-v048-rtx4090-slowdown" in [m["id"] for m in up["brings"]]


def test_cli_bad_input(capsys):
    code, _, err = _cli(capsys, "--sglang", "latest")
    assert code == 2 and "'latest' is not an sglang release" in err and "X.Y.Z" in err
    code, _, err = _cli(capsys, "--sglang", "0.5.9", "--upgrade-to", "0.5")
    assert code == 2 and "--upgrade-to '0.5'" in err
    code, out, _ = _cli(capsys, "--sglang", "v0.4.8", "--gpu", "Frobnicator X1")
    assert code == 0 and "vendor unknown, SM unknown" in out and "not in the kit's GPU table" in out
    assert "known issues for sglang 0.4.8" in out  # a leading v is dropped


def test_cli_help_names_the_command(capsys):
    with pytest.raises(SystemExit):
        main(["known-issues", "--help"])
    out = capsys.readouterr().out
    assert "--upgrade-to" in out and "may apply" in out and "kit/data/known_issues" in out


# Every trigger key of the schema at once (written here, not an entry of the database): the generator
# and the matcher must handle each, ranges included.
EVERY_KEY = [
    {"id": "ki-every-nvidia", "affected": ">=0.4.5,<0.4.7", "trigger": {
        "fields": {"enable_dp_attention": True, "chunked_prefill_size": [4096, 8192]},
        "attention_backend": ["fa3", "flashinfer"], "moe_runner_backend": "triton", "sampling_backend": ["flashinfer"],
        "quantization": ["fp8"], "speculative_algorithm": ["EAGLE3"], "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": ["deepseek_v3"], "gpu_vendor": "nvidia", "sm": ">=90,<100", "gpu_names": ["H20"],
        "tp": ">=2", "dp": ">=2", "ep": "8", "pd_disaggregation": True, "lora": False, "env": {"SGLANG_X": "1"}}},
    {"id": "ki-every-amd", "affected": "==0.5.2", "trigger": {"gpu_vendor": "amd", "gfx": ["gfx942"], "tp": 8,
                                                             "lora": True, "pd_disaggregation": False}},
    {"id": "ki-sm-only", "affected": "<0.5", "trigger": {"sm": ">=120", "dp": "<2"}},
]


@pytest.mark.parametrize("entry", EVERY_KEY, ids=[e["id"] for e in EVERY_KEY])
def test_the_generator_and_matcher_cover_every_trigger_key(entry):
    assert not [p for p in ki._check_trigger(entry["trigger"])]
    test_every_entry_matches_a_case_made_from_its_trigger(entry)
    test_every_entry_fails_when_one_key_is_flipped(entry)
    test_every_entry_is_partial_without_its_facts_and_says_what_to_send(entry)
