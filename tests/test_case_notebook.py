"""notebooks/08_case against the lab and against a case captured from it, and the case the guided notebooks keep.

The lab runs here as a process in its own directory (its snapshots: it starts in seconds). 08_case runs
twice through kit.notebook.execute, as the demo runs notebooks: live, and on a case kit.capture wrote from
the same lab, with a target that cannot be reached, so the case run proves it reads nothing live.
kit.notebook.start (the first cell of 01-05) keeps the server's case in out/case of the working directory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _notebook_support import cells as _cells
from _notebook_support import outputs as _outputs
from _notebook_support import source as _source

import kit
from kit.case.layout import open_case

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "08_case.ipynb"
UNREACHABLE = "ssh://nobody@127.0.0.1:9"  # nothing listens there: a notebook that connects fails


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The lab on the incident's new launch, on a free port, in a directory of its own."""
    from _lab_support import free_port

    from kit.lab.control import Lab

    mp = pytest.MonkeyPatch()
    mp.setenv("SGL_KIT_LAB_DIR", str(tmp_path_factory.mktemp("lab")))  # the kernels inherit it
    mp.setenv("SGL_KIT_LAB_DRYRUN", "0")
    lab = Lab()
    status = lab.up(variant="new", port=free_port())
    try:
        yield status
    finally:
        lab.down()
        mp.undo()


def _cell_text(path: Path, code: str) -> str:
    """The text outputs of the one code cell whose source holds ``code`` (no cell of the run failed)."""
    _outputs(path)
    found = [c for c in _cells(path) if c["cell_type"] == "code" and code in _source(c)]
    assert len(found) == 1, code
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                     for o in found[0].get("outputs", []))


def _finding_ids(text: str) -> list[str]:
    return re.findall(r"^\d+\. \[([a-z0-9-]+)\]", text, re.M)


@pytest.mark.slow
def test_08_reads_a_case_offline_with_the_answer_the_live_lab_gives(lab, tmp_path):
    from kit.case.notes import note, resolve

    captured = kit.capture("lab", tmp_path / "slow-night", interval=1.0)
    recorded = [f["id"] for f in open_case(captured.path).findings["findings"]]
    assert recorded  # the lab's incident: the doctor has something to say
    note(captured.path, "decode at 38 tok/s since the 14:02 restart", finding=recorded[0], by="ana")
    resolve(captured.path, cause="the steps the launch sets", fix="--speculative-num-steps 3", by="ana")

    live, offline = tmp_path / "live.ipynb", tmp_path / "case.ipynb"
    kit.notebook.execute(NOTEBOOK, live, {"target": "lab"}, cwd=tmp_path, timeout=300)
    page = tmp_path / "shared" / "case.html"
    page.parent.mkdir()
    kit.notebook.execute(NOTEBOOK, offline, {"target": UNREACHABLE, "case_dir": str(captured.path),
                                             "share_to": str(page)}, cwd=tmp_path, timeout=300)

    # the same findings, in the same order, live and from the case, and the ones recorded at capture
    answer_live = _finding_ids(_cell_text(live, "diagnosis_view("))
    answer_case = _finding_ids(_cell_text(offline, "diagnosis_view("))
    assert answer_live == answer_case == recorded
    assert "the same answer" in _cell_text(offline, "subject.comparison()")
    assert "nothing recorded one to compare it with" in _cell_text(live, "subject.comparison()")

    # what the case is, from its case.yaml: where it came from, what was and was not collected
    about = _cell_text(offline, "open_target(")
    meta = open_case(captured.path).meta
    assert f"the case {captured.path} captured at {meta['captured']['at']} from lab" in about
    assert f"pid {lab.pid}, port {lab.port}" in about and "sglang: 0.5.11" in about
    for name in ("findings.json", "server.log", "launch.sh", "server_info.json"):
        assert re.search(rf"^  {re.escape(name)} ", about, re.M), name
    for piece in meta["missing"]:
        assert f"  {piece}: " in about
    assert about.startswith("the case") and "live:" not in about
    assert _cell_text(live, "open_target(").startswith(f"live: lab (the server pid {lab.pid}")

    notes = _cell_text(offline, "subject.notes()")
    assert f"ana on {recorded[0]}: decode at 38 tok/s since the 14:02 restart" in notes
    assert "cause: the steps the launch sets" in notes and "fix: --speculative-num-steps 3" in notes

    # the lines cited: kept in the case, and read from the server's sglang live; the same lines either way
    excerpt = open_case(captured.path).excerpts[0]
    cited = [line for line in _cell_text(offline, "subject.excerpts()").splitlines() if re.match(r"^ +\d+> ", line)]
    assert cited and all(any(f"{n}> " in line for line in cited) for n in excerpt.lines)
    assert cited == [line for line in _cell_text(live, "subject.excerpts()").splitlines()
                     if re.match(r"^ +\d+> ", line)]

    assert page.is_file() and "slow-night" in page.read_text()
    assert "sgl-kit capture lab -o DIR" in _cell_text(live, "subject.share(")


@pytest.mark.slow
def test_start_keeps_the_servers_case_in_out_case(lab, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # out/case is relative to where the notebook runs
    first = kit.notebook.start("lab")
    case = tmp_path / "out" / "case"
    assert first.case == Path("out/case") and (case / "case.yaml").is_file() and (case / "findings.json").is_file()
    meta = open_case(case).meta
    assert meta["captured"]["target"] == "lab" and meta["captured"]["server"]["pid"] == lab.pid
    files = len(meta["files"]) + 1  # case.yaml with them
    assert f"case: captured to out/case ({files} files)" in first.to_text()
    assert "<b>case</b>: captured to out/case" in first._repr_html_()

    written = (case / "case.yaml").stat().st_mtime_ns
    again = kit.notebook.start("lab")
    assert again.case == Path("out/case")
    assert f"case: out/case already holds this server's (captured at {meta['captured']['at']})" in again.to_text()
    assert (case / "case.yaml").stat().st_mtime_ns == written

    # a case of another server there (another pid) is captured over
    older = open_case(case)
    older.meta["captured"]["server"]["pid"] = 1
    older.save()
    third = kit.notebook.start("lab")
    assert "case: captured to out/case" in third.to_text() and "replacing the case of pid 1 on lab" in third.to_text()
    assert open_case(case).meta["captured"]["server"]["pid"] == lab.pid

    # a capture that stopped half-way (its own files, no case.yaml) is captured over
    (case / "case.yaml").unlink()
    fourth = kit.notebook.start("lab")
    assert "case: captured to out/case" in fourth.to_text() and "over a capture that did not finish" in fourth.to_text()
    assert (case / "case.yaml").is_file()

    # a capture that cannot be written is one line; the notebook's start still has its server
    (tmp_path / "taken").write_text("a file, not a directory\n")
    failed = kit.notebook.start("lab", capture="taken")
    assert failed.server.pid == lab.pid and failed.case is None
    (line,) = [t for t in failed.to_text().splitlines() if t.startswith("case:")]
    assert line.startswith("case: not captured to taken: ") and "is a file" in line
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("someone's own file\n")
    kept = kit.notebook.start("lab", capture="notes")
    assert "case: not captured to notes: notes holds files that are not a case's (mine.txt)" in kept.to_text()
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["mine.txt"]

    off = kit.notebook.start("lab", capture="")
    assert off.case is None and "case:" not in off.to_text()


def test_open_target_refuses_a_directory_that_is_no_case_in_one_line(tmp_path):
    with pytest.raises(kit.errors.CaseError, match="is not a case: it has no case.yaml") as err:
        kit.notebook.open_target("lab", str(tmp_path))
    assert "sgl-kit capture" in err.value.hint
