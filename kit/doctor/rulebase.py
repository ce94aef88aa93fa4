"""What a rule is, and the registry the rule modules add to (kit.doctor.rules, kit.doctor.rules_hw).

A Rule has an id and title, the sglang versions it applies to (a PEP 440 specifier), the
evidence it reads, and four parts that each take a kit.doctor.case.Case:

- ``when``: the condition; the evidence lines that show it holds, or None;
- ``impact``: an :class:`Impact`, estimated from this case's evidence (measured, modelled with its
  inputs) or "not estimated" with what would let it estimate; never a constant;
- ``fix``: (changes to the launch in this version's flags, advice, what not to do);
- ``sites``: the ``file:line`` of this version's source behind it (through kit.provenance).

And what the engine needs, declared rather than guessed:

- ``affects``: the parts of serving it slows (:data:`PARTS`: the decode step, verify, draft,
  prefill/extend, the all-reduce, scheduling, queueing);
- ``covers``: the fields its finding speaks of, so later rules (the baseline's) do not repeat them;
- ``after``: ``"findings"`` for a rule that reads what other rules found (it runs once every other
  rule has), else ``""``;
- ``expand``: a rule that stands for many (one per known issue that matches): it returns the rules to run
  in its place for this case, each giving one finding (all of them checked under this rule's id);
- ``gpu_only``: a rule about CUDA graphs or GPU kernels (attention backends). On a server with no
  GPU (:attr:`kit.doctor.case.Case.no_gpu`) it still reports what it saw, but says it does not
  apply and prescribes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .case import Case
from .result import BASES, METRICS, PARTS, Change, Impact

__all__ = ["ALL_VERSIONS", "BASES", "METRICS", "PARTS", "RULES", "Fix", "Impact", "Rule", "not_estimated",
           "resolution_sites", "rule", "version_in", "where"]

Fix = tuple[list[Change], list[str], list[str]]
ALL_VERSIONS = ">=0.4"

def not_estimated(reason: str, metric: str = "decode tok/s", *would_tell: str) -> Impact:
    """No defensible number: ``reason`` says why, ``would_tell`` what evidence would let it estimate."""
    return Impact(None, "not estimated", reason + ("; would tell: " + "; ".join(would_tell) if would_tell else ""),
                  metric, tuple(would_tell))


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    versions: str
    reads: tuple[str, ...]
    when: Callable[[Case], list[str] | None]
    impact: Callable[[Case], Impact]
    fix: Callable[[Case], Fix]
    sites: Callable[[Case], list[str]] = lambda case: []
    affects: tuple[str, ...] = ()
    covers: Callable[[Case], set[str]] = lambda case: set()
    after: str = ""  # "findings": runs after every rule that does not read findings
    gpu_only: bool = False  # True: with no GPU (Case.no_gpu) it reports, says it does not apply, prescribes nothing
    # changes the release's source says buy nothing for this launch: offered to measure (a prediction to check),
    # never as a fix; each with the reason
    checks: Callable[[Case], list[tuple[Change, str]]] = lambda case: []
    expand: Callable[[Case], list[Rule]] | None = None  # the rules to run in its place for this case

    def __post_init__(self) -> None:
        unknown = [p for p in self.affects if p not in PARTS]
        if not self.affects or unknown:
            raise ValueError(f"rule {self.id}: affects must name parts of {sorted(PARTS)}, not {unknown or '()'}")
        if self.after not in ("", "findings"):
            raise ValueError(f"rule {self.id}: after is '' or 'findings', not {self.after!r}")

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
