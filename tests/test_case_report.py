"""`sgl-kit report --case DIR`: a captured case as one self-contained HTML page (kit.report.case_page).

The case is built as `sgl-kit capture` lays it out (kit.case.layout): case.yaml, findings.json from a
real doctor run over a real sglang 0.5.11 log, an excerpt of the real 0.5.11 source, and a server.log
with secrets planted in it, which must not reach the page in any form.
"""

from __future__ import annotations

import base64
import html
import importlib.util
import json
import re
import shutil
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from kit.case.layout import FINDINGS_FILE, now, sha256_text, write_meta
from kit.cli import main
from kit.errors import CaseError, ReportError
from kit.report.case_page import MAX_FILE_CHARS, NO_ANSWER, case_report

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests/data/real_server/qwen3_5-cpu-0.5.11.log"
API_KEY = "sk-live-9fQ2xR7mT4vB8nK3pL6wZ1yC5dH0jG"
HF_TOKEN = "hf_Zq8rT3mN6vB1xK9pL4wY7cD2fH5jG0sAeUo"
SECRETS = (API_KEY, HF_TOKEN)
NOTE_ON_FINDING = "the log agrees: torch_native attention was asked for on a CPU box"
GENERAL_NOTE = "captured during the evening load test, after the restart"
CAUSE = "the server runs on CPU with torch_native attention; CUDA graphs cannot apply"
FIX = "move it to the GPU pool; launch with --attention-backend flashinfer"
SITE_LINES = (2553, 2560)  # srt/server_args.py of 0.5.11: `self.disable_cuda_graph = True` for torch_native
CITED = 2557


def _listed(answer: dict) -> list[dict]:
    """The findings, then those listed apart (found, but not on this hardware or workload), in the page's order."""
    return answer["findings"] + answer.get("not_applicable", [])


@pytest.fixture(scope="module")
def answer() -> dict:
    """The doctor's real answer over a real 0.5.11 log, as findings.json holds it."""
    import kit

    d = kit.doctor.doctor(log=str(LOG), sglang="0.5.11")
    data = json.loads(json.dumps(d.to_dict()))
    # the log's server runs on CPU: the GPU rules' findings are listed apart, and the page shows them too
    assert len(_listed(data)) >= 2, [f["id"] for f in _listed(data)]
    return data


@pytest.fixture(scope="module")
def source_root() -> Path:
    from kit.launch_file import source_tree

    return Path(source_tree(None, "0.5.11").root)


def _excerpt(source_root: Path) -> tuple[str, str]:
    """The lines around the cited one of the real 0.5.11 srt/server_args.py, as a capture writes them
    (numbered, the cited line marked ``>``), and the whole file's sha256."""
    from kit.launch_file import source_tree

    start, end = SITE_LINES
    snippet = source_tree(None, "0.5.11").read("srt/server_args.py", start, end)
    whole = sha256_text((source_root / "srt/server_args.py").read_text(encoding="utf-8"))
    rows = [f"{n:>6}{'>' if n == CITED else ' '} {line.rstrip()}"
            for n, line in zip(range(start, end + 1), snippet.lines, strict=True)]
    return f"# srt/server_args.py (sha256 {whole})\n" + "\n".join(rows) + "\n", whole


def make_case(base: Path, answer: dict | None, source_root: Path) -> Path:
    case = base / "case-slow-decode"
    (case / "sources").mkdir(parents=True)
    log = LOG.read_text(encoding="utf-8").replace("api_key=None", f"api_key='{API_KEY}'", 1)
    log += (f"[2026-12-02 00:40:01] relaunch: python -m sglang.launch_server --api-key {API_KEY} --port 30000\n"
            f"[2026-12-02 00:40:01] HF_TOKEN={HF_TOKEN} read from the environment\n")
    (case / "server.log").write_text(log, encoding="utf-8")
    (case / "launch.sh").write_text("python -m sglang.launch_server \\\n  --model-path /models/qwen \\\n"
                                    "  --api-key <redacted> \\\n  --device cpu\n", encoding="utf-8")
    files = {"server.log": "the server log's first and last lines",
             "launch.sh": "the server's command line, secret-named values masked",
             "sources/srt__server_args.py.txt": "the lines of srt/server_args.py the findings cite"}
    if answer is not None:
        (case / FINDINGS_FILE).write_text(json.dumps(answer, indent=1), encoding="utf-8")
        files[FINDINGS_FILE] = "the doctor's answer at capture time"
    text, whole_sha = _excerpt(source_root)
    excerpt = case / "sources" / "srt__server_args.py.txt"
    excerpt.write_text(text, encoding="utf-8")
    first_id = _listed(answer)[0]["id"] if answer else "decode-cuda-graph-off"
    meta = {
        "format": 1, "id": "case-slow-decode", "kind": "captured",
        "captured": {"at": "2026-12-02T00:41:07Z", "seconds": 4.2, "kit": "0.1.0", "target": "gpu-box-7",
                     "server": {"pid": 4242, "port": 30000, "url": "http://127.0.0.1:30000"}, "interval": 5},
        "sglang": {"version": "0.5.11", "record_sha256": "ab" * 32, "wheel_sha256": None},
        "files": files,
        "missing": {"nvidia-smi.txt": "nvidia-smi is not installed on the target"},
        "endpoints": {"/v1/loads": "served (srt/entrypoints/v1_loads.py:134)"},  # as sglang 0.5.11 declares it
        "redacted": [{"file": "launch.sh", "names": ["api_key"], "count": 1}],
        "excerpts": [{"file": "srt/server_args.py", "sha256": whole_sha, "text_sha256": sha256_text(text),
                      "path": "sources/srt__server_args.py.txt", "lines": [CITED]}],
        "notes": [{"at": "2026-12-02T09:12:00Z", "by": "alice", "text": NOTE_ON_FINDING, "finding": first_id},
                  {"at": "2026-12-02T09:30:00Z", "by": "bob", "text": GENERAL_NOTE}],
        "resolution": {"cause": CAUSE, "fix": FIX, "at": now(), "by": "alice", "run": "runs/after-fix.json"},
    }
    write_meta(case, meta)
    return case


@pytest.fixture
def case(tmp_path: Path, answer: dict, source_root: Path) -> Path:
    return make_case(tmp_path, answer, source_root)


def _forms(secret: str) -> set[str]:
    """The forms a secret could leak in: plain, escaped, URL-encoded, base64 at each alignment."""
    forms = {secret, html.escape(secret), quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    for pad in range(3):
        encoded = base64.b64encode(b"x" * pad + secret.encode()).decode().rstrip("=")
        forms.add(encoded[4 if pad else 0:-4])  # the core, free of the neighbours' bits
    return forms


def test_the_page_shows_the_resolution_the_notes_beside_their_finding_and_no_secret(case: Path, answer: dict):
    result = case_report(case)
    page = result.path.read_text(encoding="utf-8")
    assert result.path == case / "report.html" and result.bytes == len(page.encode())
    assert result.case == "case-slow-decode" and result.findings == len(answer["findings"]) and result.notes == 2

    # the title, then the resolution before the answer
    assert "<title>case case-slow-decode</title>" in page and "0.5.11" in page and "gpu-box-7" in page
    assert page.index(html.escape(CAUSE)) < page.index("The answer") and html.escape(FIX) in page
    assert "runs/after-fix.json" in page

    # the note on the first finding sits between its title and the next finding's
    first, second = _listed(answer)[:2]
    titles = page.index('class="finding-title"')  # the answer's shape above names the best guess's title too
    at_first = page.index(html.escape(first["title"]), titles)
    at_note = page.index(html.escape(NOTE_ON_FINDING))
    at_second = page.index(html.escape(second["title"]), at_first + 1)
    assert at_first < at_note < at_second
    assert "2026-12-02T09:12:00Z, alice" in page[at_first:at_second]
    # the general note above the findings
    assert page.index(html.escape(GENERAL_NOTE)) < at_first
    # each finding's evidence and fix lines, and the estimate in words
    assert html.escape(first["evidence"][0]) in page and html.escape(first["fix"][0]) in page
    assert html.escape(f"not estimated: {first['impact_reason']}") in page

    # the cited source lines, from the excerpt file, after the findings
    assert page.index("The source lines cited") > at_second
    assert html.escape("self.disable_cuda_graph = True") in page
    assert '<span class="cited">  2557&gt;             self.disable_cuda_graph = True</span>' in page
    assert '<a href="#excerpt-0">srt/server_args.py:2557</a>' in page  # the finding's site links to its lines

    # the evidence: one collapsed <details> per file (the excerpt's points up to its lines), then what was
    # missing and what was redacted
    assert page.count("<details>") == 4 and "<details open" not in page
    for name in ("server.log", "launch.sh", FINDINGS_FILE, "sources/srt__server_args.py.txt"):
        assert f"<summary>{name} " in page
    assert page.count("self.disable_cuda_graph = True") == 1
    assert "nvidia-smi is not installed on the target" in page
    assert "launch.sh: api_key (1)" in page

    # the planted secrets: gone, in every form; what replaced them is said, by kind
    for secret in SECRETS:
        for form in _forms(secret):
            assert form not in page, f"a form of a planted secret is on the page: {form!r}"
    assert "&lt;redacted:api_key&gt;" in page and "&lt;redacted:hf_token&gt;" in page
    assert result.counts["api_key"] >= 2 and result.counts["hf_token"] >= 1
    assert "this page: " in page and "api_key" in page.split("What was redacted")[1]

    # offline: no script, nothing fetched
    assert "<script" not in page.lower() and "http-equiv=\"Content-Security-Policy\"" in page
    assert not any(f'{attr}="http' in page for attr in ("src", "href"))


def test_a_note_that_holds_a_secret_loses_it_on_the_page(case: Path):
    import yaml

    meta = yaml.safe_load((case / "case.yaml").read_text())
    meta["notes"].append({"at": "2026-12-02T10:00:00Z", "by": "carol", "text": f"tried the key {API_KEY} by hand"})
    write_meta(case, meta)
    page = case_report(case, case / "shared.html").path.read_text()
    assert "tried the key" in page and API_KEY not in page


def test_without_an_answer_the_page_says_how_to_get_one(tmp_path: Path, source_root: Path):
    case = make_case(tmp_path, None, source_root)
    result = case_report(case)
    page = result.path.read_text()
    assert result.answer is None and result.findings == 0
    assert html.escape(NO_ANSWER.replace("DIR", str(case))) in page
    assert html.escape(GENERAL_NOTE) in page and html.escape(NOTE_ON_FINDING) in page  # no note is lost


def test_a_given_diagnosis_replaces_findings_json(case: Path, answer: dict):
    replayed = dict(answer, findings=answer["findings"][1:])
    result = case_report(case, diagnosis=replayed)
    page = result.path.read_text()
    assert result.answer == "replayed" and result.findings == len(answer["findings"]) - 1
    assert "replayed on this case" in page
    # the note on the finding the replay no longer has is kept, said to be on a finding this answer lacks
    assert "notes on findings this answer does not have" in page and html.escape(NOTE_ON_FINDING) in page


def test_a_changed_excerpt_is_refused(case: Path):
    excerpt = case / "sources" / "srt__server_args.py.txt"
    excerpt.write_text(excerpt.read_text() + "# an edit after capture\n")
    with pytest.raises(CaseError) as err:
        case_report(case)
    assert "\n" not in err.value.message and "changed after capture" in err.value.message
    assert not (case / "report.html").exists()


def test_a_big_evidence_file_is_cut_with_a_note(case: Path):
    (case / "server.log").write_text("Decode batch, #running-req: 1, gen throughput (token/s): 3.1\n" * 6000)
    result = case_report(case)
    page = result.path.read_text()
    assert result.cut == ["server.log"] and "cut here: the first" in page
    assert page.count("Decode batch, #running-req") <= MAX_FILE_CHARS // 60 + 1


def test_binary_bytes_in_an_evidence_file_do_not_break_the_page(case: Path):
    (case / "launch.sh").write_bytes(b"python -m sglang.launch_server\x00--tp 2\xff\xfe\n")
    page = case_report(case).path.read_text()
    assert "python -m sglang.launch_server\ufffd--tp 2" in page and "\x00" not in page


def test_an_unwritable_output_names_the_path(case: Path, tmp_path: Path):
    with pytest.raises(ReportError, match="no-such-dir"):
        case_report(case, tmp_path / "no-such-dir" / "page.html")
    with pytest.raises(ReportError, match="a file of the case"):
        case_report(case, case / "server.log")


def test_redact_hosts_replaces_the_target(case: Path):
    result = case_report(case, hosts=True)
    page = result.path.read_text()
    assert "gpu-box-7" not in page and "<td>host-1</td>" in page and result.counts["hostname"] >= 1


# --- the command line


def test_cli_writes_the_page_and_says_what_it_holds(case: Path, answer: dict, capsys):
    out = case / "page.html"
    assert main(["report", "--case", str(case), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"wrote {out} (") and lines[0].endswith(
        f"the case case-slow-decode, {len(answer['findings'])} finding{'' if len(answer['findings']) == 1 else 's'}, "
        "2 notes")
    assert re.fullmatch(r"  \d+ secrets removed: \d+ api_key, \d+ hf_token", lines[1]), lines
    assert out.is_file()
    assert main(["report", "--case", str(case), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(case / "report.html") and data["notes"] == 2 and data["secrets_removed"] >= 3


def test_cli_a_dir_that_is_not_a_case_is_one_line_and_exit_2(tmp_path: Path, capsys):
    assert main(["report", "--case", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("sgl-kit: error:")]
    assert len(errors) == 1 and "is not a case" in errors[0] and "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize("argv", [["report"], ["report", "x.ipynb", "--case", "."], ["report", "--case", ".", "--markdown"],
                                  ["report", "x.ipynb", "--replay"]])
def test_cli_notebooks_or_case_exactly_one(argv: list[str], capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("sgl-kit: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err


@pytest.mark.skipif(importlib.util.find_spec("kit.case.replay") is None,
                    reason="kit.case.replay (the doctor over a case's files) is not in this tree yet")
def test_cli_replay_shows_the_answer_of_now(case: Path, capsys):
    (case / FINDINGS_FILE).unlink()
    meta_files = json.loads(json.dumps(__import__("yaml").safe_load((case / "case.yaml").read_text())))
    meta_files["files"].pop(FINDINGS_FILE)
    write_meta(case, meta_files)
    assert main(["report", "--case", str(case), "--replay"]) == 0
    out = capsys.readouterr().out
    assert "(replayed now)" in out
    page = (case / "report.html").read_text()
    assert "replayed on this case" in page and NO_ANSWER not in html.unescape(page)


def test_the_case_dir_can_be_copied_and_read_elsewhere(case: Path, tmp_path: Path):
    moved = shutil.copytree(case, tmp_path / "elsewhere" / "case")
    assert case_report(moved).path.parent == moved
