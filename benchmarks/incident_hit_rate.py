"""The doctor on the corpus of real incidents (data/incidents/): each case's evidence exactly as
posted, run offline; the rank of the stated cause among the findings, and the hit rates.

    .venv/bin/python benchmarks/incident_hit_rate.py          # the table, top-1 / top-3, then the first-look report

Two ways to give the doctor a case's release:

- as posted (the default for first-look cases, those with a ``first_look`` block): ``--sglang`` only when the
  post states the release (``reader_version`` of a first-look case, the ``version`` of an older one when it is
  a release), never a flag table chosen for the corpus;
- reader (the default for the older cases): the case's ``reader_version``, as the corpus table always ran.

The first-look report lists the first-look cases: the outcome recorded in case.yaml when the case was added
(``first_look``: kit commit, command, outcome, rank of the stated cause) beside the outcome of the code run
now, with top-1 / top-3 of both and the gap between them.

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
    first_look: dict | None = None
    mode: str = "reader"

    @property
    def first_look_miss(self) -> bool:
        return bool(self.first_look) and self._miss

    _miss: bool = False
    kind: str = ""

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


_RELEASE = r"\d+\.\d+(\.\d+)?(\.?post\d+|rc\d+)?"


def posted_version(data: dict) -> str | None:
    """The release the post states, what a user would pass as --sglang: a first-look case's
    ``reader_version`` (set only when the post states it), an older case's ``version`` when it is a release."""
    if data.get("first_look"):
        return data.get("reader_version")
    return str(data["version"]) if re.fullmatch(_RELEASE, str(data["version"])) else None


def run(path: Path, mode: str | None = None) -> Outcome:
    """The doctor on one case: every evidence file given as a paste (split into its pieces). ``mode``
    "as_posted" passes the release only when the post states one; "reader" passes the case's
    ``reader_version`` (the flag table of the corpus). Default: as posted for a first-look case, reader for
    the others. The server's release is the case's ``version`` when the post names one, else unknown: the
    reader's version is never claimed for it."""
    import kit.doctor

    data = yaml.safe_load((path / "case.yaml").read_text())
    mode = mode or ("as_posted" if data.get("first_look") else "reader")
    files = list(dict.fromkeys(str(path / item["file"]) for item in data["evidence"]))
    sglang = posted_version(data) if mode == "as_posted" else data.get("reader_version")
    ev = kit.doctor.from_files(paste=files, sglang=sglang)
    release = re.fullmatch(_RELEASE, str(data["version"]))
    if release or mode == "reader":
        ev.version = str(data["version"]) if release else None  # the server's release, not the flag table's
    diagnosis = kit.doctor.diagnose(ev)
    return Outcome(path.name, str(data["version"]), str(data["cause"]), data.get("expect") or {},
                   [f.id for f in diagnosis.findings], diagnosis.to_text(width=200),
                   first_look=data.get("first_look"), mode=mode, _miss=bool(data.get("first_look_miss")),
                   kind=str(data.get("first_look_cause_kind") or ""))


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


def first_look_report(outcomes: list[Outcome]) -> str:
    """The first-look cases: the outcome recorded when each was added (case.yaml ``first_look``) beside the
    outcome of the code run now, then top-1 / top-3 of both over the cases whose stated cause is a rule's
    finding, how many the first look refused, and the gap."""
    if not outcomes:
        return "no first-look cases"
    rows = ["| case | kind | expected | at first look (commit) | cause rank then | now | cause rank now |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in outcomes:
        e, fl = o.expect, o.first_look or {}
        want = f"rule `{e['rule']}`" if "rule" in e else f"names \"{e.get('names_evidence')}\"" if "names_evidence" in e else "fine"
        now = (", ".join(o.findings[:3]) or "no findings") + ("" if o.passed else " (expectation not met)")
        rows.append(f"| `{o.name}` | {o.kind} | {want} | {fl.get('outcome', '?')} ({fl.get('kit_commit', '?')}) | "
                    f"{fl.get('cause_rank')} | {now} | {o.rank if 'rule' in e else 'n/a'} |")
    rule_cases = [o for o in outcomes if "rule" in o.expect]
    then1 = sum(1 for o in rule_cases if (o.first_look or {}).get("cause_rank") == 1)
    then3 = sum(1 for o in rule_cases if ((o.first_look or {}).get("cause_rank") or 99) <= 3)
    now1 = sum(1 for o in rule_cases if o.rank == 1)
    now3 = sum(1 for o in rule_cases if o.rank is not None and o.rank <= 3)
    refused = sum(1 for o in outcomes if str((o.first_look or {}).get("outcome", "")).startswith("refused"))
    met_then = sum(1 for o in outcomes if not o.first_look_miss)
    n, k = len(outcomes), len(rule_cases)
    rows.append("")
    rows.append(f"first look: top-1 {then1}/{k}, top-3 {then3}/{k} of the {k} cases whose stated cause is a rule's finding; "
                f"{refused}/{n} refused outright; expectation met in {met_then}/{n}")
    rows.append(f"now:        top-1 {now1}/{k}, top-3 {now3}/{k}; expectation met in {sum(o.passed for o in outcomes)}/{n}")
    rows.append(f"gap (now - first look): top-1 {now1 - then1:+d}, top-3 {now3 - then3:+d}, "
                f"expectations {sum(o.passed for o in outcomes) - met_then:+d}")
    return "\n".join(rows)


def main() -> int:
    every = [run(p) for p in cases()]
    outcomes = [o for o in every if not o.first_look]
    print(table(outcomes))
    h = hit_rates(outcomes)
    print(f"\n{h['cases']} cases; stated cause a rule's finding in {h['detectable']}: top-1 {h['top1']}/"
          f"{h['detectable']}, top-3 {h['top3']}/{h['detectable']} (over the whole corpus: top-1 "
          f"{h['top1']}/{h['cases']}, top-3 {h['top3']}/{h['cases']}); every expectation met in "
          f"{h['passed']}/{h['cases']}")
    print("\nFirst-look cases (as posted):\n" + first_look_report([o for o in every if o.first_look]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
