"""The sglang version a pasted text states, each statement with its line and its form.

``stated_versions(text)`` finds, line by line:

- ``check_env``: ``python -m sglang.check_env`` prints ``sglang: 0.5.11`` (the installed package);
- ``pip show``: ``Name: sglang`` followed by ``Version: 0.5.11``;
- ``pip``: ``sglang==0.5.11``, ``sglang[all]==0.5.11`` (pip freeze, requirements, install commands);
- ``docker image``: ``lmsysorg/sglang:v0.5.11-cu129``;
- ``wheel``: ``sglang-0.5.11-py3-none-any.whl``, ``sglang-0.5.11.dist-info``;
- ``text``: prose such as ``sglang 0.5.11``, ``SGLang version: v0.5.11``, ``upgraded sglang from
  0.5.9 to 0.5.11`` (the version upgraded *to*), and a bare ``v0.5.11`` after ``version``, ``to``,
  ``on``, ``with`` ... or at the start of a line or title (never after another package's name:
  ``flashinfer v0.2.14`` is not sglang's).

``choose_version(statements)`` takes the most trustworthy form (check_env's output, then an install
line, then prose) and says when the statements disagree. A version the server itself reports (its
log, ``/server_info``) or one the user gives (``--sglang``) is above all of these; the caller
decides that.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["VersionStatement", "choose_version", "stated_versions"]

_VER = r"(\d+\.\d+\.\d+(?:\.?post\d+|rc\d+|\.dev\d+)?)"
# `sglang` as the package's own name: not sglang-kernel, sglang_router, sglang.check_env, sgl-kit ...
_NAME = r"(?<![\w/.-])sglang(?![-_.][A-Za-z0-9])"
_FORMS: list[tuple[str, int, re.Pattern]] = [
    ("check_env", 1, re.compile(r"^\s*sglang\s*:\s*v?" + _VER + r"(?:\+[\w.]+)?\s*$", re.I)),
    ("pip", 2, re.compile(_NAME + r"(?:\[[^\]\n]*\])?\s*===?\s*v?" + _VER, re.I)),
    ("docker image", 2, re.compile(r"(?<![\w.-])(?:[\w.-]+(?::\d+)?/)*sglang:v?" + _VER + r"(?!\d|\.\d)", re.I)),
    ("wheel", 2, re.compile(r"(?<![\w.-])sglang-" + _VER + r"(?=[-.](?:py|tar|dist-info|whl|zip))", re.I)),
]
# Prose: the name, then within a few words the version (`sglang 0.5.11`, `SGLang version: v0.5.11`,
# `sglang (0.5.11)`, `sglang is 0.5.11`).
_TEXT = re.compile(_NAME + r"[\s:,(]*(?:(?:version|release|ver\.?|is|from|=|@)\s*[:=]?\s*)*v?" + _VER + r"(?!\d|\.\d)",
                   re.I)
# An upgrade: the version it went to (`from 0.5.9 to 0.5.11`, `0.5.9 -> 0.5.11`).
_UPGRADE = re.compile(r"v?" + _VER + r"\s*(?:to|->|=>|→)\s*v?" + _VER + r"(?!\d|\.\d)", re.I)
# A bare `v0.5.11` (sglang's releases are 0.x), after a word that is not a package's name.
_BARE = re.compile(r"(?:^|(?<=[\s(\[]))v(0\.\d+\.\d+(?:\.?post\d+|rc\d+)?)(?!\d|\.\d)", re.I)
_BEFORE_BARE = {"to", "on", "with", "using", "in", "at", "tag", "image", "upgraded", "upgrading", "after", "since",
                "from"}
# Before a bare version: nothing but a title's tags (`[Bug] v0.5.11 ...`), or a `Version:` field.
_BARE_HEAD = re.compile(r"[\W_]*(?:\[[^\]]*\][\W_]*)*|\W*(?:sglang\s+)?version\W*", re.I)
_PIP_SHOW = re.compile(r"^\s*Name:\s*sglang\s*$", re.I)
_PIP_VERSION = re.compile(r"^\s*Version:\s*v?" + _VER + r"\s*$", re.I)
_RANK_WORDS = {1: "check_env output", 2: "an install line", 3: "text"}


@dataclass(frozen=True)
class VersionStatement:
    version: str
    line: int  # 1-based
    form: str  # check_env, pip show, pip, docker image, wheel, text
    rank: int  # 1 check_env, 2 an install (pip, docker image, wheel), 3 prose
    text: str  # the line, shortened

    @property
    def where(self) -> str:
        what = "" if self.form == "text" else f" ({self.form})"
        return f"line {self.line}{what}"

    def to_dict(self) -> dict:
        return {"version": self.version, "line": self.line, "form": self.form, "text": self.text}


def stated_versions(text: str) -> list[VersionStatement]:
    """Every statement of an sglang version in ``text``, in the order of its lines."""
    out: list[VersionStatement] = []
    lines = text.split("\n")
    for no, line in enumerate(lines, 1):
        if "sglang" in line.lower() or "version" in line.lower() or _BARE.search(line):
            out += _statements(no, line, lines[no:no + 3])
    return out


def _statements(no: int, line: str, after: list[str]) -> list[VersionStatement]:
    """The statements of one line (``after``: the lines that follow, for `pip show`)."""
    out: list[VersionStatement] = []
    taken: list[tuple[int, int]] = []
    shown = line.strip()[:100]

    def add(version: str, form: str, rank: int, span: tuple[int, int]) -> None:
        if not any(a < span[1] and span[0] < b for a, b in taken):
            taken.append(span)
            out.append(VersionStatement(version, no, form, rank, shown))

    if _PIP_SHOW.match(line):
        m = _PIP_VERSION.match(next((x for x in after if x.strip()), ""))
        if m:
            return [VersionStatement(m.group(1), no, "pip show", 2, shown)]
    for form, rank, pattern in _FORMS:
        for m in pattern.finditer(line):
            add(m.group(1), form, rank, m.span())
    upgrades = {m.group(1): m.group(2) for m in _UPGRADE.finditer(line)}
    for m in _TEXT.finditer(line):
        add(upgrades.get(m.group(1), m.group(1)), "text", 3, (m.start(), max(m.end(), _upgrade_end(line, m))))
    for m in _BARE.finditer(line):
        head = line[:m.start()]
        word = (re.findall(r"[A-Za-z]+", head) or [""])[-1].lower()
        if (word in _BEFORE_BARE or _BARE_HEAD.fullmatch(head)) and m.group(1) not in upgrades:
            add(m.group(1), "text", 3, m.span())  # (`from v0.5.9 to v0.5.11`: the second is the one)
    return out


def _upgrade_end(line: str, m: re.Match) -> int:
    """Where an upgrade phrase that starts at the statement ends (so its target is not read twice)."""
    up = _UPGRADE.match(line, m.start(1) - (1 if line[m.start(1) - 1:m.start(1)] in "vV" else 0))
    return up.end() if up else m.end()


def choose_version(statements: list[VersionStatement]) -> tuple[VersionStatement | None, str | None]:
    """The statement to read the paste with, and a sentence when the statements disagree (None when
    they agree). The best form wins (check_env, then an install line, then prose); among equals the
    version stated most often, then the first."""
    if not statements:
        return None, None
    best = min(s.rank for s in statements)
    top = [s for s in statements if s.rank == best]
    count = Counter(s.version for s in top)
    version = max(count, key=lambda v: (count[v], -next(i for i, s in enumerate(top) if s.version == v)))
    chosen = next(s for s in top if s.version == version)
    others = [s for s in statements if s.version != version]
    if not others:
        return chosen, None
    listed = "; ".join(f"{s.version} at {s.where}" for s in _first_of_each(statements))
    if not any(s.rank == best for s in others):
        why = f"{_RANK_WORDS[best]} ranks above the rest"
    elif sorted(count.values())[-2:] == [count[version]] * 2:
        why = "the first stated; pass --sglang VERSION to choose"
    else:
        why = f"stated {count[version]} times; pass --sglang VERSION to choose"
    return chosen, f"the text states different sglang versions ({listed}); read with {version} ({why})"


def _first_of_each(statements: list[VersionStatement]) -> list[VersionStatement]:
    seen: dict[str, VersionStatement] = {}
    for s in statements:
        seen.setdefault(s.version, s)
    return list(seen.values())
