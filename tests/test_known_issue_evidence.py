"""The known-issues database against the evidence each entry's own thread posted (tests/data/known_issue_evidence).

Each case is a thread's posts kept verbatim; the doctor reads them as a paste and the database must give the
entry the status the case expects. See that directory's README.md for the format and the rule that a case is
never edited to pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kit.doctor import from_files, known_issues
from kit.doctor.known_report import report

CASES = Path(__file__).parent / "data" / "known_issue_evidence"
ALL = sorted(p.parent for p in CASES.glob("*/case.yaml"))
IDS = {e["id"] for e in known_issues.load()}


def _case(path: Path) -> dict:
    return yaml.safe_load((path / "case.yaml").read_text())


def test_the_cases_are_real_and_cover_thirty_entries():
    entries = set()
    for path in ALL:
        case = _case(path)
        assert case["entry"] in IDS, f"{path.name}: {case['entry']} is not in the database"
        assert case["url"].startswith("https://github.com/"), path.name
        assert case["expect"] in ("matches", "partial"), path.name
        assert case["expect"] == "matches" or case.get("why"), f"{path.name}: a partial case says why"
        sources = (path / "SOURCES.md").read_text()
        for name in case["files"]:
            assert (path / name).is_file(), f"{path.name}: {name} is missing"
            assert name in sources, f"{path.name}: SOURCES.md does not say where {name} was posted"
        entries.add(case["entry"])
    assert len(entries) >= 30, f"real posted evidence for {len(entries)} entries (at least 30 wanted)"


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_the_entry_meets_its_threads_evidence(path):
    case = _case(path)
    ev = from_files(paste=[str(path / f) for f in case["files"]], sglang=case.get("sglang"))
    ev = known_issues.evidence_for(case.get("sglang"), case.get("gpu"), case.get("model"), evidence=ev)
    found = report(ev)
    status = {m.id: m.status for m in found.matches + found.partial}
    assert status.get(case["entry"]) == case["expect"], (
        f"{case['entry']}: {status.get(case['entry'], 'no match')}, expected {case['expect']}; problems: "
        f"{ev.problems[:4]}")
