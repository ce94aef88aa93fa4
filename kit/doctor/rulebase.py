"""What a rule is, and the registry the rule modules add to (kit.doctor.rules, kit.doctor.rules_hw).

A Rule has an id and title, the sglang versions it applies to (a PEP 440 specifier), the
evidence it reads, and four parts that each take a kit.doctor.case.Case:

- ``when``: the condition; the evidence lines that show it holds, or None;
- ``impact``: (estimated share of single-stream decode throughput lost, the reason);
- ``fix``: (changes to the launch in this version's flags, advice, what not to do);
- ``sites``: the ``file:line`` of this version's source behind it (through kit.provenance).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .case import Case
from .result import Change

__all__ = ["ALL_VERSIONS", "RULES", "Fix", "Rule", "resolution_sites", "rule", "version_in", "where"]

Fix = tuple[list[Change], list[str], list[str]]
ALL_VERSIONS = ">=0.4"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    versions: str
    reads: tuple[str, ...]
    when: Callable[[Case], list[str] | None]
    impact: Callable[[Case], tuple[float, str]]
    fix: Callable[[Case], Fix]
    sites: Callable[[Case], list[str]] = lambda case: []

    def __repr__(self) -> str:
        return f"<Rule {self.id} ({self.versions})>"


RULES: list[Rule] = []


def rule(r: Rule) -> Rule:
    RULES.append(r)
    return r


def resolution_sites(case: Case, name: str) -> list:
    """Fired writes of the field in sglang's argument resolution (not runtime copies of it)."""
    return case.resolved_by(name)


def where(sites) -> list[str]:
    return [s.where.removeprefix("sglang/") for s in sites]


def version_in(version: str | None, spec: str) -> bool:
    """Whether sglang ``version`` is in the PEP 440 range ``spec`` (False when either does not parse)."""
    try:
        return version is not None and Version(version) in SpecifierSet(spec, prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return False
