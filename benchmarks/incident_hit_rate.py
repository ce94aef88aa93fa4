"""The doctor on the corpus of real incidents (data/incidents/): each case's evidence exactly as
posted, run offline; the rank of the stated cause among the findings, and the hit rates.

    .venv/bin/python benchmarks/incident_hit_rate.py          # the table, then top-1 / top-3

Each case.yaml says what it expects (``expect``): ``rule`` and ``rank_at_most`` (the stated cause
is a rule's finding), ``names_evidence`` (the kit cannot see the cause in the posted evidence; the
output must name the evidence that would show it), or ``fine`` (the server was fine: ``no_rules``
must not fire, ``no_findings`` nothing at all). tests/test_incidents_doctor.py asserts them.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent / "data" / "incidents"


@dataclass
class Outcome:
    name: str
    version: str
    cause: str
    expect: dict
    findings: list[str]
    text: str

    @property
    def rank(self) -> int | None:
        rule = self.expect.get("rule")
        return self.findings.index(rule) + 1 if rule in self.findings else None

    @property
    def passed(self) -> bool:
        e = self.expect
        if "rule" in e:
            return self.rank is not None and self.rank <= int(e.get("rank_at_most", 3))
        if "names_evidence" in e:
            return e["names_evidence"].lower() in " ".join(self.text.split()).lower()
        if e.get("fine"):
            if e.get("no_findings") and self.findings:
                return False
            return not set(e.get("no_rules") or []) & set(self.findings)
        return False


def cases() -> list[Path]:
    return sorted(p for p in ROOT.iterdir() if (p / "case.yaml").is_file())


def run(path: Path) -> Outcome:
    """The doctor on one case: every evidence file given as a paste (split into its pieces), the
    flag table of ``reader_version`` when the case has launch text. The server's release is the case's
    ``version`` when the post names one, else unknown: the reader's version is never claimed for it."""
    import kit.doctor

    data = yaml.safe_load((path / "case.yaml").read_text())
    files = list(dict.fromkeys(str(path / item["file"]) for item in data["evidence"]))
    ev = kit.doctor.from_files(paste=files, sglang=data.get("reader_version"))
    release = re.fullmatch(r"\d+\.\d+(\.\d+)?(\.?post\d+|rc\d+)?", str(data["version"]))
    ev.version = str(data["version"]) if release else None  # the server's release, not the flag table's
    diagnosis = kit.doctor.diagnose(ev)
    return Outcome(path.name, str(data["version"]), str(data["cause"]), data.get("expect") or {},
                   [f.id for f in diagnosis.findings], diagnosis.to_text(width=200))


def table(outcomes: list[Outcome]) -> str:
    rows = ["| case | version | stated cause | expected | doctor's rank / result |", "| --- | --- | --- | --- | --- |"]
    for o in outcomes:
        e = o.expect
        want = (f"rule `{e['rule']}` in top {e.get('rank_at_most', 3)}" if "rule" in e else
                f"names \"{e['names_evidence']}\"" if "names_evidence" in e else "no false alarm" if e.get("fine")
                else "?")
        got = (f"rank {o.rank}" if o.rank else "not found") if "rule" in e else ("yes" if o.passed else "NO")
        rows.append(f"| `{o.name}` | {o.version} | {o.cause[:90]} | {want} | {got} |")
    return "\n".join(rows)


def hit_rates(outcomes: list[Outcome]) -> dict:
    """Top-1 and top-3 over the cases whose stated cause is a rule's finding, and over the corpus."""
    detectable = [o for o in outcomes if "rule" in o.expect]
    top1 = sum(1 for o in detectable if o.rank == 1)
    top3 = sum(1 for o in detectable if o.rank is not None and o.rank <= 3)
    return {"cases": len(outcomes), "detectable": len(detectable), "top1": top1, "top3": top3,
            "passed": sum(o.passed for o in outcomes)}


def main() -> int:
    outcomes = [run(p) for p in cases()]
    print(table(outcomes))
    h = hit_rates(outcomes)
    print(f"\n{h['cases']} cases; stated cause a rule's finding in {h['detectable']}: top-1 {h['top1']}/"
          f"{h['detectable']}, top-3 {h['top3']}/{h['detectable']} (over the whole corpus: top-1 "
          f"{h['top1']}/{h['cases']}, top-3 {h['top3']}/{h['cases']}); every expectation met in "
          f"{h['passed']}/{h['cases']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
