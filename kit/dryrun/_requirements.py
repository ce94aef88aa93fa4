"""Which packages a dry-run environment holds: a hand-pinned list, or one made from the wheel.

Two kinds of sglang version:

- **verified**: ``kit/data/dryrun/requirements-VERSION.txt`` pins every package by hand
  and the tests run the incident on it;
- **best-effort**: any other 0.5.x from 0.5.6 on. The list is made from the sglang wheel's
  own ``Requires-Dist`` by the rules in ``kit/data/dryrun/rules.yaml`` (what to drop and why,
  what the dry-run stands in for, the CPU torch), resolved once by pip and cached under
  ``<cache>/dryrun/requirements/``. Setup then installs it exactly like a hand-pinned list.

`plan(version)` is the offline half (wheel metadata and the rules: what is kept, what is
dropped and why); `generated_requirements(version, python)` adds pip's resolution.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kit._paths import cache_dir
from kit._proc import pip, pip_said
from kit._versions import key as version_key
from kit._wheels import norm_dist, wheel
from kit.errors import CommandTimeout, DryRunError, PackageNotFound, SetupFailed, UnsupportedVersion

__all__ = ["Dropped", "RequirementPlan", "Rules", "generated_requirements", "is_verified", "load_rules",
           "plan", "verified_versions"]

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "dryrun"
RULES_FILE = DATA_DIR / "rules.yaml"
# What pip is asked to evaluate markers for: the environment's interpreter.
TARGET = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
_RESOLVE_TIMEOUT = 900.0
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+")


def canonical(name: str) -> str:
    """PEP 503 normalisation: `Typing_Extensions` -> `typing-extensions`."""
    return re.sub(r"[-_.]+", "-", name).lower()




# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rules:
    """kit/data/dryrun/rules.yaml, read."""

    first: str
    below: str
    torch: str
    drop: dict[str, tuple[str, tuple[str, ...]]]  # group -> (reason, patterns)
    stub: dict[str, str]  # module -> reason
    add: dict[str, str]  # package -> reason
    modules: dict[str, tuple[str, ...]]  # package -> import names
    digest: str  # of what decides the package list: drop, add, modules, torch
    stub_below: dict[str, str] = field(default_factory=dict)  # module -> first version that needs no stand-in

    def stubs_for(self, version: str) -> list[str]:
        """The modules the dry-run stands in for, for this sglang version."""
        return [m for m in self.stub
                if m not in self.stub_below or version_key(version) < version_key(self.stub_below[m])]

    def dropped_by(self, name: str) -> str | None:
        """The drop group whose patterns match this package name, if any."""
        name = canonical(name)
        for group, (_reason, patterns) in self.drop.items():
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return group
        return None

    def import_names(self, package: str) -> tuple[str, ...]:
        package = canonical(package)
        return self.modules.get(package, (package.replace("-", "_"),))

    def package_for_module(self, module: str) -> str:
        """The package that provides `import module`, by the `modules` table or by its name."""
        top = module.split(".")[0]
        for package, names in self.modules.items():
            if any(top == m.split(".")[0] for m in names):
                return package
        return canonical(top)

    def package_of(self, module: str, candidates) -> str | None:
        """Which of `candidates` (package names) `import module` would come from."""
        top = module.split(".")[0]
        for package in candidates:
            if any(top == m.split(".")[0] for m in self.import_names(package)):
                return canonical(package)
        return None

    def covers(self, version: str) -> bool:
        return version_key(self.first) <= version_key(version) < version_key(self.below)


@lru_cache(maxsize=4)
def _rules_at(path: str, text: str) -> Rules:
    import yaml

    from kit._data import yaml_loader

    data = yaml.load(text, Loader=yaml_loader()) or {}  # noqa: S506 - a safe loader
    try:
        drop = {group: (" ".join(str(entry["reason"]).split()),
                        tuple(canonical(p) for p in entry["packages"]))
                for group, entry in data["drop"].items()}
        stub = {str(module): " ".join(str((entry or {}).get("reason", "")).split())
                for module, entry in data["stub"].items()}
        stub_below = {str(module): str(entry["below"]) for module, entry in data["stub"].items()
                      if isinstance(entry, dict) and entry.get("below")}
        add = {canonical(k): " ".join(str(v).split()) for k, v in (data.get("add") or {}).items()}
        modules = {canonical(k): tuple(v) for k, v in (data.get("modules") or {}).items()}
        # What decides the package list (not the stand-ins, which act at run time) names the list
        # and the environments built from it, so that editing `stub` rebuilds nothing.
        listed = json.dumps([drop, add, modules, str(data["torch"])], sort_keys=True)
        rules = Rules(str(data["versions"]["from"]), str(data["versions"]["below"]), str(data["torch"]),
                      drop, stub, add, modules, hashlib.sha256(listed.encode()).hexdigest()[:10], stub_below)
    except (KeyError, TypeError, AttributeError) as exc:
        raise DryRunError(f"{path}: malformed dry-run rules ({type(exc).__name__}: {exc})",
                          hint="see the comments at the top of the file for its shape") from None
    return rules


def load_rules(path: Path | None = None) -> Rules:
    path = Path(path or RULES_FILE)
    return _rules_at(str(path), path.read_text())


# --------------------------------------------------------------------------- verified lists


def verified_versions() -> list[str]:
    """Versions with a hand-pinned list in kit/data/dryrun/, oldest first."""
    found = [p.name[len("requirements-"):-len(".txt")] for p in DATA_DIR.glob("requirements-*.txt")]
    return sorted(found, key=version_key)


def verified_file(version: str) -> Path:
    return DATA_DIR / f"requirements-{version}.txt"


def is_verified(version: str) -> bool:
    return isinstance(version, str) and "/" not in version and verified_file(version).is_file()


def check_version(version: str) -> str:
    """'verified' or 'best-effort', or UnsupportedVersion saying what is supported."""
    if is_verified(version):
        return "verified"
    rules = load_rules()
    if isinstance(version, str) and re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", version) and rules.covers(version):
        return "best-effort"
    raise UnsupportedVersion(
        f"the dry-run cannot build an environment for sglang {version!r}: it supports "
        f"{', '.join(verified_versions())} (verified) and any other {rules.first} <= version < {rules.below} "
        "(best-effort, from the wheel's own requirements)",
        hint="use one of those versions; to support another, see docs/guide.md 'Adding an sglang version'",
    )


# --------------------------------------------------------------------------- the plan (offline)


@dataclass(frozen=True)
class Dropped:
    requirement: str
    group: str  # a drop group of the rules ("gpu", "serving"), or "torch"
    reason: str


@dataclass
class RequirementPlan:
    """What the wheel asks for, and what the dry-run keeps of it, before pip resolves anything."""

    version: str
    wheel: str
    requires: list[str]  # Requires-Dist that apply on CPython 3.11 / Linux x86_64, without extras
    keep: list[str]
    dropped: list[Dropped] = field(default_factory=list)
    added: dict[str, str] = field(default_factory=dict)  # package -> why (rules.yaml `add`)
    stubbed: dict[str, str] = field(default_factory=dict)
    torch: str = ""
    rules_digest: str = ""

    def dropped_names(self, group: str | None = None) -> list[str]:
        return [_name(d.requirement) for d in self.dropped if group is None or d.group == group]

    def header(self) -> list[str]:
        lines = [f"sglang {self.version}: made from {self.wheel}'s Requires-Dist by kit/data/dryrun/rules.yaml "
                 f"({self.rules_digest})",
                 f"torch: the CPU build of torch=={self.torch} stands in for sglang's own pin"]
        groups: dict[str, list[Dropped]] = {}
        for d in self.dropped:
            groups.setdefault(d.group, []).append(d)
        for group, items in groups.items():
            if group == "torch":
                continue
            lines.append(f"dropped ({group}: {items[0].reason}):")
            lines.append("  " + ", ".join(d.requirement for d in items))
        for package, reason in self.added.items():
            lines.append(f"added {package}: {reason}")
        for module, reason in self.stubbed.items():
            lines.append(f"stand-in for `import {module}`: {reason}")
        return lines


def _name(requirement: str) -> str:
    return canonical(re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0])


def wheel_requires(path: Path) -> list[str]:
    """The Requires-Dist lines of a wheel that apply to the dry-run's interpreter (no extras)."""
    from packaging.requirements import InvalidRequirement, Requirement

    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            raise DryRunError(f"{path.name} has no .dist-info/METADATA")
        text = zf.read(names[0]).decode("utf-8", "replace")
    out = []
    for line in text.split("\n\n", 1)[0].splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(dict(TARGET)):
            continue  # an extra (`extra == "dev"`), another platform, another Python
        req.marker = None
        out.append(str(req))
    return out


def plan(version: str, *, rules: Rules | None = None) -> RequirementPlan:
    """The kept and dropped requirements for `version`, from its wheel (downloaded once, no deps)."""
    rules = rules or load_rules()
    if not rules.covers(version):
        check_version(version)  # raises, naming what is supported
    try:
        path = wheel("sglang", version)
    except PackageNotFound as exc:
        raise SetupFailed(f"dry-run setup step 'requirements': no sglang {version} wheel: {exc.message}",
                          step="requirements", package=f"sglang=={version}", hint=exc.hint) from None
    requires = wheel_requires(path)
    keep, dropped = [], []
    for req in requires:
        name = _name(req)
        group = "torch" if name == "torch" else rules.dropped_by(name)
        if group == "torch":
            dropped.append(Dropped(req, "torch", f"the CPU build torch=={rules.torch} stands in"))
        elif group is not None:
            dropped.append(Dropped(req, group, rules.drop[group][0]))
        else:
            keep.append(req)
    names = {_name(r) for r in keep}
    added = {p: why for p, why in rules.add.items() if p not in names}
    keep += list(added)
    return RequirementPlan(version, path.name, requires, keep, dropped, added,
                           {m: rules.stub[m] for m in rules.stubs_for(version)}, rules.torch, rules.digest)


# --------------------------------------------------------------------------- pip's resolution


def generated_dir() -> Path:
    return cache_dir() / "dryrun" / "requirements"


def generated_file(version: str, rules: Rules | None = None) -> Path:
    rules = rules or load_rules()
    return generated_dir() / f"requirements-{version}-{rules.digest}.txt"


def read_pins(path: Path) -> list[str]:
    """The exact `name==version` lines of a list, torch first."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            if not _PIN.fullmatch(line):
                raise DryRunError(f"{path}: {line!r} is not an exact name==version pin")
            lines.append(line)
    return sorted(lines, key=lambda r: not r.lower().startswith("torch=="))


def generated_requirements(version: str, python: str, *, extra: list[str] = (), refresh: bool = False) -> Path:
    """The generated exact list for `version` (cached), resolved by pip run with `python` (3.11).

    `extra` names packages that the rules drop but this version turned out to import (the
    setup's check adds them); they are kept, and the list is resolved again.
    """
    rules = load_rules()
    target = generated_file(version, rules)
    if target.is_file() and not refresh and not extra:
        return target
    made = plan(version, rules=rules)
    extra = sorted({canonical(e) for e in extra} | set(_kept_extra(target)))
    dropped = {_name(d.requirement): d.requirement for d in made.dropped}
    wanted = made.keep + [dropped.get(e, e) for e in extra if e not in {_name(k) for k in made.keep}]
    pins = _resolve(wanted, rules, python)
    lines = ["# " + line for line in made.header()]
    if extra:
        lines.append(f"# kept although the rules drop them, because this version imports them: {', '.join(extra)}")
        lines.append("# kept-extra: " + " ".join(extra))
    lines.append(f"# resolved by pip for CPython 3.11 on Linux x86_64; {len(pins)} packages")
    lines += [f"torch=={rules.torch}", *pins]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(target)
    return target


def _kept_extra(path: Path) -> list[str]:
    if not path.is_file():
        return []
    for line in path.read_text().splitlines():
        if line.startswith("# kept-extra: "):
            return line.split(":", 1)[1].split()
    return []


def _resolve(wanted: list[str], rules: Rules, python: str) -> list[str]:
    """pip's exact choice for `wanted` with torch held at the CPU version, minus what the rules drop."""
    with tempfile.TemporaryDirectory(prefix="sgl-kit-resolve-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(f"torch=={rules.torch}\n")
        args = ["install", "--dry-run", "--ignore-installed", "--only-binary=:all:", "--quiet", "--report", "-",
                "-c", str(constraints), *wanted]
        try:
            proc = pip(args, python=python, timeout=_RESOLVE_TIMEOUT)
        except CommandTimeout as exc:
            raise SetupFailed(f"pip did not resolve the requirements within {_RESOLVE_TIMEOUT:g}s",
                              step="requirements", hint="check the network or the package index, then run "
                              "the same setup again: finished steps are kept") from exc
    if proc.returncode != 0:
        raise SetupFailed(
            "dry-run setup step 'requirements': pip could not resolve the wheel's requirements (less what "
            f"kit/data/dryrun/rules.yaml drops): {pip_said(proc)}",
            step="requirements",
            hint="a package the rules keep may have no wheel for CPython 3.11 on Linux; add it to a drop group "
                 "in kit/data/dryrun/rules.yaml if the argument code does not need it, then run setup again",
        )
    try:
        items = json.loads(proc.stdout)["install"]
        chosen = {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
    except (ValueError, KeyError, TypeError):
        raise SetupFailed(f"pip's install report was unreadable: {proc.stdout[:200]!r}", step="requirements") from None
    kept = {n: v for n, v in chosen.items()
            if n not in ("torch", "sglang") and rules.dropped_by(n) is None and n not in rules.stub}
    for name in wanted:  # what was asked for explicitly stays, even if a drop pattern matches
        n = _name(name)
        if n in chosen and n not in kept and n != "torch":
            kept[n] = chosen[n]
    return [f"{n}=={v}" for n, v in sorted(kept.items())]


def pins_for(version: str) -> list[str]:
    """Exact pins: the hand-pinned list of a verified version, else the cached generated one."""
    if is_verified(version):
        return read_pins(verified_file(version))
    path = generated_file(version)
    if not path.is_file():
        raise DryRunError(f"no requirements generated yet for sglang {version}",
                          hint=f"run `sgl-kit dryrun setup --sglang {version}`: it makes the list from the wheel")
    return read_pins(path)


def norm(name: str) -> str:
    return norm_dist(name)
