"""The ``known-issue`` rule: sglang's known performance issues (kit/data/known_issues, kit.doctor.known_issues)
that this case meets. One finding per entry that matches, with its sources, the affected releases and how
this case's facts meet its trigger; its impact is the source's own number, "measured elsewhere". An entry
whose known keys all hold while some are unknown is an open question ("not checked: needs ..."), not a
finding, and so is one whose ``workload`` (what the requests must do) no evidence shows; an entry whose trigger fields a finding already speaks of is said next to it, not repeated."""

from __future__ import annotations

import re

from . import known_issues
from .case import Case
from .result import TRAFFIC_ONLY, Change
from .rulebase import Fix, Impact, Rule, not_estimated, rule

__all__ = ["known_matches", "trigger_fields"]

# The symptom's metric as the doctor's metric, and the part of serving it shows up in.
_METRIC = {"ttft": ("time to first token", "prefill/extend"), "throughput": ("throughput under load", "queueing")}


def known_matches(case: Case) -> list[known_issues.Match]:
    """Every entry of the database against the case, those that are not "no"."""
    out = []
    for entry in known_issues.load():
        found = known_issues.match(entry, case)
        if found.status != "no":
            out.append(found)
    return out


def trigger_fields(finding) -> set[str]:
    """The ServerArgs fields in the trigger of the entry a ``known-issue`` finding stands for (its title names
    it, as :func:`_rule_for` writes it); empty for another finding or a trigger without fields."""
    found = re.match(r"Known issue (ki-[a-z0-9.-]+): ", getattr(finding, "title", ""))
    if getattr(finding, "id", None) != "known-issue" or found is None:
        return set()
    entry = next((e for e in known_issues.load() if e.get("id") == found.group(1)), None)
    fields = ((entry or {}).get("trigger") or {}).get("fields") or {}
    return set(fields) if isinstance(fields, dict) else set()


def _expand(case: Case) -> list[Rule]:
    rules = []
    for m in known_matches(case):
        fields = {c.key.split(".", 1)[1] for c in m.checks if c.key.startswith("fields.")}
        if m.status == "partial":
            if m.held:  # something known holds: an open question, not a guess
                case.questions.append(m.question())
        elif m.entry.get("workload"):  # the launch meets it; whether the traffic does, no evidence shows
            case.questions.append(f"known issue {m.id} ({known_issues.first_source(m.entry)}){TRAFFIC_ONLY}"
                                  f"{m.entry['workload'].strip()}: {m.entry['title'].strip()}; "
                                  f"{_fixed_in(m.entry)}")
        elif fields and fields <= case.covered:
            case.questions.append(f"known issue {m.id} ({known_issues.first_source(m.entry)}) describes the cause a "
                                  f"finding above names ({', '.join(sorted(fields))}): {m.entry['title'].strip()}; "
                                  f"{_fixed_in(m.entry)}")
        else:
            rules.append(_rule_for(m))
    return rules


def _fixed_in(entry: dict) -> str:
    fixed = entry.get("fixed_in")
    if fixed in (None, "unfixed"):
        return f"no release is known to fix it ({entry.get('fixed_basis')})"
    return f"fixed in {fixed} ({str(entry.get('fixed_basis')).split(':')[0]})"


def _lines(m: known_issues.Match) -> list[str]:
    e = m.entry
    out = [f"{m.id}: sglang {e['affected']} is affected; {_fixed_in(e)}; confidence: {e.get('confidence')}",
           "sources: " + ", ".join(e.get("sources") or [])]
    out += [c.fact for c in m.held]
    if e.get("confirm"):
        out.append(f"to confirm on this server: {str(e['confirm']).strip()}")
    return out


def _metric(entry: dict) -> tuple[str, str]:
    return _METRIC.get((entry.get("symptom") or {}).get("metric"), ("decode tok/s", "decode step"))


def _impact(m: known_issues.Match) -> Impact:
    e = m.entry
    metric, _ = _metric(e)
    change = str((e.get("symptom") or {}).get("change") or "").strip()
    share = known_issues.impact_share(e)
    source = known_issues.first_source(e)
    if share is None:
        return not_estimated(f"the source gives no number this kit can use ({change or 'none'})", metric,
                             f"a benchmark of this launch against {_target(e)} (sgl-kit bench)")
    return Impact(share, "measured elsewhere",
                  f"the source's first pair of numbers, on its deployment ({source}), not on this one", metric,
                  (change,), bounded=False)


def _target(entry: dict) -> str:
    fixed = entry.get("fixed_in")
    return f"sglang {fixed}" if fixed not in (None, "unfixed") else "a release outside " + str(entry.get("affected"))


def _fix(m: known_issues.Match, case: Case) -> Fix:
    e = m.entry
    kept, notes = known_issues.workaround_changes(e, case)
    changes = [Change(setenv=env) if env else Change(option, value) for option, value, env in kept]
    fixed = e.get("fixed_in")
    upgrade = (f"upgrade to sglang {(e.get('fix') or {}).get('upgrade_to') or fixed} or later ({e.get('fixed_basis')})"
               if fixed not in (None, "unfixed") else f"no release is known to fix it ({e.get('fixed_basis')})")
    return changes, [upgrade, *notes], []


def _rule_for(m: known_issues.Match) -> Rule:
    e = m.entry
    _, part = _metric(e)
    return Rule("known-issue", f"Known issue {m.id}: {str(e['title']).strip()}", ">=0", ("version",),
                when=lambda case: _lines(m), impact=lambda case: _impact(m), fix=lambda case: _fix(m, case),
                affects=(part,), covers=lambda case: set(), after="findings")


rule(Rule(
    "known-issue", "A known sglang performance issue matches this deployment", ">=0",
    ("version",), uses=("args", "command", "model_config", "hardware", "environ", "topology", "p2p", "source",
                        "decode", "notices"),
    when=lambda case: None, impact=lambda case: not_estimated("one finding per matching entry"),
    fix=lambda case: ([], [], []), affects=("decode step",), after="findings", expand=_expand))
