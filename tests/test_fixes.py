"""The launch with every fix, checked against every startup check of its release (kit.provenance.startup,
kit.doctor.fixcheck); findings that contradict each other (kit.doctor.reconcile); no finding built on a
value that was not read; hints that name only options sgl-kit has.

Inputs: the real sglang wheels (0.5.11, 0.5.23), tests/data/fixes (a server_args line printed by sglang
0.5.23's own code, see its SOURCES.md), the incident corpus (data/incidents)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit.launch_file import source_tree

ROOT = Path(__file__).resolve().parent.parent
FIXES = Path(__file__).parent / "data" / "fixes"
LLAMA = Path(__file__).parent / "data" / "models" / "llama-3.1-8b" / "config.json"


def _source_line(version: str, where: str) -> tuple[str, list[str]]:
    tree = source_tree(None, version)
    path, line = where.rsplit(":", 1)
    lines = (Path(str(tree.root)) / path).read_text().splitlines()
    return lines[int(line) - 1], lines


# --------------------------------------------------------------------------- 1. refusals complete


def test_the_doctors_fix_that_an_arg_groups_hook_refuses_is_marked_refused_with_its_line():
    # An embedding server that keeps no KV cache in prefill, with the radix cache off (its server_args
    # line printed by sglang 0.5.23). The radix-cache rule says: remove --disable-radix-cache. sglang
    # 0.5.23 refuses that in an arg_groups hook (validate_prefill_only_disable_kv_cache_args); the
    # dry-run of the same launch says so too (kit.dryrun: "ValueError in
    # validate_prefill_only_disable_kv_cache_args (srt/arg_groups/kv_cache_hook.py:911)").
    from kit.doctor import diagnose, from_files

    d = diagnose(from_files(log=str(FIXES / "embedding-no-radix-0.5.23.log"),
                            command=str(FIXES / "embedding-no-radix-0.5.23.cmd"), model_config=str(LLAMA),
                            sglang="0.5.23"))
    radix = next(f for f in d.findings if f.id == "radix-cache-off")
    assert [str(c) for c in radix.changes] == ["remove --disable-radix-cache"]
    check = d.fix_check
    assert check.status == "refused", check
    (refused,) = check.checks["refused"]
    assert refused["where"].startswith("srt/arg_groups/kv_cache_hook.py:")
    assert refused["where"] in check.detail
    text, lines = _source_line("0.5.23", refused["where"])
    assert text.strip() == "raise ValueError("
    at = int(refused["where"].rsplit(":", 1)[1])
    assert lines[at - 2].strip() == "if not cfg.disable_radix_cache:"
    assert "--prefill-only-disable-kv-cache requires --disable-radix-cache" in refused["message"]
    # the whole resolution was read, the hooks included, and what could not be decided is counted apart
    assert "sglang/srt/arg_groups/kv_cache_hook.py" in check.checks["files"]
    assert check.checks["checked"] > 100 and check.checks["unchecked"] > 0
    assert all(u["needs"] for u in check.checks["unchecked_checks"])
    assert "the launch with every fix is not offered" in d.to_text()
    assert d.to_dict()["fixed_command"] is None


def test_the_launch_as_it_ran_passes_with_a_count_of_checked_and_unchecked():
    from kit.provenance import startup_checks
    from kit.server_args import parse_log

    tree = source_tree(None, "0.5.23")
    values = parse_log((FIXES / "embedding-no-radix-0.5.23.log").read_text()).fields
    report = startup_checks(tree, values, str(LLAMA))
    assert not report.refused
    assert re.fullmatch(r"passes the checks read \(\d+ checked, \d+ unchecked\)", report.summary())
    (kv,) = [c for c in report.checks if c.message.startswith("--prefill-only-disable-kv-cache requires "
                                                              "--disable-radix-cache")]
    assert kv.status == "passes" and kv.kind == "raise"
    for c in report.unchecked:
        assert str(c).startswith(f"unchecked: {c.where} (needs ") and c.needs


def test_an_assert_of_check_server_args_refuses_and_one_it_cannot_decide_is_unchecked():
    # 0.5.23 arg_groups/validation_hook.py check_server_args:
    # assert not (cfg.disable_cuda_graph_padding and cfg.enable_torch_compile), "...incompatible..."
    from kit.provenance import startup_checks
    from kit.server_args import cli_defaults, parse_log

    tree = source_tree(None, "0.5.23")
    values = parse_log((FIXES / "embedding-no-radix-0.5.23.log").read_text()).fields
    both = {**values, "disable_cuda_graph_padding": True, "enable_torch_compile": True}
    report = startup_checks(tree, both, str(LLAMA), ran=values)
    (hit,) = report.refused
    assert hit.kind == "assert" and hit.function == "check_server_args"
    assert hit.where.startswith("srt/arg_groups/validation_hook.py:")
    text, _ = _source_line("0.5.23", hit.where)
    assert text.strip().startswith("assert not (cfg.disable_cuda_graph_padding and cfg.enable_torch_compile)")
    assert "incompatible with --enable-torch-compile" in hit.message
    # a check that needs an environment variable of the server is unchecked, with what it needs
    env = [c for c in report.unchecked if "environment" in c.needs]
    assert env and all(c.status == "unchecked" for c in env)
    assert cli_defaults(tree)  # the defaults came from the same release


def test_a_refusal_of_the_launch_as_it_ran_is_a_guard_the_reader_does_not_see():
    # a check that refuses the values of a launch that started is not a refusal: a guard outside its
    # function (the pipeline's call) holds it back; it is unchecked, never counted as passing
    from kit.provenance import startup_checks
    from kit.server_args import parse_log

    tree = source_tree(None, "0.5.23")
    values = parse_log((FIXES / "embedding-no-radix-0.5.23.log").read_text()).fields
    alone = startup_checks(tree, values, str(LLAMA))
    ran = startup_checks(tree, values, str(LLAMA), ran=values)
    assert not ran.refused
    moved = {c.where for c in alone.refused}
    assert moved <= {c.where for c in ran.unchecked if "outside its function" in c.needs}


# --------------------------------------------------------------------------- 2. contradictions reconciled

QWEN = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"


def _no_buffer(gpu: str | None = "a6000"):
    from kit.doctor import diagnose, from_files

    files = {"log": str(FIXES / "no-buffer-overlap-off-0.5.11.log"),
             "command": str(FIXES / "no-buffer-overlap-off-0.5.11.cmd"), "model_config": str(QWEN), "sglang": "0.5.11"}
    return diagnose(from_files(**files, **({"gpu": gpu} if gpu else {})))


def test_a_fix_made_moot_by_what_another_finding_changes_is_set_aside_with_the_line(env_0511):
    # mamba no_buffer with --disable-overlap-schedule on sglang 0.5.11: one rule says remove the flag, the
    # other that no_buffer forces the overlap scheduler off anyway. sglang's own resolution (the dry-run)
    # of the launch without the flag still writes disable_overlap_schedule = True, in
    # _handle_mamba_radix_cache; the extra_buffer fix changes what that line tests.
    d = _no_buffer()
    ids = [f.id for f in d.findings]
    assert "overlap-scheduler-off" not in ids and "mamba-no-buffer" in ids
    (note,) = [n for n in d.set_aside if n.startswith("overlap-scheduler-off")]
    assert "moot: " in note and "forces disable_overlap_schedule = True (srt/server_args.py:" in note
    where = note.split("forces disable_overlap_schedule = True (", 1)[1].split(",", 1)[0]
    text, lines = _source_line("0.5.11", where)
    assert text.strip() == "self.disable_overlap_schedule = True"
    at = int(where.rsplit(":", 1)[1])
    assert any("if self.speculative_algorithm is None:" in line for line in lines[at - 8:at])
    mamba = next(f for f in d.findings if f.id == "mamba-no-buffer")
    assert [str(c) for c in mamba.changes] == ["--mamba-scheduler-strategy extra_buffer",
                                                "remove --disable-overlap-schedule"]
    assert any(e.startswith("it makes 'The overlap scheduler is off' (overlap-scheduler-off) moot: ")
               for e in mamba.evidence)
    assert "set aside (moot given another finding; not ranked):" in d.to_text()
    assert d.to_dict()["set_aside"] == d.set_aside
    assert "--disable-overlap-schedule" not in d.fixed_command


def test_an_undecided_forcing_write_keeps_both_findings_and_says_what_decides_it():
    # without a GPU profile there is no dry-run: the static reader cannot decide the callers' guards
    # (parse_connector_type, the hybrid spec), so neither finding is set aside
    d = _no_buffer(gpu=None)
    ids = [f.id for f in d.findings]
    assert "overlap-scheduler-off" in ids and "mamba-no-buffer" in ids and not d.set_aside
    overlap = next(f for f in d.findings if f.id == "overlap-scheduler-off")
    (maybe,) = [e for e in overlap.evidence if e.startswith("may be moot: ")]
    assert "forces disable_overlap_schedule = True (srt/server_args.py:" in maybe and "undecided" in maybe


def test_two_fixes_that_set_one_field_differently_keep_the_higher_ranked():
    from kit.doctor import Change, Finding, Impact
    from kit.doctor.case import Case
    from kit.doctor.evidence import Evidence
    from kit.doctor.reconcile import reconcile

    ev = Evidence("t")
    ev.tree, ev.version = source_tree(None, "0.5.11"), "0.5.11"
    first = Finding("a", "A", Impact(0.2, "modelled", "x"), changes=[Change("--mem-fraction-static", 0.85)])
    second = Finding("b", "B", Impact(None, "not estimated", "x"), changes=[Change("--mem-fraction-static", 0.8)])
    kept, notes = reconcile([first, second], Case(ev))
    assert kept == [first]
    (note,) = notes
    assert note.startswith("b (B): its fix --mem-fraction-static 0.8 sets mem_fraction_static otherwise than the fix of a")


# --------------------------------------------------------------------------- 3. shared settings


def test_a_setting_both_arms_share_is_never_ranked_as_the_cause_of_their_difference(tmp_path):
    from kit.doctor import diagnose, from_files

    files = {"log": str(FIXES / "no-buffer-overlap-off-0.5.11.log"),
             "command": str(FIXES / "no-buffer-overlap-off-0.5.11.cmd"), "model_config": str(QWEN), "sglang": "0.5.11"}
    alone = diagnose(from_files(**files))
    assert {"overlap-scheduler-off", "mamba-no-buffer"} <= {f.id for f in alone.findings}
    # the baseline: the same launch on one GPU (written for the test from the .cmd, --tp-size 2 -> 1)
    base = tmp_path / "baseline.cmd"
    base.write_text((FIXES / "no-buffer-overlap-off-0.5.11.cmd").read_text().replace("--tp-size 2", "--tp-size 1"))
    d = diagnose(from_files(**files, baseline=str(base)))
    ids = [f.id for f in d.findings]
    assert "overlap-scheduler-off" not in ids and "mamba-no-buffer" not in ids
    notes = {n.split(" ", 1)[0]: n for n in d.set_aside}
    assert "both have disable_overlap_schedule = True" in notes["overlap-scheduler-off"]
    assert "both have mamba_scheduler_strategy = 'no_buffer'" in notes["mamba-no-buffer"]
    assert all("not a cause of the difference from the baseline" in n for n in notes.values())
    differs = next(f for f in d.findings if f.id == "differs-from-baseline")
    assert differs.evidence == ["tp_size: baseline 1 (asked) -> here 2 (asked)"]
    # a field the baseline's command does not tell (it is not resolved: only what it asked) keeps its finding
    assert "prefill-cuda-graph-off" in ids
    # no ranked finding speaks only of fields both sides share
    for f in d.findings:
        assert not any(f.id == n for n in notes)


def test_the_same_launch_as_baseline_leaves_no_flag_as_a_cause():
    from kit.doctor import diagnose, from_files

    log = str(FIXES / "no-buffer-overlap-off-0.5.11.log")
    d = diagnose(from_files(log=log, command=str(FIXES / "no-buffer-overlap-off-0.5.11.cmd"), model_config=str(QWEN),
                            sglang="0.5.11", baseline=log))
    assert not [f.id for f in d.findings if f.changes], [f.id for f in d.findings]
    assert len(d.set_aside) >= 4


# --------------------------------------------------------------------------- 4. no finding on a value not read

_NONE = re.compile(r"\b[a-z_][a-z0-9_.]* = None\b|\bNone,")


def _finding_texts(d):
    for f in d.findings:
        for text in [f.title, *f.evidence, *f.fix, *f.avoid, f.estimate.reason]:
            yield f.id, text


def _corpus():
    from kit import practice

    return practice.cases()


@pytest.mark.parametrize("incident", _corpus(), ids=lambda c: c.name)
def test_no_finding_of_the_corpus_prints_none_for_a_field_value(incident):
    from kit import practice

    d = practice.run_doctor(incident)
    bad = [(rid, text) for rid, text in _finding_texts(d) if _NONE.search(text)]
    assert not bad, bad


def test_a_value_computed_at_startup_and_not_read_is_said_to_be_unknown():
    # the launch command alone (no server_args line): mem_fraction_static is None until sglang computes it
    # at startup, so the VLM rule says it was not read instead of "mem_fraction_static = None, lowered..."
    from kit.doctor import diagnose, from_files

    d = diagnose(from_files(command=str(FIXES / "no-buffer-overlap-off-0.5.11.cmd"), model_config=str(QWEN),
                            sglang="0.5.11"))
    bad = [(rid, text) for rid, text in _finding_texts(d) if _NONE.search(text)]
    assert not bad, bad
    mem = next(f for f in d.findings if f.id == "mem-fraction-lowered-for-vlm")
    assert mem.evidence[0].startswith("mem_fraction_static: its value was not read (")
    assert "server_args log line or /server_info" in mem.evidence[0]
    assert mem.changes == [] and "the value it runs with was not read" in mem.fix[0]


# --------------------------------------------------------------------------- 5. hints name options sgl-kit has

_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# "give --sglang VERSION", "then --bench FILE", "pass --model-config FILE": an option of the command the text
# is printed by (the doctor's texts: sgl-kit doctor)
_GIVE = re.compile(r"\b(?:give|then|pass)\s+(?:[\w'/]+\s+){0,8}?(--[a-z][a-z0-9-]*)")
_END = re.compile(r"`|\)|,|;|\n| -- |\s#")


def _strings(path: Path):
    """The string literals of a module that it prints (docstrings are for its readers, not its users)."""
    import ast

    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _parser_for(parser, words: list[str]):
    """The sub-parser of ``sgl-kit WORD [WORD...]`` (``bench compare``, ``dryrun setup``), or None."""
    import argparse

    current, named = parser, False
    for word in words:
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        current, named = subs[0].choices[word], True
    return current if named else None


def _options(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _hints():
    """(where, command words, option) for every option a doctor or CLI text tells the user to give sgl-kit."""
    for path in sorted((ROOT / "kit" / "doctor").glob("*.py")) + sorted((ROOT / "kit" / "cli").glob("*.py")):
        for line, text in _strings(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            for m in re.finditer(r"sgl-kit\s+", text):
                span = _END.split(text[m.end():], maxsplit=1)[0]
                words = [w for w in span.split() if not w.startswith(("-", "["))]
                for option in _OPTION.findall(span):
                    yield where, words, option
            if path.parent.name == "doctor" or path.name == "doctor.py":
                for m in _GIVE.finditer(text):
                    yield where, ["doctor"], m.group(1)
                    if path.parent.name == "cli":
                        yield where, ["gates"], m.group(1)


def test_every_option_a_hint_tells_the_user_to_give_sgl_kit_exists_in_that_command():
    from kit.cli import build_parser

    parser = build_parser()
    hints = list(_hints())
    assert len(hints) > 50  # the scan reads the texts (usage lines, examples, hints)
    bad = []
    for where, words, option in hints:
        sub = _parser_for(parser, words)
        if sub is None:  # `sgl-kit X lab`: the command is a variable; its usage lines are checked where written
            continue
        if option not in _options(sub) | _options(parser):
            bad.append(f"{where}: sgl-kit {' '.join(words[:2])} has no {option}")
    assert not bad, bad


def test_the_doctors_hints_do_not_name_tp_size_an_option_it_does_not_have():
    from kit.cli import build_parser

    # the text reviewers saw is read as a hint to the doctor
    assert _GIVE.search("so the aggregate bandwidth is not either: give the log's whole server_args line or "
                        "--tp-size").group(1) == "--tp-size"
    doctor = _parser_for(build_parser(), ["doctor"])
    assert "--tp-size" not in _options(doctor) and "--tp" not in _options(doctor)
    told = [(where, option) for where, words, option in _hints() if words == ["doctor"]]
    assert ("kit/doctor/fixcheck.py" in " ".join(w for w, _ in told))  # "(give --sglang VERSION)" is read
    assert not [t for t in told if t[1] in ("--tp-size", "--tp")]


def test_an_undecided_check_counts_for_a_fix_only_when_it_reads_a_changed_field():
    from kit.doctor.fixcheck import touches

    fields = {"speculative_num_steps", "speculative_moe_runner_backend", "mamba_scheduler_strategy", "tp_size"}
    steps = {"speculative_num_steps": 3}
    # sglang 0.5.11 server_args.py:3306, undecided statically: another field that shares a word
    assert not touches("not (self.speculative_moe_runner_backend is None) and not (not MoeRunnerBackend("
                       "self.speculative_moe_runner_backend).is_flashinfer_trtllm())", steps, fields)
    assert touches("self.speculative_num_steps < 1", steps, fields)
    # a method that reads the field: a long word of its name inside a name that is no field
    assert touches("self.enable_mamba_extra_buffer()", {"mamba_scheduler_strategy": "extra_buffer"}, fields)
