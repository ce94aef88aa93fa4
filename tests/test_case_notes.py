"""Notes and the resolution of a case (kit.case.notes, `sgl-kit case note|resolve|show`).

The case is made by hand in the layout of kit.case.layout from real evidence: a real sglang 0.5.11 log,
a real nvidia-smi, findings.json from the doctor over them (tests/_case_notes_support.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _case_notes_support import RUN, findings, make_case

from kit.bench import BenchRun
from kit.case.layout import open_case
from kit.case.notes import note, resolve, show, summary
from kit.errors import CaseError, UsageError

SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"
API_KEY = "sk-live-9f8e7d6c5b4a39281706abcd"
HF_TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456"


def sgl_kit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=env)


@pytest.fixture
def case(tmp_path) -> Path:
    return make_case(tmp_path / "cases")


def _meta(case: Path) -> dict:
    return yaml.safe_load((case / "case.yaml").read_text())


def test_a_note_on_a_finding_is_dated_signed_and_kept(case):
    target = findings()[1]["id"]
    out = note(case, "off since the 0.5.11 upgrade, says the on-call log", finding=target, by="alice")
    assert "masked" not in out
    [stored] = _meta(case)["notes"]
    assert stored == {"at": out["at"], "by": "alice", "text": "off since the 0.5.11 upgrade, says the on-call log",
                      "finding": target}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stored["at"])
    note(case, "a second one, on no finding", by="bob")
    notes = open_case(case).notes
    assert [n["by"] for n in notes] == ["alice", "bob"] and "finding" not in notes[1]
    # the rest of case.yaml is as captured
    assert _meta(case)["captured"]["target"] == "gpu-box" and _meta(case)["excerpts"]


def test_the_signature_defaults_to_sgl_kit_user(case, monkeypatch):
    monkeypatch.setenv("SGL_KIT_USER", "carol")
    assert note(case, "seen")["by"] == "carol"


def test_a_note_on_an_unknown_finding_names_the_ones_there_are(case):
    ids = [f["id"] for f in findings()]
    typo = ids[1][:-1] + "x"
    with pytest.raises(CaseError) as err:
        note(case, "x", finding=typo)
    assert typo in err.value.message and all(i in err.value.message for i in ids)
    assert f"did you mean {ids[1]}?" in err.value.hint and "sgl-kit case show" in err.value.hint
    assert _meta(case)["notes"] == []  # nothing written


def test_a_note_without_findings_json_or_text_is_refused(case):
    with pytest.raises(UsageError):
        note(case, "   ")
    (case / "findings.json").unlink()
    with pytest.raises(CaseError) as err:
        note(case, "x", finding="decode-cuda-graph-off")
    assert "no findings.json" in err.value.message and "leave out --finding" in err.value.hint


def test_a_secret_in_a_note_is_masked_before_it_is_written(case):
    out = note(case, f"restarted with --api-key {API_KEY} and HF_TOKEN={HF_TOKEN}, same speed")
    assert out["masked"] == 2 and out["masked_kinds"] == ["api_key", "hf_token"]
    raw = (case / "case.yaml").read_text()
    assert API_KEY not in raw and HF_TOKEN not in raw
    assert "<redacted:api_key>" in raw and "same speed" in raw


def test_a_corpus_case_is_shown_and_not_written(tmp_path):
    corpus_case = tmp_path / "sglang-1338-decode-only"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "incidents" / corpus_case.name, corpus_case)
    before = (corpus_case / "case.yaml").read_text()
    with pytest.raises(CaseError) as err:
        note(corpus_case, "x")
    assert "not a captured case" in err.value.message and "sgl-kit capture" in err.value.hint
    with pytest.raises(CaseError):
        resolve(corpus_case, cause="c", fix="f")
    assert (corpus_case / "case.yaml").read_text() == before
    text = show(corpus_case)
    assert "captured: not stated" in text and "files (0):" in text and "sgl-kit case" not in text


def test_resolve_copies_a_run_from_outside_the_case(case, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    run = runs / "after.jsonl"
    shutil.copyfile(RUN, run)
    out = resolve(case, cause="the decode CUDA graph was off", fix="launch without --disable-cuda-graph", run=run,
                  by="alice")
    assert out["run"] == "run.jsonl" and "masked" not in out
    copied = case / "run.jsonl"
    assert copied.is_file() and len(BenchRun.load(copied).results) == len(BenchRun.load(RUN).results)
    meta = _meta(case)
    assert meta["resolution"] == {"cause": "the decode CUDA graph was off", "fix": "launch without --disable-cuda-graph",
                                  "at": out["at"], "by": "alice", "run": "run.jsonl"}
    assert "run.jsonl" in meta["files"]  # the case lists it: it stays self-contained
    # a run already inside the case is kept where it is
    inside = case / "runs" / "before.jsonl"
    inside.parent.mkdir()
    shutil.copyfile(RUN, inside)
    assert resolve(case, cause="c", fix="f", run=inside)["run"] == "runs/before.jsonl"
    assert not (case / "run-2.jsonl").exists()


def test_a_run_file_that_is_missing_or_not_json_is_refused(case, tmp_path):
    with pytest.raises(CaseError) as err:
        resolve(case, cause="c", fix="f", run=tmp_path / "nope.jsonl")
    assert "no run file" in err.value.message and "sgl-kit bench" in err.value.hint
    text = tmp_path / "notes.txt"
    text.write_text("decode went up to 52 tok/s\n")
    with pytest.raises(CaseError) as err:
        resolve(case, cause="c", fix="f", run=text)
    assert "neither JSON nor JSON lines" in err.value.message
    assert "resolution" not in _meta(case)
    with pytest.raises(UsageError):
        resolve(case, cause="", fix="f")


def test_resolving_again_keeps_the_earlier_resolution(case):
    first = resolve(case, cause="the overlap scheduler was off", fix="drop --disable-overlap-schedule", by="alice")
    second = resolve(case, cause="the decode CUDA graph was off", fix="drop --disable-cuda-graph", by="bob")
    meta = _meta(case)
    assert meta["resolution"]["cause"] == second["cause"] and meta["resolution"]["by"] == "bob"
    assert meta["resolution_history"] == [first]
    resolve(case, cause="third", fix="f")
    assert [r["cause"] for r in _meta(case)["resolution_history"]] == [first["cause"], second["cause"]]


def test_a_secret_in_the_resolution_is_masked(case):
    out = resolve(case, cause="a leaked key", fix=f"rotated {HF_TOKEN}")
    assert out["masked"] == 1 and HF_TOKEN not in (case / "case.yaml").read_text()


def test_show_summarises_the_case(case):
    ids = [f["id"] for f in findings()]
    note(case, "users see it from 14:02\nand it got worse at 15:00", finding=ids[0], by="alice")
    resolve(case, cause="the decode CUDA graph was off", fix="drop --disable-cuda-graph", run=RUN, by="bob")
    text = show(case)
    assert text.startswith("case slow-tuesday (captured)\n")
    assert "captured: 2026-12-02T00:38:00Z from gpu-box" in text and "sglang: 0.5.11" in text
    size = (case / "server.log").stat().st_size
    assert re.search(rf"server\.log +{size / 1e3:.1f} kB +the server log's first and last lines", text)
    assert "metrics-1.prom: the server runs without --enable-metrics" in text
    assert f"alice on {ids[0]}: users see it from 14:02\n    and it got worse at 15:00" in text
    assert "cause: the decode CUDA graph was off" in text and "run: run.jsonl" in text
    shown = re.search(r"findings at capture time \((\d+)(, the first 5)?\):\n((?:  .*\n)+)", text)
    assert int(shown[1]) == len(ids) and [line.split()[0] for line in shown[3].splitlines()][:5] == ids[:5]
    assert len([line for line in shown[3].splitlines()]) == min(5, len(ids))
    data = summary(case)
    assert [f["id"] for f in data["findings"]] == ids and data["resolution"]["by"] == "bob"


def test_show_of_a_case_without_notes_or_resolution_says_how_to_add_them(case):
    text = show(case)
    assert "notes: none (sgl-kit case note" in text and "resolution: none yet (sgl-kit case resolve" in text


# -- the command line ---------------------------------------------------------------------------------


def test_case_commands(case, tmp_path):
    ids = [f["id"] for f in findings()]
    proc = sgl_kit("case", "note", str(case), f"tried --api-key {API_KEY}", "--finding", ids[0])
    assert proc.returncode == 0, proc.stderr
    assert f"noted on {ids[0]}" in proc.stdout and "masked 1 secret value in the note (api_key)" in proc.stdout
    assert API_KEY not in (case / "case.yaml").read_text() + proc.stdout
    proc = sgl_kit("case", "resolve", str(case), "--cause", "the decode CUDA graph was off", "--fix",
                   "drop --disable-cuda-graph", "--run", str(RUN))
    assert proc.returncode == 0, proc.stderr
    assert "run: run.jsonl" in proc.stdout and f"sgl-kit practice add {case}" in proc.stdout
    proc = sgl_kit("case", "show", str(case))
    assert proc.returncode == 0 and "cause: the decode CUDA graph was off" in proc.stdout
    data = json.loads(sgl_kit("case", "show", str(case), "--json").stdout)
    assert data["id"] == "slow-tuesday" and data["notes"][0]["finding"] == ids[0]


@pytest.mark.parametrize("argv, expected", [
    (["case", "show", "{tmp}"], "is not a case: it has no case.yaml"),
    (["case", "note", "{case}", "x", "--finding", "decode-graph-off"], "the findings there are: "),
    (["case", "note", "{case}", ""], "a note needs text"),
    (["case", "resolve", "{case}", "--cause", "c", "--fix", "f", "--run", "{tmp}/none.json"], "no run file at"),
], ids=["not-a-case", "finding-typo", "empty-note", "no-run-file"])
def test_case_errors_are_one_line_with_a_hint(case, tmp_path, argv, expected):
    proc = sgl_kit(*(a.format(tmp=tmp_path, case=case) for a in argv))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("sgl-kit: error: ") and expected in lines[0]
    assert lines[1].startswith("  -> ")
