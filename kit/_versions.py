"""sglang's version numbers: one parse, one order and one range test for the whole kit (PEP 440, which
orders sglang's own forms: 0.5.10rc1 < 0.5.10 < 0.5.10.post1 < 0.5.11).

    key("0.5.10rc1") < key("0.5.9")   # False: 0.5.9 comes first
    in_range("0.5.11", ">=0.5.10")    # True; a version or range that does not parse is never in one
"""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["in_range", "key", "parse", "specifier", "triple"]


_LEADING = re.compile(r"\d+(?:\.\d+)+(?:\.?(?:rc|post|dev|a|b)\d+)*")


def parse(version: str | None) -> Version | None:
    """The version, or None when it is not one (a branch name, "main"). A leading "v" is allowed, as
    release tags write it, and a suffix after the version is dropped, as image tags add one
    (``v0.5.19-cu129`` is 0.5.19)."""
    if not version:
        return None
    text = str(version).strip().removeprefix("v")
    try:
        return Version(text)
    except InvalidVersion:
        match = _LEADING.match(text)
        return Version(match.group(0)) if match else None


def key(version: str | None) -> tuple:
    """A sort key: PEP 440 order, and what does not parse first, by its text."""
    parsed = parse(version)
    return (1, parsed, "") if parsed is not None else (0, Version("0"), str(version or ""))


def in_range(version: str | None, spec: str) -> bool:
    """Whether ``version`` is in the PEP 440 range ``spec`` (pre-releases included); False when either does
    not parse."""
    parsed, spec_set = parse(version), specifier(spec)
    return parsed is not None and spec_set is not None and spec_set.contains(parsed)


@lru_cache(maxsize=2048)
def specifier(spec: str) -> SpecifierSet | None:
    """The PEP 440 range ``spec`` (pre-releases included: sglang's rc releases are in ``>=0.5.9``), parsed once;
    None when it does not parse."""
    if not isinstance(spec, str) or not spec.strip():
        return None
    try:
        return SpecifierSet(spec, prereleases=True)
    except InvalidSpecifier:
        return None


def triple(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, micro) of a version, or None when it does not parse."""
    parsed = parse(version)
    return None if parsed is None else (parsed.major, parsed.minor, parsed.micro)
