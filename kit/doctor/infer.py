"""Which sglang release to read evidence with when nobody says: inferred from the evidence, or assumed.

The doctor reads a launch command with a release's flag table and a log with its fields. When no
version is given (``--sglang``), reported by the server (its log, ``/server_info``) or stated in the
text (check_env, ``sglang==X``, an image tag such as ``lmsysorg/sglang:v0.4.1.post4-cu124``; ``:latest``
names no release), ``guess_version`` narrows every release since 0.3 (kit/data/releases.json: the same
table on every machine, made from the package index and each release's wheel; kit.doctor.releases) by what
the evidence holds:

- the flags of the launch: a release fits when its flag table accepts every flag (argparse's rules,
  unique prefixes included);
- the fields of a server_args line: a release fits when it has every field the line prints; a whole
  line (not cut off) is closest to the release with the fewest fields it does not print;
- the names ``kit/data/lineage.yaml`` knows: the releases where each existed;
- a date in the text (a log's timestamps): the release was built before it (a wheel's file times
  say when each release was built).

The release read with is the newest that fits (the closest, for a whole server_args line). When
nothing narrows the releases, it is the newest in the table (else the newest the package
index lists), said plainly as an assumption. ``VersionGuess.line`` is the sentence the report shows;
``spans`` names what the rules read that changes inside the fitting range (known issues, the
fast paths' history, the settings' eras), so a reader knows when the guess matters.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache

from kit.errors import CommandTimeout, KitError

__all__ = ["VersionGuess", "available_releases", "guess_version", "known_releases", "launch_options", "release_dates",
           "text_dates"]

_WHEEL = re.compile(r"^sglang-(\d[^-]*)-.*\.whl$")
_TREE = re.compile(r"^sglang-(\d.*)$")
_DATE = re.compile(r"(?<!\d)(20[2-3]\d)[-/](0[1-9]|1[0-2])[-/](0[1-9]|[12]\d|3[01])(?!\d)")


@dataclass
class VersionGuess:
    version: str | None  # the release to read with (None: no source anywhere)
    basis: str  # "inferred" (the evidence narrowed it) or "assumed" (nothing did)
    how: str  # what narrowed it, in words: "the flags", "the server_args fields and a date"
    fits: list[str] = field(default_factory=list)  # the releases considered that fit, oldest first
    considered: list[str] = field(default_factory=list)  # the releases considered (the table's, by default)
    unread: list[str] = field(default_factory=list)  # flags no release considered knows
    spans: list[str] = field(default_factory=list)  # what changes for the rules inside the fitting range
    reasons: list[str] = field(default_factory=list)  # one clause per clue

    @property
    def range(self) -> str | None:
        if not self.fits:
            return None
        return self.fits[0] if len(self.fits) == 1 else f"{self.fits[0]}-{self.fits[-1]}"

    def line(self) -> str:
        """``sglang 0.5.14 assumed (inferred from the flags, which fit 0.5.12-0.5.17; no version stated)``."""
        if self.version is None:
            return "no sglang version: none stated, and no release's source is here or downloadable"
        here = f" of the {len(self.considered)} releases considered" if self.considered else ""
        if self.basis == "inferred":
            fit = f", which fit{'s' if self.how.endswith('line') else ''} {self.range}{here}" if self.range else ""
            return f"sglang {self.version} assumed (inferred from {self.how}{fit}; no version stated)"
        return f"sglang {self.version} assumed ({self.how}; no version stated)"

    def to_dict(self) -> dict:
        return {"version": self.version, "basis": self.basis, "how": self.how, "range": self.range,
                "fits": list(self.fits), "considered": list(self.considered), "unread": list(self.unread),
                "spans": list(self.spans), "reasons": list(self.reasons)}


def _key(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(version))
    except InvalidVersion:
        return (-1, version)


def available_releases() -> list[str]:
    """The sglang releases whose source the kit has here (wheels and unpacked trees), oldest first."""
    from kit._paths import cache_dir

    found = set()
    root = cache_dir()
    for path in (root / "wheels").glob("sglang-*.whl"):
        m = _WHEEL.match(path.name)
        if m:
            found.add(m.group(1))
    trees = root / "trees"
    if trees.is_dir():
        for path in trees.iterdir():
            m = _TREE.match(path.name)
            if m and path.is_dir() and any(path.iterdir()):
                found.add(m.group(1))
    return sorted(found, key=_key)


@lru_cache(maxsize=1)
def _dates_of(names: tuple[str, ...]) -> dict[str, date]:
    from kit._paths import cache_dir

    out = {}
    for name in names:
        m = _WHEEL.match(name)
        try:
            with zipfile.ZipFile(cache_dir() / "wheels" / name) as z:
                newest = max(i.date_time for i in z.infolist())
        except (OSError, zipfile.BadZipFile, ValueError):
            continue
        if m and newest[0] > 1980:  # a reproducible build stamps 1980: no date
            out[m.group(1)] = date(*newest[:3])
    return out


def release_dates() -> dict[str, date]:
    """When each release was published (its first upload to the package index, kit/data/releases.json); for a
    release the table lacks, when its wheel here was built (the newest file time inside it)."""
    from kit._paths import cache_dir

    built = _dates_of(tuple(sorted(p.name for p in (cache_dir() / "wheels").glob("sglang-*.whl"))))
    return {**built, **{v: r.published for v, r in _listed().items() if r.published}}


def text_dates(text: str) -> list[date]:
    """The calendar dates in a text (``2025-06-12``, ``2025/06/12``: log timestamps, a thread's date)."""
    out = []
    for y, m, d in _DATE.findall(text or ""):
        try:
            out.append(date(int(y), int(m), int(d)))
        except ValueError:
            continue
    return out


def launch_options(texts: list[str]) -> list[str]:
    """The flags of the launches in ``texts`` as written (``--tp-size``; an Engine keyword as its field),
    read by shape only (no flag table)."""
    from kit.server_args import read_launch_text

    out: list[str] = []
    for text in texts:
        found = read_launch_text(text)
        for launch in found.launches:
            for flag in launch.flags:
                name = flag.option if flag.option.startswith("-") else (flag.field or flag.option)
                out.append(name.partition("=")[0])
            for name in launch.unreadable:  # set to a value the text does not tell: the flag is still there
                if not any(o.lstrip("-").replace("-", "_") == name for o in out):
                    out.append(name)
    return list(dict.fromkeys(o for o in out if o and o != "-"))


def _tables(releases: list[str]) -> dict[str, tuple]:
    """release -> (flag table, field names): from the table of releases (kit/data/releases.json), else, for a
    release it does not hold, from its source when that can be read."""
    from kit.launch_file import source_tree
    from kit.server_args import defaults, flag_table

    from .releases import table_of

    known = _listed()
    out = {}
    for version in releases:
        if version in known:
            out[version] = (table_of(known[version]), set(known[version].fields))
            continue
        try:
            tree = source_tree(None, version)
            out[version] = (flag_table(tree), set(defaults(tree)))
        except (KitError, OSError):
            continue
    return out


def _listed() -> dict:
    """The table of every release since 0.3 (kit.doctor.releases); empty when the file cannot be read."""
    from .releases import releases

    try:
        return releases()
    except KitError:
        return {}


def known_releases() -> list[str]:
    """The releases the doctor considers when none is stated: every release since 0.3 the table lists (the same
    on every machine), else, with the table unreadable, those whose source is here."""
    return list(_listed()) or available_releases()


def _accepts(table, fields: set[str], name: str) -> bool:
    if name.startswith("-"):
        try:
            return table.match(name) is not None
        except KitError:  # ambiguous prefix: argparse would exit
            return False
    return name in fields or table.get(name) is not None


def _lineage_fit(names: list[str], releases: list[str]) -> tuple[set[str], list[str]]:
    """The releases where every name lineage.yaml knows existed, and a clause per such name."""
    from kit.server_args import lineage_data

    fit, said = set(releases), []
    settings = lineage_data().get("settings") or {}
    for name in names:
        key = name.lstrip("-").replace("-", "_")
        for body in settings.values():
            entry = (body.get("names") or {}).get(key)
            if not entry:
                continue
            spans = [h["versions"] for h in entry.get("history") or [] if h.get("is") != "absent"]
            if not spans:
                continue
            inside = {r for r in releases if any(_contains(s, r) for s in spans)}
            fit &= inside
            said.append(f"{name} exists in {' or '.join(spans)} (kit/data/lineage.yaml)")
            break
    return fit, said


def _contains(spec: str, version: str) -> bool:
    from kit._versions import in_range

    return in_range(version, spec)


def guess_version(*, options: list[str] | None = None, fields: list[str] | None = None, whole_line: bool = False,
                  dates: list[date] | None = None, releases: list[str] | None = None) -> VersionGuess:
    """The release to read the evidence with, from its flags (``options`` as written), the fields of its
    server_args line (``whole_line``: not cut off) and the dates in it; see the module docstring."""
    options, fields, dates = list(options or []), list(fields or []), list(dates or [])
    considered = known_releases() if releases is None else list(releases)
    if not considered:
        return _from_index()
    tables = _tables(considered) if (options or fields) else {}
    fits = list(considered)
    how: list[str] = []
    reasons: list[str] = []
    unread: list[str] = []
    if options and tables:
        accepted = {v: {o for o in options if _accepts(t, f, o)} for v, (t, f) in tables.items()}
        unread = [o for o in options if not any(o in a for a in accepted.values())]
        known = [o for o in options if o not in unread]
        every = [v for v in fits if v in accepted and accepted[v] >= set(known)]
        if len(every) < len(fits):
            how.append("the flags")
        reasons.append(f"every flag of the launch{' the kit knows' if unread else ''} is accepted by {_span(every)}")
        if unread:
            reasons.append(f"no release considered knows {', '.join(unread)} (a fork's flag, a cut-off word, or a "
                           "release newer than the kit's table of releases)")
        fits = every or fits
    if fields and tables:
        having = [v for v in fits if v in tables and set(fields) <= tables[v][1]]
        if having:
            if len(having) < len(fits):
                how.append("the server_args line")
            reasons.append(f"every field of the server_args line is a field of {_span(having)}")
            fits = having
        else:
            reasons.append("no release considered has every field of the server_args line (a release newer than "
                           "the kit's table of releases, or a fork)")
    named, said = _lineage_fit(options, fits)
    if named and named != set(fits):
        fits = [v for v in fits if v in named]
        how.append("the flags' history")
    reasons += said
    if dates:
        built = release_dates()
        latest = max(dates)
        before = [v for v in fits if v not in built or built[v] <= latest]
        if before and len(before) < len(fits):
            fits = before
            how.append(f"the date {latest.isoformat()} in the text")
            reasons.append(f"the text is dated {latest.isoformat()}; releases published after it are left out "
                           "(kit/data/releases.json: each release's first upload to the package index)")
        elif not before:
            reasons.append(f"the text is dated {latest.isoformat()}, before every release that fits was published")
    chosen = fits[-1]
    if fields and whole_line and tables:
        chosen = min(reversed(fits), key=lambda v: len(tables[v][1] - set(fields)) if v in tables else 10**6)
    if not how:
        what = ("nothing in the evidence narrows the release" if options or fields or dates else
                "no flag, server_args line or date to infer it from")
        guess = VersionGuess(chosen, "assumed", f"{what}: the newest release considered",
                             fits=list(considered), considered=considered, unread=unread, reasons=reasons)
    else:
        guess = VersionGuess(chosen, "inferred", " and ".join(how), fits=fits, considered=considered,
                             unread=unread, reasons=reasons)
    guess.spans = spans_within(guess.fits) if len(guess.fits) > 1 else []
    return guess


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]} ({len(versions)} releases)"


def _from_index() -> VersionGuess:
    """No source here at all: the newest release the package index lists (``pip index versions sglang``)."""
    import sys

    from kit._proc import pip

    listed: list[str] = []
    try:
        proc = pip(["index", "versions", "sglang"], python=sys.executable, timeout=60)
        m = re.search(r"Available versions:\s*(.+)", proc.stdout)
        if proc.returncode == 0 and m:
            listed = sorted((v.strip() for v in m.group(1).split(",") if re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?",
                                                                                    v.strip())), key=_key)
    except (OSError, CommandTimeout):
        listed = []
    if not listed:
        return VersionGuess(None, "assumed", "no release's source is here and the package index could not be asked")
    return VersionGuess(listed[-1], "assumed", "no release's source is here: the newest release the package index "
                                               "lists (downloaded once)")


def spans_within(fits: list[str]) -> list[str]:
    """What the rules read that differs between the releases of ``fits``, each with the releases
    where it changes: a known issue (kit/data/known_issues), a fast path's history
    (kit/data/fast_path_history.yaml), the field that holds a setting (kit/data/lineage.yaml)."""
    from kit._data import DATA, load_yaml
    from kit.server_args import lineage_data

    def flips(specs: list[str]) -> list[str]:
        """The releases of ``fits`` where the set of ``specs`` holding changes."""
        states = [tuple(_contains(spec, v) for spec in specs) for v in fits]
        return [fits[i] for i in range(1, len(fits)) if states[i] != states[i - 1]]

    out = []
    entries = [e for path in sorted((DATA / "known_issues").glob("*.yaml"))  # kit.doctor.known_issues's files
               for e in (load_yaml(path) or {}).get("known_issues") or [] if isinstance(e, dict)]
    changing = [e["id"] for e in entries if flips([str(e.get("affected", ""))])]
    if changing:
        shown = ", ".join(changing[:5]) + (f" and {len(changing) - 5} more" if len(changing) > 5 else "")
        out.append(f"{len(changing)} known issue(s) affect some of these releases and not others ({shown}; "
                   "sgl-kit known-issues --sglang V lists them for one release)")
    for fast_path, entries in (load_yaml(DATA / "fast_path_history.yaml") or {}).items():
        by_when: dict[str, list[str]] = {}
        for entry in entries or []:
            if isinstance(entry, dict) and entry.get("versions"):
                by_when.setdefault(str(entry.get("when", "")), []).append(str(entry["versions"]))
        for when, specs in by_when.items():
            at = flips(specs)
            if at:
                out.append(f"what {fast_path} does {'with ' + when + ' ' if when else ''}decoding changes at "
                           f"{', '.join(at)} (the first release that fits with each change; kit/data/fast_path_history.yaml)")
    for setting, body in (lineage_data().get("settings") or {}).items():
        at = flips([e["versions"] for e in body.get("eras") or []])
        if at:
            out.append(f"the field that holds {body.get('what', setting)} changes at {', '.join(at)} "
                       "(the first release that fits with each change; kit/data/lineage.yaml)")
    return out
