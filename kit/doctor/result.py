"""What the doctor says: findings, each with evidence, sites, fix and what not to do; and the whole diagnosis.

The JSON form (``Diagnosis.to_dict``) is an interface, documented in docs/guide.md (the doctor):
``findings`` (each: ``id``, ``title``, ``affects``, ``impact``, ``impact_basis``, ``impact_metric``,
``impact_inputs``, ``impact_reason``, ``evidence``, ``sites``, ``sites_dropped``, ``fix``, ``avoid``,
``versions``, ``checks``),
``hardware``, ``roofline`` (``ceiling_tok_s``, ``assumptions``, ...), ``problems``, ``skipped``,
``sources``, ``fixed_command``, ``open_questions``, ``ordering`` (how the findings are ordered, a
sentence: by size only when something was estimated).

Schema 2 (from 1): ``impact`` may be null ("not estimated"), and is the share of
``impact_metric`` (decode tok/s, time to first token, throughput under load), no longer always
of single-stream decode; ``impact_basis`` says how it was reached (measured, modelled, not
estimated), ``impact_inputs`` from what (or what would let it estimate); "measured elsewhere" is a public source's
number on its own deployment (a known issue), ranked after this case's own estimates, ``affects`` which parts
of serving the finding slows. Findings are ordered measured, then modelled, then not estimated,
each by size. ``roofline.accept_length`` may be null (speculative decoding, not measured), and
the roofline adds ``speculative_steps``, ``draft_bytes_per_step``, ``bytes_per_round``,
``ceiling_without_draft_tok_s``, ``ceiling_by_accept``, ``accept_source`` and ``disagree``; the
diagnosis adds ``open_questions`` (what else to check, and which evidence would decide it).
``unanswered`` lists the questions no rule could ask because their evidence was missing (each with
the evidence that would answer it); ``fixed_command_check`` (``status``: checked, refused, may be
refused, unchecked; ``detail``) says whether the launch with every fix passes that version's parser
and startup checks (the dry-run where its environment exists); a refused one is null in ``fixed_command``.
A finding's ``sites`` are only lines that can have caused it for this launch; ``sites_dropped`` lists
("path:line: why") those its rule named that cannot: a guard false for this launch on every path to the
line (its callers' in any module included), or a literal written that is not the value the evidence shows.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from kit._text import wrap

__all__ = ["BASES", "Change", "Diagnosis", "Finding", "Impact", "METRICS", "PARTS", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2

# What a rule can slow, and the user-facing number each part shows up in.
PARTS = {"decode step": "decode tok/s", "verify": "decode tok/s", "draft": "decode tok/s",
         "prefill/extend": "time to first token", "all-reduce": "decode tok/s", "scheduling": "decode tok/s",
         "queueing": "throughput under load", "streaming": "time between tokens"}
METRICS = ("decode tok/s", "time to first token", "throughput under load", "time between tokens")
# How an estimate was reached, best first: findings are ordered by this, then by size.
# "from the source": the release's own code decides it (a refusal that holds for every request of the launch).
# "measured elsewhere": a number a public source measured on its own deployment (a known issue,
# kit.doctor.known_issues), never this case's: it ranks after every estimate of this case.
BASES = ("measured", "from the source", "modelled", "measured elsewhere", "not estimated")


@dataclass(frozen=True)
class Impact:
    """How much a finding costs, and what that rests on.

    ``share`` is the estimated share of ``metric`` lost (0..1), or None when ``basis`` is "not
    estimated"; ``inputs`` are the pieces of evidence the estimate used (or, not estimated, what
    would let it estimate); ``reason`` says how, in a sentence.
    """

    share: float | None
    basis: str
    reason: str
    metric: str = "decode tok/s"
    inputs: tuple[str, ...] = ()
    bounded: bool = True  # False: the fix changes the ceiling itself (more speculative steps), so this
    # launch's roofline does not bound it

    def __post_init__(self) -> None:
        if self.basis not in BASES:
            raise ValueError(f"impact basis {self.basis!r} is not one of {BASES}")
        if self.metric not in METRICS:
            raise ValueError(f"impact metric {self.metric!r} is not one of {METRICS}")
        if (self.share is None) != (self.basis == "not estimated"):
            raise ValueError("an estimate has a share; 'not estimated' has none")

    @property
    def rank(self) -> tuple[int, int, float, int]:
        """Estimated (measured or modelled) before measured elsewhere (a public source's number on its own
        deployment), then not estimated; within each, decode tok/s (the single-stream symptom) before time
        to first token and throughput under load; then the larger first, and measured before modelled at the
        same size. A measured ~0% never outranks a modelled 8%, and an estimate of exactly nothing (a fix the
        source says cannot pay) comes last."""
        if self.share == 0.0:
            place = 3
        elif self.basis == "measured elsewhere":
            place = 1
        else:
            place = 2 if self.share is None else 0
        return (place, METRICS.index(self.metric), -round(self.share or 0.0, 3), BASES.index(self.basis))

    def to_dict(self) -> dict:
        return {"impact": None if self.share is None else round(self.share, 3), "impact_basis": self.basis,
                "impact_metric": self.metric, "impact_inputs": list(self.inputs), "impact_reason": self.reason}

    def text(self) -> str:
        if self.share is None:
            return f"not estimated: {self.reason}"
        inputs = f" (from {'; '.join(self.inputs)})" if self.inputs else ""
        return f"~{self.share:.0%} of {self.metric}, {self.basis}{inputs}: {self.reason}"




@dataclass(frozen=True)
class Change:
    """One edit to the launch: set a flag (``option`` ``value``), remove one, or unset a variable."""

    option: str = ""
    value: Any = None
    remove: bool = False
    unset: str = ""  # an environment variable to unset
    setenv: tuple[str, str] | None = None

    def apply(self, argv: list[str]) -> list[str]:
        """``argv`` (a launch's flags) with this change made: the option set or removed. Environment
        changes leave argv alone."""
        return _apply(list(argv), self) if self.option else list(argv)

    def __str__(self) -> str:
        if self.unset:
            return f"unset {self.unset} in the server's environment"
        if self.setenv:
            return f"{self.setenv[0]}={shlex.quote(self.setenv[1])} in the server's environment"
        if self.remove:
            return f"remove {self.option}"
        return self.option if self.value is None else f"{self.option} {shlex.quote(str(self.value))}"


@dataclass
class Finding:
    id: str
    title: str
    estimate: Impact
    evidence: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # "path:line" in this version's source
    changes: list[Change] = field(default_factory=list)  # the fix as edits to the launch
    advice: list[str] = field(default_factory=list)  # fixes that are not a flag (BIOS, drivers)
    avoid: list[str] = field(default_factory=list)
    versions: str = ""
    affects: tuple[str, ...] = ()
    dropped: list[str] = field(default_factory=list)  # "path:line: why": sites the rule named that cannot be
    # the cause for this launch (a guard false for it, or another value written), not cited
    checks: list[tuple[Change, str]] = field(default_factory=list)  # predicted to buy nothing: (change, why)
    risk: str = ""  # what the fix may cost here (Rule.risk)
    not_here: str = ""  # why it does not apply to this hardware or workload (then it is not a cause)

    @property
    def impact(self) -> float | None:
        """The estimated share of ``impact_metric`` lost (0..1), or None: not estimated."""
        return self.estimate.share

    @property
    def impact_reason(self) -> str:
        return self.estimate.reason

    @property
    def impact_basis(self) -> str:
        return self.estimate.basis

    @property
    def fix(self) -> list[str]:
        return [str(c) for c in self.changes] + list(self.advice)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "affects": list(self.affects), **self.estimate.to_dict(),
                "evidence": list(self.evidence), "sites": list(self.sites), "sites_dropped": list(self.dropped),
                "fix": self.fix, "avoid": list(self.avoid), "versions": self.versions,
                "checks": [{"change": str(c), "predicted": "no change", "why": why} for c, why in self.checks],
                "risk": self.risk, **({"does_not_apply": self.not_here} if self.not_here else {})}


@dataclass
class Diagnosis:
    target: str
    version: str | None
    findings: list[Finding]
    hardware: Any = None  # kit.hardware.Hardware
    roofline: Any = None  # kit.doctor.roofline.Roofline
    problems: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rule id, why not checked)
    checked: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    command: list[str] | None = None
    open_questions: list[str] = field(default_factory=list)  # what else to check, and what would decide it
    unanswered: list[str] = field(default_factory=list)  # questions no rule could ask: the evidence was missing
    fix_check: Any = None  # kit.doctor.fixcheck.FixCheck: whether the launch with every fix would start
    set_aside: list[str] = field(default_factory=list)  # findings made moot by another (kit.doctor.reconcile), why
    context: list[Finding] = field(default_factory=list)  # what rules with context=True found: not causes, not ranked
    not_applicable: list[Finding] = field(default_factory=list)  # found, but not on this hardware or workload
    load_seen: list[str] = field(default_factory=list)  # what the evidence says of the load served (kit.doctor.answer)
    answer: Any = None  # kit.doctor.answer.Answer: verdict, problem class, strongest signal, ... (diagnose sets it)

    @property
    def own_questions(self) -> list[str]:
        """What else to check about this case, without the known issues of the database."""
        return [q for q in self.open_questions if not q.startswith(KNOWN_ISSUE)]

    @property
    def known_issue_questions(self) -> list[str]:
        """The known issues of the database that may apply, each with what holds and what would decide it."""
        return [q.removeprefix("known issue ") for q in self.open_questions if q.startswith(KNOWN_ISSUE)]

    def __post_init__(self) -> None:
        self.findings.sort(key=lambda f: f.estimate.rank)

    @property
    def ordering(self) -> str:
        """How the findings are ordered, in a sentence: by estimated size only when something was
        estimated; otherwise by the metric each affects (decode tok/s first), not by size."""
        if not self.findings:
            return ""
        if all(f.estimate.share is None for f in self.findings):
            return ("ordered by what each finding affects (decode tok/s, then time to first token, then "
                    "throughput under load), not by size: none of them is estimated from this evidence")
        return ("ordered estimated (measured or modelled) before measured elsewhere (a public source's number) and "
                "not estimated; within each by the metric it affects (decode tok/s first), then by estimated size")

    @property
    def fixed_command(self) -> str | None:
        """The launch command with every fix applied (flags and environment), or None without a command."""
        if not self.command:
            return None
        argv = list(self.command)
        env_unset, env_set = [], []
        for finding in self.findings:
            for change in finding.changes:
                if change.unset:
                    env_unset.append(change.unset)
                elif change.setenv:
                    env_set.append(f"{change.setenv[0]}={shlex.quote(change.setenv[1])}")
                elif change.option:
                    argv = _apply(argv, change)
        prefix = "".join(f"env -u {name} " for name in dict.fromkeys(env_unset)) + "".join(
            f"{kv} " for kv in dict.fromkeys(env_set))
        return prefix + shlex.join(argv)

    def to_dict(self) -> dict[str, Any]:
        """The diagnosis as JSON-ready data, secret values masked (``masked``: how many of each kind)."""
        from kit.report.redaction import redact_value, secret_count

        data, counts = redact_value(self._data())
        data["masked"] = {k: n for k, n in sorted(counts.items())} if secret_count(counts) else {}
        return data

    def _data(self) -> dict[str, Any]:
        hw = self.hardware.to_dict() if self.hardware is not None else None
        return {
            "schema": SCHEMA_VERSION,
            "target": self.target,
            "sglang_version": self.version,
            "sglang_version_basis": self.sources.get("version_basis"),  # given, reported, stated, inferred, assumed
            "findings": [f.to_dict() for f in self.findings],
            "hardware": hw,
            "roofline": self.roofline.to_dict() if self.roofline is not None else {"ceiling_tok_s": None,
                                                                                   "assumptions": []},
            "problems": list(self.problems),
            "checked": list(self.checked),
            "skipped": [{"id": i, "why": why} for i, why in self.skipped],
            "sources": dict(self.sources),
            "fixed_command": None if self.fix_check is not None and self.fix_check.status == "refused"
            else self.fixed_command,
            "open_questions": list(self.open_questions),
            "unanswered": list(self.unanswered),
            "fixed_command_check": self.fix_check.to_dict() if self.fix_check is not None else None,
            "set_aside": list(self.set_aside),
            "context": [f.to_dict() for f in self.context],
            "ordering": self.ordering,
            "answer": self.answer.to_dict() if self.answer is not None else None,
            "not_applicable": [f.to_dict() for f in self.not_applicable],
            "load_seen": list(self.load_seen),
        }

    # ---- text

    @property
    def launch_changed(self) -> bool:
        """Whether the fixes change the launch (a flag, or the environment)."""
        fixed = self.fixed_command
        return fixed is not None and fixed != shlex.join(self.command or [])

    def to_text(self, width: int = 100) -> str:
        told = self.sources.get("version", "")
        guessed = self.sources.get("version_basis") in ("inferred", "assumed")
        source = " (assumed)" if guessed else (
            f" ({told})" if told and told != "--sglang" and not told.startswith("the log") else "")
        out = [wrap(f"sgl-kit doctor: {self.target}, sglang {self.version or '(version unknown)'}{source}: "
                     f"{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} from "
                     f"{len(self.checked)} rules", width, "", "  ")]
        if guessed:  # the version every version-dependent answer below rests on: said before anything else
            out.append(wrap(told + "; give --sglang VERSION for the release the server runs", width, "", "  "))
        model = self.sources.get("model_config", "")
        if model.startswith("the kit's catalog"):  # a config.json not from this server: said as plainly
            out.append(wrap(f"model config.json from {model}, not from the server; --model-config FILE gives the "
                             "server's own", width, "", "  "))
        resolved = self.sources.get("resolution")
        if resolved:
            out.append(wrap(resolved, width, "", "  "))
        if self.problems:  # first: what could not be read bounds everything below it
            out += ["", "could not read everything:"] + [wrap(f"- {p}", width, "  ", "    ") for p in self.problems]
        if self.answer is not None:
            out += ["", "the answer:"]
            out += [wrap(f"{label + ':':<17} {text}", width, "  ", " " * 20) for label, text in self.answer.rows()]
        if self.load_seen:
            out += ["", "the load seen:"] + [wrap(f"- {line}", width, "  ", "    ") for line in self.load_seen]
        if self.findings:
            out += ["", "the findings:"]
        if self.ordering:
            out.append(wrap(f"({self.ordering})", width, "", " "))
        for n, f in enumerate(self.findings, 1):
            out.append("")
            out.append(wrap(f"{n}. [{f.id}] {f.title}", width, "", "   "))
            out.append(wrap(f"affects: {', '.join(f.affects)}", width, "   ", "     "))
            out.append(wrap(f"impact: {f.estimate.text()}", width, "   ", "     "))
            for line in f.evidence:
                out.append(wrap(f"- {line}", width, "   ", "     "))
            if f.sites:
                out.append(wrap("source: " + ", ".join(f.sites), width, "   ", "     "))
            for line in f.dropped:
                out.append(wrap(f"not the cause here: {line}", width, "   ", "     "))
            for line in f.fix:
                out.append(wrap(f"fix: {line}", width, "   ", "     "))
            for line in f.avoid:
                out.append(wrap(f"do not: {line}", width, "   ", "     "))
            if f.risk:
                out.append(wrap(f"risk: {f.risk}", width, "   ", "     "))
            for change, why in f.checks:
                out.append(wrap(f"check: {change} is predicted to change nothing here ({why}); measure it to "
                                 "confirm, as notebook 04 does", width, "   ", "     "))
        if self.not_applicable:
            out += ["", f"found, but not on this hardware or workload ({len(self.not_applicable)}; not causes, "
                        "not ranked):"]
            for f in self.not_applicable:
                out.append(wrap(f"- [{f.id}] {f.title}: does not apply: {f.not_here}", width, "  ", "    "))
                out += [wrap(f"saw: {line}", width, "    ", "      ") for line in f.evidence[:2]]
        if self.set_aside:
            out += ["", "set aside (moot given another finding; not ranked):"]
            out += [wrap(f"- {n}", width, "  ", "    ") for n in self.set_aside]
        for f in self.context:
            out += ["", f"{f.title} (context, not ranked as a cause) [{f.id}]:"]
            out += [wrap(f"- {line}", width, "  ", "    ") for line in f.evidence]
            out += [wrap(f"source: {', '.join(f.sites)}", width, "  ", "    ")] if f.sites else []
            out += [wrap(f"to keep what the launch asked: {line}", width, "  ", "    ") for line in f.fix]
        if not self.findings and not self.unanswered and (self.answer is None or self.answer.verdict != "fine"):
            out.append("\nno rule found throughput left on the table.")
        elif not self.findings:
            out.append("\nno finding from the evidence given; the rules could not ask these questions:")
        if self.unanswered:
            out += ([""] if self.findings else []) + (["questions left open (the evidence that would answer each):"]
                                                      if self.findings else [])
            out += [wrap(f"- {q}", width, "  ", "    ") for q in self.unanswered]
        check = self.fix_check
        if self.fixed_command and check is not None and check.status in ("refused", "may be refused"):
            out += ["", wrap(f"the launch with every fix is not offered: {check.detail}; apply the fixes one at "
                              "a time", width, "", "  ")]
        elif self.fixed_command and self.findings and not self.launch_changed:
            out += ["", "no change to the launch: no finding changes a flag or the environment"]
        elif self.fixed_command and self.launch_changed:
            out += ["", "the launch with every fix:", wrap(self.fixed_command, width, "  ", "    ")]
            if check is not None:
                out.append(wrap(f"({check.status}: {check.detail})", width, "  ", "    "))
        out += ["", "hardware: " + _hardware_line(self.hardware)]
        if self.roofline is not None:
            out.append(_indent(self.roofline.to_text(), "  ") if hasattr(self.roofline, "to_text") else "")
        own, known = self.own_questions, self.known_issue_questions
        if own:
            out += ["", "what else to check:"] + [wrap(f"- {q}", width, "  ", "    ") for q in own]
        if known:
            out += ["", f"known issues of this release that may apply ({len(known)}; what holds, and what would "
                        "decide each):"] + [wrap(f"- {q}", width, "  ", "    ") for q in known]
        if self.skipped:
            out += ["", "rules not checked:"] + [wrap(f"- {i}: {why}", width, "  ", "    ")
                                                   for i, why in self.skipped]
        from kit.report.redaction import masked_note, redact

        text, counts = redact("\n".join(out) + "\n")  # pasted into issues and chats: no secret of the launch
        note = masked_note(counts)
        return text + (f"\n{note}: the values of secret-named flags, variables and URL credentials\n" if note else "")

    def __repr__(self) -> str:
        top = ", ".join(f.id for f in self.findings[:3])
        n = len(self.findings)
        return f"<Diagnosis {self.target} sglang {self.version}: {n} finding{'s' if n != 1 else ''} [{top}]>"

    def _repr_html_(self) -> str:
        from kit.display import diagnosis_view  # one layout for a notebook (findings, checks, the launch)
        from kit.report.redaction import redact

        return redact(diagnosis_view(self)._repr_html_())[0]




# How kit.doctor.rules_known words a known issue that this launch meets but that matters only for some
# traffic (constrained requests, stop strings, images...), which no evidence of a launch shows.
TRAFFIC_ONLY = " applies to this launch only with "
KNOWN_ISSUE = "known issue ki-"  # how every question of kit.doctor.rules_known and known_issues.Match begins


def brief_questions(questions: list[str]) -> list[str]:
    """What else to check, short enough for a summary: every question of the case itself, then one line
    counting the known issues that apply only with some traffic (the doctor's own output lists each)."""
    own = [q for q in questions if TRAFFIC_ONLY not in q]
    traffic = len(questions) - len(own)
    if traffic:
        own.append(f"{traffic} known issue(s) of this release match the launch but matter only with some traffic "
                   "(constrained decoding, stop strings, images, many requests at once...): the doctor's "
                   "'known issues of this release that may apply' lists each, with its source and the release "
                   "that fixes it")
    return own


def _apply(argv: list[str], change: Change) -> list[str]:
    """``argv`` with ``change.option`` set to its value (replacing any earlier value), or removed."""
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token == change.option or token.startswith(change.option + "="):
            takes_value = token == change.option and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 2 if takes_value else 1
            continue
        out.append(token)
        i += 1
    if not change.remove:
        out.append(change.option)
        if change.value is not None:
            out.append(str(change.value))
    return out


def _hardware_line(hw) -> str:
    if hw is None:
        return "not read (give --nvidia-smi and --topo, or a live target)"
    if not hw.gpus:
        return hw.note or "no GPU visible"
    links = ""
    if hw.topology is not None:
        pairs = hw.topology.gpu_links()
        links = "; links " + ", ".join(f"{k} {v}" for k, v in list(pairs.items())[:6])
    note = f" ({hw.note})" if hw.note else ""
    return f"{len(hw.gpus)}x {hw.gpu_name or 'mixed'}{links}{note}"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())
