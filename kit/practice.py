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

The team's own cases sit beside it: ``add(case_dir)`` copies a resolved case of ``sgl-kit capture``
(kit.case) into the team library (``library=``, else ``$SGL_KIT_PRACTICE_LIBRARY``, else
``~/.local/share/sglang-investigation-kit/practice``) as a practice case: its resolution is the answer,
its captured files the evidence. ``cases(team=True)`` and ``load(name)`` read both (``Incident.origin``
is ``corpus`` or ``team``); ``first``, ``random`` and ``hit_rate`` read the corpus alone, and the
library too when it is given or ``$SGL_KIT_PRACTICE_LIBRARY`` is set.
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

__all__ = ["CORPUS_ENV", "DEFAULT_LIBRARY", "DIFFICULTIES", "DOCTOR_OPTIONS", "FIRST", "KEPT", "LIBRARY_ENV",
           "META_FILES", "Choice", "Incident", "Verdict", "add", "cases", "choice_of", "choices", "corpus_dir",
           "first_case", "hit_rate", "library_dir", "load", "reveal", "run_doctor", "settle", "team_cases", "verdict",
           "verify_evidence"]

CORPUS_ENV = "SGL_KIT_CORPUS"
LIBRARY_ENV = "SGL_KIT_PRACTICE_LIBRARY"
DEFAULT_LIBRARY = "~/.local/share/sglang-investigation-kit/practice"  # library_dir() without library= or the env
CORPUS, TEAM = "corpus", "team"  # where a case comes from (Incident.origin)
DIFFICULTIES = ("easy", "medium", "hard")
SOMETHING_ELSE, NOTHING_WRONG, NOT_STATED = "something-else", "nothing-wrong", "not-stated"
FIRST = "first"  # load()'s name for a first exercise (first_case)
META_FILES = ("source.md", "case.yaml", "evidence.sha256")  # every other file of a case is evidence
# An evidence file's kind, when it is one of these, is the doctor's option that reads it
# (kit.doctor.from_files); a captured case's files have these kinds (kit.case.layout.FILES). ``KEPT``
# files are shown to the trainee and not given to the doctor (no reader of the doctor's takes them);
# every other kind (log, launch, paste: the corpus' posted text) is read as a paste, wherever its
# pieces are.
DOCTOR_OPTIONS = ("server_info", "command", "environ", "nvidia_smi", "topo", "model_config")
KEPT = "kept"
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
    files: tuple[tuple[str, str], ...]  # (file name, kind: launch, log, paste or a DOCTOR_OPTIONS one), in order
    data: dict = field(repr=False, compare=False, default_factory=dict)
    origin: str = CORPUS  # corpus (data/incidents/) or team (the team library, added with add())

    @property
    def as_given(self) -> str:
        return "as captured" if self.origin == TEAM else "as posted"

    def evidence(self) -> list[tuple[str, str, str]]:
        """(file, kind, text) of every evidence file, as posted."""
        return [(name, kind, (self.path / name).read_text(encoding="utf-8", errors="replace"))
                for name, kind in self.files]

    def to_dict(self, answer: bool = False) -> dict[str, Any]:
        out = {"name": self.name, "from": self.origin, "title": self.title, "difficulty": self.difficulty,
               "date": self.date, "version": self.version, "gpu": self.gpu, "model": self.model,
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
            parts.append(f"--- {name} ({kind}, {self.as_given}) ---\n{text.rstrip()}\n--- end of {name} ---")
        return "\n\n".join(parts) + "\n"

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        from kit.display import pre

        files = "".join(f"<p><b>{html.escape(name)}</b> <small>({kind}, {self.as_given})</small></p>{pre(text)}"
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


def cases(corpus: str | os.PathLike | None = None, *, library: str | os.PathLike | None = None,
          team: bool = False) -> list[Incident]:
    """Every case of the corpus, by name; then, with ``team`` or a ``library`` given, the team library's."""
    root = corpus_dir(corpus)
    found = [_incident(p) for p in sorted(root.iterdir()) if (p / "case.yaml").is_file()]
    return found + (team_cases(library) if team or library is not None else [])


def library_dir(library: str | os.PathLike | None = None) -> Path:
    """The team library: ``library``, else ``$SGL_KIT_PRACTICE_LIBRARY``, else
    ``~/.local/share/sglang-investigation-kit/practice`` (made by the first add())."""
    given = library or os.environ.get(LIBRARY_ENV)
    return Path(given or DEFAULT_LIBRARY).expanduser()


def _team_paths(library: str | os.PathLike | None = None) -> dict[str, Path]:
    """name -> folder of each team case. A library not made yet holds none; one given by name
    (``library``) that is not there is an error, so a typo is not read as an empty library."""
    root = library_dir(library)
    if not root.is_dir():
        if library is not None:
            raise PracticeError(f"no team library at {root}: " + ("it is a file" if root.exists() else
                                                                  "the directory does not exist"),
                                hint="check the path; `sgl-kit practice add CASE_DIR --library DIR` makes one")
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / "case.yaml").is_file()}


def team_cases(library: str | os.PathLike | None = None) -> list[Incident]:
    """Every case of the team library (library_dir), by name; [] when it was not made yet."""
    return [_incident(p, TEAM) for p in _team_paths(library).values()]


def load(name: str = "random", *, seed: int | None = None, corpus: str | os.PathLike | None = None,
         library: str | os.PathLike | None = None) -> Incident:
    """One case by name (of the corpus, else of the team library), ``first`` (a first exercise: see
    first_case) or ``random`` (``seed`` makes the pick repeatable; None or a negative seed: a new pick);
    ``first`` and ``random`` pick from the corpus."""
    root: Path | None = None
    try:
        root = corpus_dir(corpus)
    except PracticeError:
        if name in (FIRST, "random") or (library is None and not _team_paths()):
            raise
    names = sorted(p.name for p in root.iterdir() if (p / "case.yaml").is_file()) if root else []
    if root is not None and name == FIRST:
        return first_case(root)
    if root is not None and name == "random":
        return _incident(root / random.Random(None if seed is None or seed < 0 else seed).choice(names))
    if root is not None and name in names:
        return _incident(root / name)
    team = _team_paths(library)
    if name in team:
        return _incident(team[name], TEAM)
    known = names + [n for n in team if n not in names]
    close = [n for n in known if name and name in n][:3]
    close += [n for n in difflib.get_close_matches(name, known, n=3, cutoff=0.5) if n not in close]
    where = [str(root)] if root is not None else []
    where.append(f"the team library {library_dir(library)}")
    raise PracticeError(f"no case {name!r} in {' or '.join(where)}",
                        hint=(f"did you mean {' or '.join(close[:3])}? " if close else "")
                        + "`sgl-kit practice list` names every case")


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


def _incident(path: Path, origin: str = CORPUS) -> Incident:
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
    if "format" not in data:  # a captured case (kit.case) lists its evidence: findings.json and the run are not
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
        files=tuple(files.items()), data=data, origin=origin)


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
    """The doctor on the case's evidence files: each of a kind in DOCTOR_OPTIONS given to that option
    (``topo`` files together), the others as `sgl-kit doctor --paste FILE...` reads them, KEPT ones not at
    all. Launch text is read with the flag table of ``sglang``, else the case's ``reader_version`` (the
    release tests/test_incidents.py reads it with, or the one a captured case ran), whose source is
    downloaded once and cached."""
    from kit.doctor import diagnose, from_files

    options: dict[str, Any] = {}
    paths: list[str] = []
    for name, kind in case.files:
        path = str(case.path / name)
        if kind == KEPT:
            continue
        if kind == "topo":
            options.setdefault("topo", []).append(path)
        elif kind in DOCTOR_OPTIONS and kind not in options:
            options[kind] = path
        else:
            paths.append(path)
    return diagnose(from_files(paste=paths or None, sglang=sglang or case.reader_version, **options))


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
    origin: str = CORPUS

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.origin, "url": self.url, "stated_cause": self.stated_cause, "cause": self.cause, "fix": self.fix,
                "answer": self.answer.id if self.answer else NOT_STATED,
                "answer_title": self.answer.title if self.answer else "the thread states no cause",
                "evidence_shows_cause": self.evidence_shows_cause, "kit_can_detect": self.kit_can_detect}

    def text(self) -> str:
        answer = self.answer.title if self.answer else (
            "not graded: the resolution names no hypothesis (a rule id or title)" if self.origin == TEAM
            else "not graded: the thread states no cause")
        where = "case" if self.origin == TEAM else "thread"
        return "\n".join([f"{self.name}: the answer", f"  {where}: {self.url}",
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
                  case.evidence_shows_cause, case.kit_can_detect, case.origin)


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


def hit_rate(corpus: str | os.PathLike | None = None, *, library: str | os.PathLike | None = None) -> dict[str, Any]:
    """The doctor over every case (no trainee): per case its outcome and what it named; right over graded.
    The corpus' cases, then the team library's when ``library`` is given or $SGL_KIT_PRACTICE_LIBRARY set."""
    rows = []
    for case in cases(corpus, library=library, team=bool(os.environ.get(LIBRARY_ENV))):
        d = run_doctor(case)
        v = _doctor_verdict(case, d)
        rows.append({"case": case.name, "from": case.origin, "answer": case.answer, "doctor": v.outcome,
                     "named": [f.id for f in d.findings], "why": v.text})
    graded = [r for r in rows if r["doctor"] != "ungraded"]
    right = sum(r["doctor"] == "right" for r in graded)
    return {"cases": rows, "graded": len(graded), "right": right,
            "rate": right / len(graded) if graded else None}


# --------------------------------------------------------------------------- the team's own cases


def add(case_dir: str | os.PathLike, library: str | os.PathLike | None = None, name: str | None = None, *,
        force: bool = False, title: str | None = None) -> Path:
    """Copy a resolved case (``sgl-kit capture``, then ``sgl-kit case resolve``) into the team library
    (library_dir) as a practice case named ``name`` (default: the case's id), and return its folder.

    The copy's case.yaml gets the practice keys: ``cause`` and ``fix`` (the resolution's), ``url`` (the
    case's ``url``, else where and when it was captured), ``title`` (``title``, else the case's id, sglang and
    model: nothing that gives a finding away),
    ``difficulty: unrated``, ``version`` and ``reader_version`` (the captured sglang), ``answer`` only when
    the cause names a hypothesis (a rule id or title, `something else`, `nothing is wrong`), and
    ``evidence``: each captured file with the doctor's option that reads it as its kind (findings.json
    and the resolution's run are the answer's side, not evidence). A ``source.md`` (date, sglang version,
    GPU, model, stated cause) and an ``evidence.sha256`` are written beside them. An entry of that name
    is replaced only with ``force``."""
    import shutil

    from kit.case.layout import FILES, FINDINGS_FILE, open_case, write_meta

    case = open_case(case_dir)
    resolution = case.resolution
    if not isinstance(resolution, dict) or not resolution.get("cause"):
        raise PracticeError(f"{case.path} is not resolved: a practice case needs the cause and the fix",
                            hint=f"resolve it first: sgl-kit case resolve {case.path} --cause ... --fix ...")
    name = _entry_name(name or case.id)
    root = library_dir(library)
    dest = root / name
    src = case.path.resolve()
    if dest.resolve() == src or src in dest.resolve().parents:
        raise PracticeError(f"{case.path} cannot be added to {root}: the entry {dest} would be the case itself "
                            "or inside it", hint="give another --library (library= in Python)")
    if dest.exists() and not force:
        raise PracticeError(f"the team library {root} already has a case {name!r}",
                            hint="give another --name, or --force to replace it (force=True in Python)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{name}.adding-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("*.tmp", "source.md", "evidence.sha256"))
        meta = dict(case.meta)
        evidence = [{"file": f, "kind": FILES[f][1] or KEPT} for f in case.files if f in FILES and f != FINDINGS_FILE]
        evidence.sort(key=lambda e: (_shown_rank(e["kind"]), e["file"]))
        # the exercise's title gives no finding away: the trainee reads the evidence first
        model = _model_of(case.path / "server_info.json").rstrip("/").rsplit("/", 1)[-1]
        neutral = f"captured case {case.id}: sglang {case.version or '?'}" + (
            f", {model}" if model != "not captured" else "")
        captured = meta.get("captured") if isinstance(meta.get("captured"), dict) else {}
        at = str(captured.get("at") or "an unknown time")
        version = case.version
        meta.update({
            "url": str(meta.get("url") or f"captured {case.id} at {at}"),
            "cause": str(resolution["cause"]), "fix": str(resolution.get("fix") or "not stated"),
            "title": _one_line(title or neutral), "difficulty": "unrated",
            "version": version or "not known", "evidence": evidence,
        })
        if version:
            meta["reader_version"] = version
        meta.pop("answer", None)
        answer = _answer_of(str(resolution["cause"]))
        if answer:
            meta["answer"] = answer
        write_meta(tmp, meta)
        facts = {"URL": meta["url"], "Date": at, "sglang version": version or "not known",
                 "GPU": _gpus_of(case.findings) if not case.meta.get("no_gpu") else f"none: {case.meta['no_gpu']}",
                 "Model": _model_of(case.path / "server_info.json"),
                 "Stated cause": _one_line(str(resolution["cause"]))}
        (tmp / "source.md").write_text(
            f"# {meta['title']}\n\n" + "".join(f"- {k}: {v}\n" for k, v in facts.items())
            + f"\nA case of the team's own, captured with `sgl-kit capture` and resolved by "
              f"{resolution.get('by', 'its owner')} at {resolution.get('at', 'a time not stated')}.\n",
            encoding="utf-8")
        (tmp / "evidence.sha256").write_text(
            "".join(f"{hashlib.sha256((tmp / e['file']).read_bytes()).hexdigest()}  {e['file']}\n" for e in evidence),
            encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _shown_rank(kind: str) -> int:
    """The order a trainee reads a captured case's evidence in: the log, the launch, then the rest."""
    order = ("log", "command", "server_info", "environ", "nvidia_smi", "topo", "model_config")
    return order.index(kind) if kind in order else len(order)


def _entry_name(name: str) -> str:
    bad = (not name.strip() or name != name.strip() or "/" in name or os.sep in name or name.startswith(".")
           or name in (FIRST, "random"))
    if bad:
        raise PracticeError(f"{name!r} cannot name a practice case: a case's name is one folder name, not "
                            f"starting with a dot, and not `{FIRST}` or `random` (they pick a corpus case)",
                            hint="give another --name (name= in Python)")
    try:
        corpus = corpus_dir()
    except PracticeError:
        return name
    if (corpus / name / "case.yaml").is_file():
        raise PracticeError(f"the corpus ({corpus}) has a case {name!r}: a team case of that name would be hidden",
                            hint="give another --name (name= in Python)")
    return name


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _answer_of(cause: str) -> str | None:
    """The hypothesis a resolution's cause names exactly (a rule id or title, or one of the two others)."""
    try:
        picked = choice_of(cause)
    except PracticeError:
        return None
    return picked.id if picked else None


def _gpus_of(findings: dict | None) -> str:
    """`2x NVIDIA RTX A6000` from findings.json's hardware (what the doctor read at capture time)."""
    from collections import Counter

    hardware = (findings or {}).get("hardware") if isinstance(findings, dict) else None
    gpus = hardware.get("gpus") if isinstance(hardware, dict) else None
    names = Counter(str(g.get("name")) for g in gpus or [] if isinstance(g, dict) and g.get("name"))
    return ", ".join(f"{n}x {gpu}" for gpu, n in names.items()) or "not captured"


def _model_of(server_info: Path) -> str:
    """The model path /server_info reported at capture time."""
    import json

    try:
        data = json.loads(server_info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "not captured"
    model = data.get("model_path") if isinstance(data, dict) else None
    return str(model) if model else "not captured"
