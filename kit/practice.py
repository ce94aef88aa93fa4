"""Practice on real incidents: the corpus of ``data/incidents/`` as exercises for new infra engineers.

    import kit.practice as practice
    practice.cases()                          # every case: name, title, version, GPU, difficulty
    case = practice.load("random", seed=7)    # or a case name
    case                                      # the evidence as posted, without the answer
    practice.choices()                        # the doctor's rule titles, "something else", "nothing is wrong"
    d = practice.run_doctor(case)             # the doctor on the posted evidence, on this machine
    practice.reveal(case)                     # the thread's stated cause, its link and the fix
    practice.verdict(case, d, "radix-cache-off")   # whether the trainee and the doctor were right
    practice.settle(case, d)                  # what evidence would have settled it faster
    practice.hit_rate()                       # the doctor over the whole corpus, case by case

A case is a folder: ``source.md`` (URL, date, version, GPU, model, the stated cause), ``case.yaml``
(the cause, whether the evidence can show it, the fix; for practice ``title``, ``difficulty``,
``answer`` and ``settle``), ``evidence.sha256`` and the evidence files as posted. ``answer`` is
the choice that names the thread's cause: a doctor rule's id, ``something-else`` (a cause none of
the rules names), ``nothing-wrong`` (the thread finds no problem) or ``not-stated`` (the thread
states no cause: the trainee is not graded, and neither is the doctor).

The corpus is the repository's ``data/incidents/``; an installed kit without a checkout is told
where to get it, or reads ``corpus=`` / ``$SGL_KIT_CORPUS``.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import PracticeError

__all__ = ["CORPUS_ENV", "DIFFICULTIES", "FIRST", "META_FILES", "Choice", "Incident", "Verdict", "cases",
           "choice_of", "choices", "corpus_dir", "first_case", "hit_rate", "load", "reveal", "run_doctor", "settle",
           "verdict", "verify_evidence"]

CORPUS_ENV = "SGL_KIT_CORPUS"
DIFFICULTIES = ("easy", "medium", "hard")
SOMETHING_ELSE, NOTHING_WRONG, NOT_STATED = "something-else", "nothing-wrong", "not-stated"
FIRST = "first"  # load()'s name for a first exercise (first_case)
META_FILES = ("source.md", "case.yaml", "evidence.sha256")  # every other file of a case is evidence
REPOSITORY = "the sglang-investigation-kit repository"
_SOURCE_LINE = re.compile(r"^- ([A-Za-z ]+): (.*)$")


@dataclass(frozen=True)
class Choice:
    """One hypothesis a trainee can pick: a doctor rule (its id and title) or one of the two others."""

    id: str
    title: str

    def __str__(self) -> str:
        return self.title


@dataclass(frozen=True)
class Incident:
    """One case of the corpus. Its ``repr`` shows the evidence, never the answer."""

    name: str
    path: Path
    title: str
    difficulty: str
    date: str
    version: str
    gpu: str
    model: str
    url: str
    stated_cause: str
    cause: str
    fix: str
    evidence_shows_cause: str
    kit_can_detect: str
    answer: str
    settle: str
    reader_version: str | None
    files: tuple[tuple[str, str], ...]  # (file name, kind: launch, log or paste), in case.yaml's order
    data: dict = field(repr=False, compare=False, default_factory=dict)

    def evidence(self) -> list[tuple[str, str, str]]:
        """(file, kind, text) of every evidence file, as posted."""
        return [(name, kind, (self.path / name).read_text(encoding="utf-8", errors="replace"))
                for name, kind in self.files]

    def to_dict(self, answer: bool = False) -> dict[str, Any]:
        out = {"name": self.name, "title": self.title, "difficulty": self.difficulty, "date": self.date,
               "version": self.version, "gpu": self.gpu, "model": self.model,
               "evidence": [{"file": f, "kind": k, "text": t} for f, k, t in self.evidence()]}
        if answer:
            out.update(reveal(self).to_dict())
        return out

    def text(self) -> str:
        """The case as a trainee gets it: what is known about the setup, then each evidence file verbatim."""
        head = [f"{self.name}: {self.title}", f"  difficulty: {self.difficulty}", f"  date: {self.date}",
                f"  sglang: {self.version}", f"  GPU: {self.gpu}", f"  model: {self.model}"]
        parts = ["\n".join(head)]
        for name, kind, text in self.evidence():
            parts.append(f"--- {name} ({kind}, as posted) ---\n{text.rstrip()}\n--- end of {name} ---")
        return "\n\n".join(parts) + "\n"

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        from kit.display import pre

        files = "".join(f"<p><b>{html.escape(name)}</b> <small>({kind}, as posted)</small></p>{pre(text)}"
                        for name, kind, text in self.evidence())
        facts = _facts([(k, html.escape(v)) for k, v in (("difficulty", self.difficulty), ("date", self.date),
                                                           ("sglang", self.version), ("GPU", self.gpu),
                                                           ("model", self.model))])
        return f"<h3>{html.escape(self.title)}</h3><p><code>{self.name}</code></p>{facts}{files}"


def _facts(rows: list[tuple[str, str]]) -> str:
    """Label and value (HTML) per row, left-aligned, the labels in a narrow column."""
    from kit.display import td

    return "<table style='border-collapse:collapse'>" + "".join(
        f"<tr>{td(html.escape(k), head=True, style='white-space:nowrap')}{td(v)}</tr>" for k, v in rows) + "</table>"


# --------------------------------------------------------------------------- the corpus


def corpus_dir(corpus: str | os.PathLike | None = None) -> Path:
    """The corpus folder: ``corpus``, else ``$SGL_KIT_CORPUS``, else ``data/incidents/`` of this checkout."""
    given = corpus or os.environ.get(CORPUS_ENV)
    if given:
        path = Path(given).expanduser()
        how = "the folder given" if corpus else f"${CORPUS_ENV}"
    else:
        path, how = Path(__file__).resolve().parent.parent / "data" / "incidents", "this checkout's data/incidents/"
    if not path.is_dir() or not any((p / "case.yaml").is_file() for p in path.iterdir()):
        raise PracticeError(
            f"no incident corpus at {path} ({how}): no folder with a case.yaml in it",
            hint=f"the corpus is data/incidents/ of {REPOSITORY}: run from a clone of it, or point "
                 f"{CORPUS_ENV} (corpus= in Python) at a copy of that folder",
            cli_hint=f"the corpus is data/incidents/ of {REPOSITORY}: run from a clone of it, or give "
                     f"--corpus DIR (or set {CORPUS_ENV}) with a copy of that folder")
    return path


def cases(corpus: str | os.PathLike | None = None) -> list[Incident]:
    """Every case of the corpus, by name."""
    root = corpus_dir(corpus)
    return [_incident(p) for p in sorted(root.iterdir()) if (p / "case.yaml").is_file()]


def load(name: str = "random", *, seed: int | None = None, corpus: str | os.PathLike | None = None) -> Incident:
    """One case by name, ``first`` (a first exercise: see first_case) or ``random`` (``seed`` makes the pick
    repeatable; None or a negative seed: a new pick)."""
    root = corpus_dir(corpus)
    names = sorted(p.name for p in root.iterdir() if (p / "case.yaml").is_file())
    if name == FIRST:
        return first_case(root)
    if name == "random":
        return _incident(root / random.Random(None if seed is None or seed < 0 else seed).choice(names))
    if name not in names:
        close = [n for n in names if name and name in n][:3]
        close += [n for n in difflib.get_close_matches(name, names, n=3, cutoff=0.5) if n not in close]
        raise PracticeError(f"no case {name!r} in {root}",
                            hint=(f"did you mean {' or '.join(close[:3])}? " if close else "")
                            + "`sgl-kit practice list` names every case")
    return _incident(root / name)


def first_case(corpus: str | os.PathLike | None = None) -> Incident:
    """A first exercise: a case with a cause to find. Its case.yaml says the posted evidence shows the cause
    (``evidence_shows_cause: yes``), the kit can detect it (``kit_can_detect: yes``) and names it by one of
    the doctor's rules (``answer``); of those, the easiest (``difficulty``), then the first by name."""
    rules = {c.id for c in choices()} - {SOMETHING_ELSE, NOTHING_WRONG}
    fit = [c for c in cases(corpus)
           if c.evidence_shows_cause == "yes" and c.kit_can_detect == "yes" and c.answer in rules]
    if not fit:
        raise PracticeError(f"no case in {corpus_dir(corpus)} has a cause the doctor can find (evidence_shows_cause "
                            "and kit_can_detect both yes, the answer a doctor rule)",
                            hint="name a case (`sgl-kit practice list`) or take `random`")
    rank = {d: n for n, d in enumerate(DIFFICULTIES)}
    return min(fit, key=lambda c: (rank.get(c.difficulty, len(rank)), c.name))


def _incident(path: Path) -> Incident:
    import yaml

    try:
        data = yaml.safe_load((path / "case.yaml").read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise PracticeError(f"{path / 'case.yaml'} is not valid YAML: {err}",
                            hint="fix the file (it is written for the corpus, not posted evidence)") from None
    source = _source_fields(path / "source.md")
    missing = [k for k in ("cause", "url") if k not in data]
    if missing:
        raise PracticeError(f"{path / 'case.yaml'} lacks {', '.join(missing)}",
                            hint="docs/architecture.md (adding a case) lists the keys a case needs")
    files: dict[str, str] = {}
    for item in data.get("evidence") or []:
        files.setdefault(item["file"], item.get("kind", "paste"))
    for p in sorted(path.iterdir()):
        if p.is_file() and p.name not in META_FILES:
            files.setdefault(p.name, "paste")
    return Incident(
        # a case not yet written up for practice is listed, marked, and graded by nobody
        name=path.name, path=path, title=str(data.get("title", "(no practice title yet)")),
        difficulty=str(data.get("difficulty", "unrated")),
        date=source.get("date", "not stated"), version=str(data.get("version", "not stated")),
        gpu=source.get("gpu", "not stated"), model=source.get("model", "not stated"), url=str(data["url"]),
        stated_cause=source.get("stated cause", "not stated"), cause=str(data["cause"]),
        fix=str(data.get("fix", "not stated")), evidence_shows_cause=_word(data.get("evidence_shows_cause")),
        kit_can_detect=_word(data.get("kit_can_detect")), answer=str(data.get("answer", NOT_STATED)),
        settle=str(data.get("settle", "")), reader_version=data.get("reader_version"),
        files=tuple(files.items()), data=data)


def _word(value) -> str:
    """A case.yaml answer as written: YAML reads a bare no/yes as a bool."""
    return {True: "yes", False: "no", None: "not stated"}.get(value, str(value)) if isinstance(value, (bool, type(None))) \
        else str(value)


def _source_fields(path: Path) -> dict[str, str]:
    if not path.is_file():
        raise PracticeError(f"{path} is missing", hint="every case has a source.md with the thread's URL")
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _SOURCE_LINE.match(line)
        if m:
            out.setdefault(m.group(1).strip().lower(), m.group(2).strip())
    if "sglang version" in out:
        out.setdefault("version", out["sglang version"])
    return out


def verify_evidence(case: Incident) -> list[str]:
    """What differs from the case's ``evidence.sha256`` (recorded when the case was made): [] when every
    evidence file is there, listed and unchanged."""
    manifest = case.path / "evidence.sha256"
    if not manifest.is_file():
        return [f"{case.name}: no evidence.sha256"]
    recorded = {}
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        recorded[name.strip()] = digest.strip()
    problems = []
    for name, _ in case.files:
        p = case.path / name
        if name not in recorded:
            problems.append(f"{case.name}/{name}: not in evidence.sha256")
        elif not p.is_file():
            problems.append(f"{case.name}/{name}: missing")
        elif hashlib.sha256(p.read_bytes()).hexdigest() != recorded[name]:
            problems.append(f"{case.name}/{name}: changed since it was recorded (evidence stays as posted)")
    problems += [f"{case.name}/{n}: in evidence.sha256 but not in the folder" for n in recorded
                 if not (case.path / n).is_file()]
    return problems


# --------------------------------------------------------------------------- hypotheses


def choices() -> list[Choice]:
    """The hypotheses: each registered doctor rule's title, then "something else" and "nothing is wrong"."""
    from kit.doctor import RULES

    seen: dict[str, Choice] = {}
    for r in RULES:
        seen.setdefault(r.id, Choice(r.id, r.title))
    return [*seen.values(), Choice(SOMETHING_ELSE, "something else (none of the doctor's rules)"),
            Choice(NOTHING_WRONG, "nothing is wrong (the server is fine)")]


def choice_of(hypothesis: str | Choice | None) -> Choice | None:
    """The Choice a rule id, a title or "something else" names; None for "" (no hypothesis given)."""
    if isinstance(hypothesis, Choice):
        return hypothesis
    text = (hypothesis or "").strip()
    if not text or text.startswith("("):  # the picker's "(pick one)"
        return None
    known = choices()
    for c in known:
        if text.lower() in (c.id, c.title.lower(), c.title.split(" (")[0].lower()):
            return c
    names = [c.id for c in known]
    close = difflib.get_close_matches(text.lower(), names, n=3, cutoff=0.5)
    raise PracticeError(f"{text!r} is not one of the hypotheses",
                        hint=(f"did you mean {' or '.join(close)}? " if close else "")
                        + "give a rule id or title of kit.practice.choices(), 'something else' or "
                          "'nothing is wrong'")


# --------------------------------------------------------------------------- the doctor and the answer


def run_doctor(case: Incident, *, sglang: str | None = None):
    """The doctor on the case's evidence files, as `sgl-kit doctor --paste FILE...` reads them. Launch
    text is read with the flag table of ``sglang``, else the case's ``reader_version`` (the release
    tests/test_incidents.py reads it with), whose source is downloaded once and cached."""
    from kit.doctor import diagnose, from_files

    paths = [str(case.path / name) for name, _ in case.files]
    return diagnose(from_files(paste=paths, sglang=sglang or case.reader_version))


@dataclass(frozen=True)
class Reveal:
    name: str
    url: str
    stated_cause: str
    cause: str
    fix: str
    answer: Choice | None  # None: the thread states no cause
    evidence_shows_cause: str
    kit_can_detect: str

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "stated_cause": self.stated_cause, "cause": self.cause, "fix": self.fix,
                "answer": self.answer.id if self.answer else NOT_STATED,
                "answer_title": self.answer.title if self.answer else "the thread states no cause",
                "evidence_shows_cause": self.evidence_shows_cause, "kit_can_detect": self.kit_can_detect}

    def text(self) -> str:
        answer = self.answer.title if self.answer else "not graded: the thread states no cause"
        return "\n".join([f"{self.name}: the answer", f"  thread: {self.url}",
                          f"  stated cause: {self.stated_cause}", f"  the cause, in short: {self.cause}",
                          f"  the hypothesis that names it: {answer}",
                          f"  can the posted evidence show it: {self.evidence_shows_cause}",
                          f"  can the kit detect it: {self.kit_can_detect}", f"  fix: {self.fix}"]) + "\n"

    __str__ = text

    def _repr_html_(self) -> str:
        d = self.to_dict()
        labels = {"stated_cause": "stated cause", "cause": "the cause, in short",
                  "answer_title": "the hypothesis that names it", "evidence_shows_cause": "can the evidence show it",
                  "kit_can_detect": "can the kit detect it", "fix": "fix"}
        rows = [("thread", f"<a href='{html.escape(self.url)}'>{html.escape(self.url)}</a>"),
                *((label, html.escape(str(d[k]))) for k, label in labels.items())]
        return _facts(rows)


def reveal(case: Incident) -> Reveal:
    """The thread's stated cause, its link, the fix, and which hypothesis names the cause."""
    answer = None if case.answer == NOT_STATED else next(
        (c for c in choices() if c.id == case.answer), Choice(case.answer, f"{case.answer} (not a rule here)"))
    return Reveal(case.name, case.url, case.stated_cause, case.cause, case.fix, answer,
                  case.evidence_shows_cause, case.kit_can_detect)


@dataclass(frozen=True)
class Verdict:
    """Whether one guesser was right: ``outcome`` is right, missed (found nothing where the thread has
    a cause), other (named something that is not the thread's cause), wrong (the trainee's other
    choice), ungraded (the thread states no cause, or no hypothesis was given)."""

    who: str
    outcome: str
    text: str

    def __str__(self) -> str:
        return f"{self.who}: {self.outcome}: {self.text}"


def _doctor_verdict(case: Incident, diagnosis) -> Verdict:
    fired = [f.id for f in diagnosis.findings]
    named = ", ".join(fired) or "nothing"
    if case.answer == NOT_STATED:
        return Verdict("the doctor", "ungraded", f"it named {named}; the thread states no cause to grade it by")
    if case.answer == NOTHING_WRONG:
        if not fired:
            return Verdict("the doctor", "right", "it found nothing, and the thread finds no problem")
        return Verdict("the doctor", "other", f"it named {named} where the thread finds no problem (a finding "
                                              "may still be true: the thread did not look for it)")
    if case.answer == SOMETHING_ELSE:
        if not fired:
            return Verdict("the doctor", "missed", "it found nothing: the thread's cause is beyond its rules "
                                                   f"(can the kit detect it: {case.kit_can_detect})")
        return Verdict("the doctor", "other", f"it named {named}; the thread's cause is none of its rules")
    if case.answer in fired:
        return Verdict("the doctor", "right", f"it named {case.answer}, the thread's cause")
    return Verdict("the doctor", "missed", f"it named {named}, not {case.answer} (the thread's cause)")


def _trainee_verdict(case: Incident, hypothesis) -> Verdict:
    picked = choice_of(hypothesis)
    if picked is None:
        return Verdict("you", "ungraded", "no hypothesis given")
    if case.answer == NOT_STATED:
        return Verdict("you", "ungraded", f"you chose {picked.title!r}; the thread states no cause to grade it by")
    answer = reveal(case).answer
    if picked.id == case.answer:
        return Verdict("you", "right", f"you chose {picked.title!r}; the thread: {case.cause}")
    return Verdict("you", "wrong", f"you chose {picked.title!r}; the thread's answer is {answer.title!r}: "
                                   f"{case.cause}")


@dataclass(frozen=True)
class Verdicts:
    trainee: Verdict
    doctor: Verdict

    def to_dict(self) -> dict[str, Any]:
        return {"trainee": self.trainee.outcome, "trainee_why": self.trainee.text,
                "doctor": self.doctor.outcome, "doctor_why": self.doctor.text}

    def text(self) -> str:
        return f"{self.trainee}\n{self.doctor}\n"

    __str__ = text

    def _repr_html_(self) -> str:
        return "<ul>" + "".join(f"<li><b>{html.escape(v.who)}: {html.escape(v.outcome)}</b>: {html.escape(v.text)}"
                                "</li>" for v in (self.trainee, self.doctor)) + "</ul>"


def verdict(case: Incident, diagnosis, hypothesis: str | Choice | None = None) -> Verdicts:
    """Whether the trainee's hypothesis, and the doctor's findings, name the thread's cause."""
    return Verdicts(_trainee_verdict(case, hypothesis), _doctor_verdict(case, diagnosis))


@dataclass(frozen=True)
class Settle:
    case: str
    items: tuple[str, ...]

    def text(self) -> str:
        return "what evidence would have settled it faster:\n" + "".join(f"  - {i}\n" for i in self.items)

    __str__ = text

    def _repr_html_(self) -> str:
        return ("<p><b>What evidence would have settled it faster</b></p><ul>"
                + "".join(f"<li>{html.escape(i)}</li>" for i in self.items) + "</ul>")


def settle(case: Incident, diagnosis=None) -> Settle:
    """What evidence would have settled the case faster: the case's own note (written for the corpus),
    then the doctor's open questions about this evidence."""
    items = [case.settle] if case.settle else []
    if diagnosis is not None:
        items += [f"the doctor asks: {q}" for q in diagnosis.open_questions]
    return Settle(case.name, tuple(items))


def hit_rate(corpus: str | os.PathLike | None = None) -> dict[str, Any]:
    """The doctor over every case (no trainee): per case its outcome and what it named; right over graded."""
    rows = []
    for case in cases(corpus):
        d = run_doctor(case)
        v = _doctor_verdict(case, d)
        rows.append({"case": case.name, "answer": case.answer, "doctor": v.outcome,
                     "named": [f.id for f in d.findings], "why": v.text})
    graded = [r for r in rows if r["doctor"] != "ungraded"]
    right = sum(r["doctor"] == "right" for r in graded)
    return {"cases": rows, "graded": len(graded), "right": right,
            "rate": right / len(graded) if graded else None}
