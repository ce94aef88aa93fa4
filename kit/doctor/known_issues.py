"""The database of sglang's known performance issues (``kit/data/known_issues/*.yaml``), and how a case meets one.

    from kit.doctor import known_issues as ki
    entries = ki.load()                        # every entry of every file, each with its ``_file``
    ki.validate(entries[0], entries)           # [] or the schema problems of that entry
    m = ki.match(entries[0], case)             # Match: "matches" | "partial" | "no", one Check per trigger key
    m.checks[0].status, m.checks[0].fact       # "held" | "not held" | "unknown", and the fact it read

The schema is docs/known-issues.md. A trigger key is evaluated against the doctor's facts on a
:class:`kit.doctor.case.Case`: the release (``case.ev.version`` and how it was known), resolved
ServerArgs fields (``case.value``), config.json (architectures, model_type, quant_method), the GPUs
(named by nvidia-smi or ``--gpu``, mapped to vendor and SM/gfx by kit/data/gpus.yaml) and the
environment. A key the evidence does not tell is "unknown", never guessed; ``partial`` means every
key that is known holds and some are unknown (an open question, with what to send).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from kit._data import DATA, load_yaml
from kit._versions import parse as parse_version
from kit._versions import specifier
from kit.errors import DataFileError, KitError, UsageError

__all__ = ["AREAS", "CONFIDENCE", "DIRECTORY", "SYMPTOM_METRICS", "TRIGGER_KEYS", "Check", "Match",
           "evidence_for", "first_source", "gpu_facts", "gpu_named", "impact_share", "int_range", "load", "match", "release",
           "release_or_none", "validate", "workaround_changes"]

DIRECTORY = DATA / "known_issues"
AREAS = ("graphs", "attention", "moe", "quantization", "speculative", "scheduler", "cache", "pd", "lora", "amd",
         "comm", "sampling", "tokenizer", "other")
CONFIDENCE = ("maintainer-confirmed", "fix-merged", "reporter-only")
SYMPTOM_METRICS = ("decode tok/s", "ttft", "throughput", "itl", "memory", "startup", "accuracy-preserving-slowdown")
FIXED_BASES = ("wheel", "tag", "dates", "unfixed")
INTRODUCED_BASES = ("wheel", "pr", "reporter")
# Each trigger key and the shape of its value.
TRIGGER_KEYS = {
    "fields": "mapping", "env": "mapping",
    "attention_backend": "list", "moe_runner_backend": "list", "sampling_backend": "list", "quantization": "list",
    "speculative_algorithm": "list", "architectures": "list", "model_type": "list", "gfx": "list",
    "gpu_names": "list", "gpu_vendor": "vendor",
    "sm": "range", "tp": "range", "dp": "range", "ep": "range",
    "pd_disaggregation": "bool", "lora": "bool",
}
REQUIRED = ("id", "title", "area", "sources", "affected", "fixed_in", "fixed_basis", "trigger", "symptom", "fix",
            "confidence", "excerpt")
OPTIONAL = ("fixed_check", "introduced_basis", "introduced_check", "confirm", "notes", "note", "workload")
# workload: what the requests (or the deployment around the server, such as where the checkpoint is read from)
# must have for the issue to matter ("streaming requests that carry stop strings"), a condition no launch, log
# or config shows: a match is then an open question ("only with ..."), not a finding.
# introduced_check: the line of the slow code path in the first affected release's wheel; absent_in (the
# release before, without it, a note in parentheses allowed), also_in and last_in (releases that still have it).
INTRODUCED_CHECK_KEYS = ("release", "file", "text", "absent_in", "also_in", "last_in")
_PR_OR_ISSUE = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(pull|issues)/\d+/?$")
_RELEASE = re.compile(r"^\d+\.\d+\.\d+(\.\d+)?((a|b|rc)\d+)?(\.post\d+)?$")
EXCERPT_MAX_LINES = 60
# A workaround the rule can apply: a flag of the release's flag table, or an environment variable.
_WORKAROUND = re.compile(r"^(--[a-z][a-z0-9-]*(?:[= ]\S+)?|[A-Z_][A-Z0-9_]*=\S*)(?: \(env\))?$")

# What to send when a key is unknown.
NEEDS = {
    "release": "the sglang version (--sglang, or the server log's first lines / `python -m sglang.check_env`)",
    "gpu": "the GPUs: `nvidia-smi` output (or --gpu NAME)",
    "model": "the model's config.json (--model DIR_OR_CONFIG_JSON)",
    "launch": "the launch: the server log's server_args line or the launch command (--log / --command)",
    "env": "the server's environment (`cat /proc/PID/environ | tr '\\0' '\\n'`, or `env`)",
}


@dataclass(frozen=True)
class Check:
    """One trigger key against the case: ``held``, ``not held`` or ``unknown``, with the fact read."""

    key: str
    status: str
    fact: str
    needs: str = ""  # unknown: the evidence that would tell

    def to_dict(self) -> dict:
        return {"key": self.key, "status": self.status, "fact": self.fact, "needs": self.needs}


@dataclass
class Match:
    entry: dict
    status: str  # "matches" | "partial" | "no"
    checks: list[Check] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.entry.get("id"))

    def _with(self, status: str) -> list[Check]:
        return [c for c in self.checks if c.status == status]

    @property
    def held(self) -> list[Check]:
        return self._with("held")

    @property
    def unknown(self) -> list[Check]:
        return self._with("unknown")

    @property
    def failed(self) -> list[Check]:
        return self._with("not held")

    def check(self, key: str) -> Check | None:
        return next((c for c in self.checks if c.key == key), None)

    @property
    def needs(self) -> list[str]:
        return list(dict.fromkeys(c.needs for c in self.unknown if c.needs))

    def question(self) -> str:
        """A partial match as an open question: what holds, and what to send."""
        e = self.entry
        held = "; ".join(c.fact for c in self.held) or "nothing known holds yet"
        unknown = ", ".join(c.key for c in self.unknown)
        fix = e.get("fix") or {}
        remedy = ([f"upgrade to {fix['upgrade_to']}"] if fix.get("upgrade_to") else []) + \
            [f"workaround {w}" for w in fix.get("workaround") or []]
        return (f"known issue {self.id} ({e.get('title', '').strip()}; {first_source(e)}) may apply: {held}; "
                f"not checked: {unknown}: needs {'; '.join(self.needs)}"
                + (f"; if it does: {', '.join(remedy)}" if remedy else ""))

    def to_dict(self) -> dict:
        e = self.entry
        return {"id": self.id, "status": self.status, "title": str(e.get("title", "")).strip(),
                "area": e.get("area"), "sources": list(e.get("sources") or []), "affected": e.get("affected"),
                "fixed_in": e.get("fixed_in"), "fixed_basis": e.get("fixed_basis"),
                "confidence": e.get("confidence"), "symptom": e.get("symptom"), "fix": e.get("fix"),
                "confirm": e.get("confirm"), "checks": [c.to_dict() for c in self.checks], "needs": self.needs,
                "file": e.get("_file")}


# --------------------------------------------------------------------------- the database

def load(directory: Path | str | None = None) -> list[dict]:
    """Every entry of every ``*.yaml`` under ``directory`` (default: kit/data/known_issues), in file order;
    each entry gets ``_file`` (the file's name). A file without ``known_issues:`` is an error."""
    return [dict(e) for e in _load(str(directory or DIRECTORY))]


@lru_cache(maxsize=4)
def _load(directory: str) -> tuple[dict, ...]:
    out = []
    for path in sorted(Path(directory).glob("*.yaml")):
        data = load_yaml(path)
        if not isinstance(data, dict) or not isinstance(data.get("known_issues"), list):
            raise DataFileError(f"{path}: no `known_issues:` list at the top",
                                hint="each file of kit/data/known_issues holds `known_issues:` and a list of entries")
        for entry in data["known_issues"]:
            out.append({**entry, "_file": path.name} if isinstance(entry, dict) else {"_file": path.name,
                                                                                    "_bad": entry})
    return tuple(out)


def validate(entry: dict, entries: list[dict] | None = None, directory: Path | str | None = None) -> list[str]:
    """The schema problems of one entry (empty: it passes). ``entries`` (default: the whole database) is
    what its id must be unique among."""
    base = Path(directory or DIRECTORY)
    if not isinstance(entry, dict) or "_bad" in entry:
        return [f"an entry is not a mapping: {entry!r:.80}"]
    p: list[str] = []
    ident = entry.get("id")
    # fix may be empty and trigger may be {} (every deployment of the affected releases): both must be written.
    p += [f"missing {k}" for k in REQUIRED
          if entry.get(k) is None or (entry.get(k) in ("", [], {}) and k not in ("fix", "trigger"))]
    p += [f"unknown key {k!r} (schema keys: {', '.join(REQUIRED + OPTIONAL)})"
          for k in entry if not k.startswith("_") and k not in REQUIRED + OPTIONAL]
    if not isinstance(ident, str) or not re.fullmatch(r"ki-[a-z0-9][a-z0-9.-]*", ident):
        p.append(f"id {ident!r} is not ki-<lowercase slug>")
    others = load() if entries is None else entries
    if sum(1 for e in others if isinstance(e, dict) and e.get("id") == ident) > 1:
        p.append(f"id {ident!r} is not unique")
    if entry.get("area") not in AREAS:
        p.append(f"area {entry.get('area')!r} is not one of {', '.join(AREAS)}")
    sources = entry.get("sources")
    if not isinstance(sources, list) or not all(isinstance(s, str) and s.startswith("http") for s in sources):
        p.append("sources must be a list of URLs")
    elif not any(_PR_OR_ISSUE.match(s) for s in sources):
        p.append("sources name no https://github.com/OWNER/REPO/(pull|issues)/N")
    affected = _spec(entry.get("affected"))
    if affected is None:
        p.append(f"affected {entry.get('affected')!r} is not a PEP 440 specifier")
    p += _check_fixed(entry, affected)
    p += _check_trigger(entry.get("trigger"))
    symptom = entry.get("symptom")
    if not isinstance(symptom, dict) or symptom.get("metric") not in SYMPTOM_METRICS \
            or not isinstance(symptom.get("change"), str):
        p.append(f"symptom needs metric (one of {', '.join(SYMPTOM_METRICS)}) and change (the source's numbers)")
    p += _check_fix(entry)
    if entry.get("confidence") not in CONFIDENCE:
        p.append(f"confidence {entry.get('confidence')!r} is not one of {', '.join(CONFIDENCE)}")
    p += _check_excerpt(entry, base)
    if "workload" in entry and (not isinstance(entry["workload"], str) or not entry["workload"].strip()):
        p.append("workload must be a sentence: what the requests must do for the issue to matter")
    return p


def _check_fixed(entry: dict, affected: SpecifierSet | None) -> list[str]:
    p = []
    fixed, basis = entry.get("fixed_in"), str(entry.get("fixed_basis") or "")
    kind = re.match(r"[a-z]+", basis)
    kind = kind.group(0) if kind else ""
    if kind not in FIXED_BASES:
        p.append(f"fixed_basis {basis[:40]!r} does not start with one of {', '.join(FIXED_BASES)}")
    if fixed == "unfixed":
        if kind and kind != "unfixed":
            p.append("fixed_in is 'unfixed' but fixed_basis is not 'unfixed: ...'")
    elif release_or_none(fixed) is None:
        p.append(f"fixed_in {fixed!r} is neither a release nor 'unfixed'")
    elif affected is not None and parse_version(str(fixed)) in affected:
        p.append(f"fixed_in {fixed} is inside affected {entry.get('affected')}")
    if kind == "wheel":
        check = entry.get("fixed_check")
        if not isinstance(check, dict) or not all(check.get(k) for k in ("release", "file", "text")):
            p.append("fixed_basis 'wheel' needs fixed_check {release, file, text}")
        elif str(check["release"]) != str(fixed):
            p.append(f"fixed_check.release {check['release']} is not fixed_in {fixed}")
    intro = entry.get("introduced_basis")
    if intro is not None and not str(intro).startswith(INTRODUCED_BASES):
        p.append(f"introduced_basis {intro!r} is not one of {', '.join(INTRODUCED_BASES)}")
    if "introduced_check" in entry:
        p += _check_introduced(entry.get("introduced_check"), str(intro or ""), affected)
    return p


def _check_introduced(check: Any, intro: str, affected: SpecifierSet | None) -> list[str]:
    """introduced_check: the releases it names must agree with ``affected`` (the line is in the affected
    releases it names, and not in ``absent_in``)."""
    if not isinstance(check, dict) or not all(check.get(k) for k in ("release", "file", "text")):
        return ["introduced_check needs {release, file, text} (optional absent_in, also_in, last_in)"]
    p = [f"introduced_check key {k!r} is not one of {', '.join(INTRODUCED_CHECK_KEYS)}"
         for k in check if k not in INTRODUCED_CHECK_KEYS]
    if not intro.startswith("wheel"):
        p.append("introduced_check is a wheel check: introduced_basis must be 'wheel'")
    having = [(k, str(check[k])) for k in ("release", "last_in") if k in check]
    having += [("also_in", r.strip()) for r in str(check.get("also_in") or "").split(",") if r.strip()]
    for key, rel in having:
        if (version := release_or_none(rel)) is None:
            p.append(f"introduced_check.{key} {rel!r} is not a release")
        elif affected is not None and parse_version(version) not in affected:
            p.append(f"introduced_check.{key} {rel} has the line but is outside affected {affected}")
    if "absent_in" in check:
        absent = release_or_none(str(check["absent_in"]).split(" (")[0])
        if absent is None:
            p.append(f"introduced_check.absent_in {check['absent_in']!r} is not a release (a note in parentheses)")
        elif affected is not None and parse_version(absent) in affected:
            p.append(f"introduced_check.absent_in {absent} lacks the line but is inside affected {affected}")
    return p


def _check_trigger(trigger: Any) -> list[str]:
    # An empty mapping is an issue of every deployment of the affected releases (a feature the release lacks);
    # a key that every GPU or launch meets would only make the match partial when that fact is not given.
    if not isinstance(trigger, dict):
        return ["trigger must be a mapping (empty: every deployment of the affected releases)"]
    p = []
    for key, value in trigger.items():
        shape = TRIGGER_KEYS.get(key)
        if shape is None:
            p.append(f"trigger key {key!r} is not one of {', '.join(TRIGGER_KEYS)}")
        elif shape == "mapping" and (not isinstance(value, dict) or not value):
            p.append(f"trigger.{key} must be a non-empty mapping")
        elif shape == "list" and (not _items(value) or any(isinstance(v, (dict, list)) for v in _items(value))):
            p.append(f"trigger.{key} must be a value or a list of values")
        elif shape == "vendor" and not all(v in ("nvidia", "amd") for v in _items(value)):
            p.append(f"trigger.{key} must be nvidia or amd, not {value!r}")
        elif shape == "bool" and not isinstance(value, bool):
            p.append(f"trigger.{key} must be true or false")
        elif shape == "range" and not all(int_range(v) is not None for v in _items(value)):
            p.append(f"trigger.{key} {value!r} is not an integer or a range such as '>=2' or '>=90,<100'")
    return p


def _check_fix(entry: dict) -> list[str]:
    fix = entry.get("fix")
    if not isinstance(fix, dict):
        return ["fix must be a mapping (upgrade_to, workaround, workaround_checked)"]
    p = []
    upgrade = fix.get("upgrade_to")
    if upgrade is not None and release_or_none(upgrade) is None:
        p.append(f"fix.upgrade_to {upgrade!r} is not a release")
    elif upgrade is not None and entry.get("fixed_in") not in (None, "unfixed") and release_or_none(
            entry.get("fixed_in")) is not None and parse_version(str(upgrade)) < parse_version(str(entry["fixed_in"])):
        p.append(f"fix.upgrade_to {upgrade} is before fixed_in {entry['fixed_in']}")
    workaround = fix.get("workaround") or []
    if not isinstance(workaround, list) or not all(isinstance(w, str) for w in workaround):
        p.append("fix.workaround must be a list of flags or KEY=VALUE")
    elif prose := [w for w in workaround if not _WORKAROUND.match(w)]:
        p.append(f"fix.workaround {prose[0]!r} is not a flag (--name [value]) or KEY=VALUE: advice in words goes in "
                 "notes, with workaround: []")
    elif workaround and not fix.get("workaround_checked"):
        p.append("fix.workaround names flags but fix.workaround_checked lists no release whose flag table has them")
    return p


def _check_excerpt(entry: dict, base: Path) -> list[str]:
    excerpt, ident = entry.get("excerpt"), entry.get("id")
    if not isinstance(excerpt, str):
        return []
    if excerpt != f"excerpts/{ident}.md":
        return [f"excerpt {excerpt!r} is not excerpts/{ident}.md"]
    path = base / excerpt
    if not path.is_file():
        return [f"excerpt {excerpt} does not exist"]
    text = path.read_text(encoding="utf-8")
    out = []
    first = first_source(entry)
    if first and first.rstrip("/") not in text:
        out.append(f"excerpt {excerpt} does not name the first source {first}")
    if len(text.splitlines()) > EXCERPT_MAX_LINES:
        out.append(f"excerpt {excerpt} is longer than {EXCERPT_MAX_LINES} lines")
    return out


def first_source(entry: dict) -> str:
    sources = entry.get("sources") or []
    return str(sources[0]) if sources else ""


# --------------------------------------------------------------------------- values

def release_or_none(text: Any) -> str | None:
    """``text`` as a release number (``0.5.9``, ``0.4.6.post5``, a leading ``v`` dropped), or None."""
    value = str(text or "").strip().removeprefix("v")
    if not _RELEASE.match(value):
        return None
    parsed = parse_version(value)
    return str(parsed) if parsed is not None else None


def release(text: str, option: str = "--sglang") -> str:
    """A release number, or a UsageError naming what was tried."""
    found = release_or_none(text)
    if found is None:
        raise UsageError(f"{option} {text!r} is not an sglang release: tried it as a release number X.Y.Z "
                         "(with .postN or rcN), as PyPI names sglang's releases",
                         hint="give the release the server runs, e.g. 0.5.9 (`pip show sglang`, or `python -m "
                              "sglang.check_env` on the server)")
    return found


def _spec(text: Any) -> SpecifierSet | None:
    return specifier(text) if isinstance(text, str) else None  # kit._versions: one parse of each range


def int_range(value: Any) -> SpecifierSet | None:
    """An integer range of a trigger (``">=2"``, ``">=90,<100"``, ``8``) as a specifier, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return specifier(f"=={value}")
    text = str(value).replace(" ", "")
    if re.fullmatch(r"\d+", text):
        return specifier(f"=={text}")
    if not re.fullmatch(r"(?:(?:==|!=|>=|<=|>|<)\d+)(?:,(?:==|!=|>=|<=|>|<)\d+)*", text):
        return None
    return _spec(text)


def in_range(number: int, value: Any) -> bool:
    return any(spec is not None and spec.contains(str(int(number))) for spec in map(int_range, _items(value)))


def _items(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _norm(text: Any) -> str:
    return str(text).strip().lower()


def _gpu_words(name: str) -> str:
    words = re.findall(r"[a-z0-9]+", str(name).lower())
    return "".join(w for w in words if w not in ("nvidia", "geforce", "tesla", "amd", "instinct"))


# --------------------------------------------------------------------------- matching

def match(entry: dict, case) -> Match:
    """How the case meets the entry: one Check for the release and one per trigger key (one per
    variable of ``fields`` and ``env``)."""
    checks = [_release(entry, case)]
    for key, wanted in (entry.get("trigger") or {}).items():
        if key in ("fields", "env") and isinstance(wanted, dict):
            checks += [(_field if key == "fields" else _env)(case, name, value) for name, value in wanted.items()]
        else:
            reader = _READERS.get(key)
            checks.append(reader(case, key, wanted) if reader is not None else
                          Check(key, "unknown", f"the kit does not read trigger key {key!r}"))
    if any(c.status == "not held" for c in checks):
        status = "no"
    elif any(c.status == "unknown" for c in checks):
        status = "partial"
    else:
        status = "matches"
    return Match(entry, status, checks)


def _release(entry: dict, case) -> Check:
    version, affected = case.ev.version, str(entry.get("affected"))
    if not version:
        return Check("release", "unknown", "the sglang version is not known", NEEDS["release"])
    told = case.ev.sources.get("version", "")
    basis = getattr(case.ev, "version_basis", None)
    reported = basis == "reported" or told.startswith(("the log", "/server_info"))
    how = ("given" if basis == "given" or told == "--sglang" else "as the server reported it" if reported
           else f"{basis}: {told}" if basis in ("stated", "inferred", "assumed") and told
           else f"assumed: {told}" if told else "assumed: its source is not recorded")
    spec = _spec(affected)
    guess = getattr(case.ev, "version_guess", None)
    if basis in ("inferred", "assumed") and spec is not None:
        # nobody told the release: the entry holds when every release that fits the evidence is affected, and
        # fails when none is; otherwise the release decides, and it is not known
        fits = [r for r in (getattr(guess, "fits", None) or []) if release_or_none(r)]
        if not fits:
            return Check("release", "unknown", f"sglang {version} is {basis}, and no release here fits the evidence",
                         NEEDS["release"])
        inside = [r for r in fits if parse_version(r) in spec]
        span = fits[0] if len(fits) == 1 else f"{fits[0]}-{fits[-1]}"
        if len(inside) == len(fits):
            return Check("release", "held", f"every release that fits the evidence ({span}, {basis}) is in {affected}")
        if not inside:
            return Check("release", "not held", f"no release that fits the evidence ({span}, {basis}) is in {affected}")
        return Check("release", "unknown", f"of the releases that fit the evidence ({span}, {basis}), "
                     f"{inside[0]}-{inside[-1]} are in {affected} and the others are not", NEEDS["release"])
    parsed = parse_version(version)
    if parsed is None:
        return Check("release", "unknown", f"sglang {version!r} ({how}) is not a release number", NEEDS["release"])
    inside = spec is not None and parsed in spec
    return Check("release", "held" if inside else "not held",
                 f"sglang {version} ({how}) is {'in' if inside else 'outside'} {affected}")


def _arg(case, name: str) -> tuple[bool, Any, str]:
    """(known, value, why not known) of a resolved ServerArgs field."""
    why = case.unknown(name)
    if why:
        return False, None, why
    if not case.has(name):
        return False, None, "no server arguments" if not case.ev.args else f"{name} is not in the server arguments"
    return True, case.value(name), ""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) < 1e-9
    return a == b or _norm(a) == _norm(b)


def _field(case, name: str, wanted: Any) -> Check:
    known, value, why = _arg(case, name)
    key = f"fields.{name}"
    if not known:
        return Check(key, "unknown", f"{name}: {why}", NEEDS["launch"])
    options = wanted if isinstance(wanted, list) and not isinstance(value, list) else [wanted]
    held = any(_same(value, w) for w in options)
    return Check(key, "held" if held else "not held",
                 f"{name} = {value!r} ({_origin(case, name)}); the issue needs {_either(wanted)}")


def _origin(case, name: str) -> str:
    asked = case.asked(name)
    return "the launch asked for it" if asked else "not asked for" if asked is False else "resolved"


def _either(wanted: Any) -> str:
    items = _items(wanted)
    return " or ".join(repr(w) for w in items) if len(items) > 1 else repr(items[0])


def _env(case, name: str, wanted: Any) -> Check:
    key, environ = f"env.{name}", case.ev.environ
    if environ is None:
        return Check(key, "unknown", f"{name}: the server's environment was not read", NEEDS["env"])
    value = environ.get(name)
    held = value is not None and any(str(value) == str(w) for w in _items(wanted))
    return Check(key, "held" if held else "not held",
                 f"{name}={value if value is not None else '(unset)'} in the environment; the issue needs "
                 f"{_either(wanted)}")


def _one_of(key: str, value: Any, wanted: Any, source: str) -> Check:
    values = [v for v in _items(value) if v not in (None, "")]
    held = any(_norm(v) == _norm(w) for v in values for w in _items(wanted))
    shown = ", ".join(map(str, values)) or "none"
    return Check(key, "held" if held else "not held", f"{key} {shown} ({source}); the issue needs {_either(wanted)}")


def _backend(case, key: str, wanted: Any) -> Check:
    names = {"attention_backend": ("attention_backend", "decode_attention_backend", "prefill_attention_backend"),
             "moe_runner_backend": ("moe_runner_backend", "moe_backend"),
             "sampling_backend": ("sampling_backend",)}[key]
    found = [(n, *_arg(case, n)) for n in names]
    values = [v for n, known, v, _ in found if known and v not in (None, "", "auto")]
    if not values:
        said = "; ".join(f"{n} = {v!r}" if k else f"{n}: {why}" for n, k, v, why in found if k or n == names[0])
        return Check(key, "unknown", f"{key}: {said or 'not in the arguments'}, so sglang chooses at startup "
                     "(its log names the backend it picked)", NEEDS["launch"])
    return _one_of(key, values, wanted, "server arguments")


def _quantization(case, key: str, wanted: Any) -> Check:
    known, asked, _ = _arg(case, "quantization")
    config = case.ev.model_config
    method = None
    if config is not None:
        q = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config") or {}
        method = q.get("quant_method") if isinstance(q, dict) else None
    if asked:
        return _one_of(key, asked, wanted, "--quantization")
    if method:
        return _one_of(key, method, wanted, "config.json quantization_config.quant_method")
    if known and config is not None:
        return Check(key, "not held", f"{key}: none (no --quantization, no quantization_config in config.json); "
                     f"the issue needs {_either(wanted)}")
    return Check(key, "unknown", "quantization: " + ("config.json not read" if known else
                                                     "no --quantization known and config.json not read"),
                 NEEDS["model"] if known else NEEDS["model"] + "; " + NEEDS["launch"])


def _speculative(case, key: str, wanted: Any) -> Check:
    known, value, why = _arg(case, "speculative_algorithm")
    if not known:
        return Check(key, "unknown", f"speculative_algorithm: {why}", NEEDS["launch"])
    return _one_of(key, value if value not in (None, "", "NONE") else None, wanted, "server arguments")


def _model(case, key: str, wanted: Any) -> Check:
    config = case.ev.model_config
    if config is None:
        other = _other_family(case, wanted)
        if other:
            return Check(key, "not held", f"{key}: the model's config.json was not read, but the model path "
                                          f"{other[0]!r} names a {other[1]} model; the issue needs {_either(wanted)}")
        return Check(key, "unknown", f"{key}: the model's config.json was not read", NEEDS["model"])
    if key == "architectures":
        value = config.get("architectures") or (config.get("text_config") or {}).get("architectures")
    else:
        value = [config.get("model_type"), (config.get("text_config") or {}).get("model_type")]
    return _one_of(key, value, wanted, f"config.json, {case.ev.sources.get('model_config', 'given')}")


def _other_family(case, wanted: Any) -> tuple[str, str] | None:
    """(model path, family) when the launch's model path names exactly one model family of the database (a word
    of the path that begins some entry's architecture or model_type: qwen, deepseek, minimax, ...) and no name
    the issue needs begins with it; else None (a fine-tune with its own name, two families, the same family)."""
    known, path, _ = _arg(case, "model_path")
    if not known or not path:
        return None
    named = {w for w in re.findall(r"[a-z]{3,}", str(path).lower()) if any(n.startswith(w) for n in _model_names())}
    if len(named) != 1:
        return None
    (family,) = named
    if any(str(w).lower().startswith(family) for w in _items(wanted)):
        return None
    return str(path), family


@lru_cache(maxsize=1)
def _model_names() -> frozenset[str]:
    """Every architecture and model_type the database's triggers name, in lower case."""
    return frozenset(str(n).lower() for e in load() for k in ("architectures", "model_type")
                     for n in _items((e.get("trigger") or {}).get(k)))


def gpu_facts(case) -> list[dict]:
    """Per distinct GPU name of the case: {name, vendor, sm, gfx, key} (None where the table and the name
    do not tell); empty when no GPU was read."""
    from kit.hardware import match_gpu

    gpus = getattr(case.ev.hardware, "gpus", None) or []
    out, seen = [], set()
    for gpu in gpus:
        if gpu.name in seen:
            continue
        seen.add(gpu.name)
        profile = match_gpu(gpu.name)
        upper = gpu.name.upper()
        vendor = profile.vendor if profile else ("nvidia" if "NVIDIA" in upper or "TESLA" in upper else
                                                 "amd" if any(w in upper for w in ("AMD", "INSTINCT", "RADEON")) else
                                                 None)
        sm = profile.sm if profile else None
        cap = re.fullmatch(r"(\d+)\.(\d+)", str(getattr(gpu, "compute_cap", "") or ""))
        if sm is None and cap:
            sm, vendor = int(cap.group(1)) * 10 + int(cap.group(2)), vendor or "nvidia"
        out.append({"name": gpu.name, "vendor": vendor, "sm": sm, "gfx": profile.gfx if profile else None,
                    "key": profile.key if profile else None})
    return out


def gpu_named(name: str, wanted: Any) -> bool:
    """Whether the GPU ``name`` (as nvidia-smi prints it) is one the entry names: the same entry of the GPU
    table, or (a name the table lacks) the same model words. Never a part of a name: H200 and H20-3e are not
    an H20, GB200 is not a B200 (their tuned configs and kernels differ)."""
    from kit.hardware import match_gpu

    profile = match_gpu(name)
    words = _gpu_words(name)
    for w in _items(wanted):
        named = match_gpu(w)
        if named is not None:
            if profile is not None and profile.key == named.key:
                return True
        elif _gpu_words(w) and _gpu_words(w) == words:
            return True
    return False


def _gpu(case, key: str, wanted: Any) -> Check:
    facts = gpu_facts(case)
    if not facts:
        return Check(key, "unknown", f"{key}: no GPU was read", NEEDS["gpu"])
    results = []
    for g in facts:
        table = "" if g["key"] else " (not in the kit's GPU table)"
        if key == "gpu_names":
            held = gpu_named(g["name"], wanted)
            results.append(("held" if held else "not held", f"GPU {g['name']}; the issue names {_either(wanted)}"))
            continue
        value = g["vendor"] if key == "gpu_vendor" else g[key]
        if key in ("sm", "gfx") and g["vendor"] and g["vendor"] != ("nvidia" if key == "sm" else "amd"):
            results.append(("not held", f"GPU {g['name']} is {g['vendor']}, which has no {key}; the issue needs "
                                        f"{key} {_either(wanted)}"))
        elif value is None:
            results.append(("unknown", f"GPU {g['name']}{table}: {key.replace('gpu_', '')} unknown"))
        else:
            held = in_range(value, wanted) if key == "sm" else any(_norm(value) == _norm(w) for w in _items(wanted))
            results.append(("held" if held else "not held",
                            f"GPU {g['name']}: {key.replace('gpu_', '')} {value}{table}; the issue needs "
                            f"{_either(wanted)}"))
    statuses = {s for s, _ in results}
    status = "not held" if "not held" in statuses else "unknown" if "unknown" in statuses else "held"
    fact = "; ".join(dict.fromkeys(f for s, f in results if s == status))
    return Check(key, status, fact, NEEDS["gpu"] + " (a GPU in kit/data/gpus.yaml, or nvidia-smi --query-gpu="
                 "name,compute_cap)" if status == "unknown" else "")


def _parallel(case, key: str, wanted: Any) -> Check:
    known, tp, why = _arg(case, "tp_size")
    if key == "tp":
        value = int(tp or 1) if known else None
    elif key == "dp":
        k, dp, why = _arg(case, "dp_size")
        value = int(dp or 1) if k else None
    else:
        k, ep, why2 = _arg(case, "ep_size")
        if k:
            value = int(ep or 1)
        elif known and case.value("enable_ep_moe") is True:
            value = int(tp or 1)  # releases before ep_size: expert parallelism spans the TP ranks
        else:
            value = 1 if known else None
    if value is None:
        return Check(key, "unknown", f"{key}: {why}", NEEDS["launch"])
    held = in_range(value, wanted)
    return Check(key, "held" if held else "not held", f"{key} {value} (server arguments); the issue needs "
                                                      f"{_either(wanted)}")


def _switch(case, key: str, wanted: Any) -> Check:
    if key == "pd_disaggregation":
        known, mode, why = _arg(case, "disaggregation_mode")
        value, shown = (mode not in (None, "", "null"), f"disaggregation_mode {mode!r}") if known else (None, "")
    else:
        known_paths, paths, why = _arg(case, "lora_paths")
        known_on, on, _ = _arg(case, "enable_lora")
        known = known_paths or known_on
        value = bool(paths) or on is True if known else None
        shown = f"lora_paths {paths!r}" + (f", enable_lora {on!r}" if known_on else "")
    if not known:
        return Check(key, "unknown", f"{key}: {why}", NEEDS["launch"])
    return Check(key, "held" if value is bool(wanted) else "not held",
                 f"{shown} (server arguments); the issue needs {key} {'on' if wanted else 'off'}")


_READERS = {
    "attention_backend": _backend, "moe_runner_backend": _backend, "sampling_backend": _backend,
    "quantization": _quantization, "speculative_algorithm": _speculative,
    "architectures": _model, "model_type": _model,
    "gpu_vendor": _gpu, "sm": _gpu, "gfx": _gpu, "gpu_names": _gpu,
    "tp": _parallel, "dp": _parallel, "ep": _parallel,
    "pd_disaggregation": _switch, "lora": _switch,
}


# --------------------------------------------------------------------------- what an entry says to do

def impact_share(entry: dict) -> float | None:
    """The slowdown the source measured, as a share lost (1 - slower/faster of its first ``A -> B``
    pair), or None when the entry gives no such pair or its metric is not a speed."""
    symptom = entry.get("symptom") or {}
    if symptom.get("metric") not in ("decode tok/s", "ttft", "throughput", "itl", "accuracy-preserving-slowdown"):
        return None
    found = re.search(r"(\d[\d,]*(?:\.\d+)?)\s*(?:->|→|=>)\s*(\d[\d,]*(?:\.\d+)?)", str(symptom.get("change") or ""))
    if not found:
        return None
    a, b = (float(x.replace(",", "")) for x in found.groups())
    if a <= 0 or b <= 0:
        return None
    return 1 - min(a, b) / max(a, b)


def workaround_changes(entry: dict, case) -> tuple[list[tuple[str, str | None, tuple | None]], list[str]]:
    """The entry's workarounds this case's release takes: [(option, value, setenv)], and a sentence for each
    one left out (a flag not in this release's flag table) or not checked (no flag table at hand)."""
    kept, notes = [], []
    for text in (entry.get("fix") or {}).get("workaround") or []:
        words = shlex.split(str(text))
        if words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words[0].partition("=")
            kept.append(("", None, (name, value)))
            continue
        if not words or not words[0].startswith("--"):
            notes.append(f"workaround: {text}")
            continue
        option = words[0].split("=", 1)[0]
        value = words[0].split("=", 1)[1] if "=" in words[0] else (words[1] if len(words) > 1 else None)
        flags = case.flags
        if flags is None:
            checked = ", ".join((entry.get("fix") or {}).get("workaround_checked") or []) or "no release"
            notes.append(f"workaround {text} (not checked against sglang {case.ev.version or '?'}'s flags: its "
                         f"source is not at hand; the database checked it in {checked})")
        elif any(option in s.option_strings for s in flags):
            kept.append((option, value, None))
        else:
            notes.append(f"workaround {text} is not offered: sglang {case.ev.version} has no {option} flag")
    return kept, notes


def evidence_for(version: str | None, gpu: str | None = None, model: str | None = None, *, count: int = 1,
                 evidence=None):
    """A doctor's Evidence from a release, a GPU (a key of the GPU table or the name nvidia-smi prints;
    an unknown one is kept, with vendor and SM unknown) and a model (a config.json, a directory or a hub
    id). With ``evidence`` (a launch read by kit.doctor.from_files), fills only what it lacks."""
    from kit.hardware import GPU, Hardware, match_gpu

    from .evidence import Evidence

    ev = evidence if evidence is not None else Evidence("known-issues")
    if version and not ev.version:
        ev.version, ev.sources["version"] = version, "--sglang"
    if gpu and not getattr(ev.hardware, "gpus", None):
        profile = match_gpu(gpu)
        name = profile.name if profile is not None else gpu
        count = int(ev.args.get("tp_size") or count) if ev.args else count
        ev.hardware = Hardware(f"--gpu {gpu}", [GPU(i, name) for i in range(count)],
                               note=f"GPUs named by --gpu {gpu}, not read from nvidia-smi")
        ev.sources["hardware"] = f"--gpu {gpu}"
        if profile is None:
            ev.problems.append(f"GPU {gpu!r} is not in the kit's GPU table (kit/data/gpus.yaml): its vendor and SM "
                               "are unknown, so the issues that depend on them stay open (`sgl-kit dryrun gpus` "
                               "lists the known GPUs)")
    if model:
        _add_model(ev, model)
    return ev


def _add_model(ev, model: str) -> None:
    from kit.model_config import config_for, load_model_config

    try:
        if Path(model).exists():
            ev.model_config, ev.sources["model_config"] = load_model_config(model), model
        elif (hit := config_for(model)) is not None:
            ev.model_config, ev.sources["model_config"] = hit
        else:
            ev.problems.append(f"no config.json for --model {model}: not a file or directory here, and neither the "
                               "hub nor the kit's catalog answered; the issues that depend on the model stay open")
    except KitError as err:
        ev.problem(f"--model {model}", err)
