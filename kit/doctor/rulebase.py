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
- ``reads``: the facts it needs (:data:`kit.doctor.facts.FACTS`); without one of them it is not run, and the
  diagnosis says "not checked: needs ..." with how to get it. ``uses``: facts it reads when present and
  does without (it says less). In strict mode a rule that reads a fact it declared in neither fails;
- ``after``: the ids of rules it runs after, or ``"findings"`` for a rule that reads what other rules
  found (it runs after every rule that is not itself ``"findings"``); the order is topological, ties
  broken by id, never by registration;
- ``group``: a named subset (``"metrics"``: the rules over what the server did), for :func:`in_group`;
- ``priority``: findings of equal impact rank by it (higher first), then by id;
- ``expand``: a rule that stands for many (one per known issue that matches): it returns the rules to run
  in its place for this case, each giving one finding (all of them checked under this rule's id);
- ``gpu_only``: a rule about CUDA graphs or GPU kernels (attention backends). On a server with no
  GPU (:attr:`kit.doctor.case.Case.no_gpu`) it still reports what it saw, but says it does not
  apply and prescribes nothing: its finding is listed apart (``Diagnosis.not_applicable``);
- ``applies``: the reason a finding does not apply to this workload (the prefix cache on prompts that share
  no prefix), or None: such a finding is listed apart too, never as a cause;
- ``risk``: what the fix may cost, in this case's numbers (the answer's "risk").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kit._text import short_path
from kit._versions import in_range

from .case import Case
from .result import BASES, METRICS, PARTS, Change, Impact

__all__ = ["ALL_VERSIONS", "BASES", "GAPS", "METRICS", "PARTS", "RULES", "Fix", "Impact", "Rule", "gap", "in_group",
           "not_estimated", "ordered", "resolution_sites", "rule", "version_in", "where"]

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
    after: str | tuple[str, ...] = ""  # rule ids it runs after; "findings": after every rule that is not "findings"
    gpu_only: bool = False  # True: with no GPU (Case.no_gpu) it reports, says it does not apply, prescribes nothing
    # changes the release's source says buy nothing for this launch: offered to measure (a prediction to check),
    # never as a fix; each with the reason
    checks: Callable[[Case], list[tuple[Change, str]]] = lambda case: []
    expand: Callable[[Case], list[Rule]] | None = None  # the rules to run in its place for this case
    uses: tuple[str, ...] = ()  # facts read when present (kit.doctor.facts); ``reads`` are needed
    group: str = ""  # a named subset of the rules ("metrics"): in_group(name)
    priority: int = 0  # at equal impact, higher ranks first (then the id)
    # context: what it finds describes the launch (what sglang changed on its own), not a cause: it is printed
    # in its own section, never ranked among the findings
    context: bool = False
    # what the fix may cost here, in this case's numbers ("" when nothing but a restart): the answer's "risk"
    risk: Callable[[Case], str] = lambda case: ""
    # why the finding does not apply to this hardware or workload (a reason), or None: a finding that does not
    # apply is listed apart, after the ones that do, and never counts as a cause
    applies: Callable[[Case], str | None] = lambda case: None

    def __post_init__(self) -> None:
        unknown = [p for p in self.affects if p not in PARTS]
        if not self.affects or unknown:
            raise ValueError(f"rule {self.id}: affects must name parts of {sorted(PARTS)}, not {unknown or '()'}")
        if isinstance(self.after, str) and self.after not in ("", "findings"):
            raise ValueError(f"rule {self.id}: after is '', 'findings' or rule ids, not {self.after!r}")

    @property
    def declared(self) -> set[str]:
        """Every fact it may read: ``reads`` and ``uses``."""
        from .facts import names

        return names(self.reads) | names(self.uses)

    def __repr__(self) -> str:
        return f"<Rule {self.id} ({self.versions})>"


RULES: list[Rule] = []


def rule(r: Rule) -> Rule:
    RULES.append(r)
    return r


def in_group(name: str) -> list[Rule]:
    """The rules of a declared group (``Rule.group``), by id."""
    return sorted((r for r in RULES if r.group == name), key=lambda r: r.id)


def ordered(rules: list[Rule]) -> list[Rule]:
    """``rules`` in a topological order of ``after`` (ties by id, never by registration): a rule after
    ``"findings"`` follows every rule that is not; ``after`` naming a rule not among ``rules`` is ignored."""
    import heapq

    by_id = {r.id: r for r in rules}
    plain = [r.id for r in rules if r.after != "findings"]
    before = {r.id: set(plain if r.after == "findings" else
                        [a for a in ((r.after,) if isinstance(r.after, str) and r.after else
                                     () if isinstance(r.after, str) else r.after) if a in by_id]) for r in rules}
    ready = [i for i, b in before.items() if not b]
    heapq.heapify(ready)
    out: list[Rule] = []
    while ready:
        done = heapq.heappop(ready)
        out.append(by_id[done])
        for i, b in before.items():
            if done in b:
                b.discard(done)
                if not b:
                    heapq.heappush(ready, i)
    if len(out) != len(by_id):
        stuck = sorted(set(by_id) - {r.id for r in out})
        raise ValueError(f"the rules' `after` makes a cycle: {', '.join(stuck)}")
    return out


# Questions about evidence that is present in part (a Prometheus without a series, an option whose
# effect depends on a number the evidence lacks): functions of the case, each a list of
# "question: what would answer it", registered beside the rules they belong to.
GAPS: list[Callable[[Case], list[str]]] = []


def gap(fn: Callable[[Case], list[str]]) -> Callable[[Case], list[str]]:
    GAPS.append(fn)
    return fn


def resolution_sites(case: Case, name: str) -> list:
    """Fired writes of the field in sglang's argument resolution (not runtime copies of it)."""
    return case.resolved_by(name)


def where(sites) -> list[str]:
    return [short_path(s.where) for s in sites]


def source_site(case: Case, text: str, under: str = "") -> list[str]:
    """Where this version's source has ``text`` (file:line, the first under ``under``), when the source is
    at hand; [] otherwise."""
    from kit.errors import KitError

    if case.ev.tree is None:
        return []
    try:
        found = case.ev.tree.grep(text, fixed=True, max_matches=10)
    except KitError:
        return []
    return [f"{short_path(m.path)}:{m.line}" for m in found if under in m.path][:1]


def version_in(version: str | None, spec: str) -> bool:
    """Whether sglang ``version`` is in the PEP 440 range ``spec`` (False when either does not parse): the
    kit's one range test, kit._versions.in_range."""
    return in_range(version, spec)
