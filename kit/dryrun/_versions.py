"""Which sglang versions the dry-run knows, how far each can be trusted, and which are set up here."""

from __future__ import annotations

import contextlib
import html
import re
import sys
from dataclasses import dataclass

from kit._proc import pip
from kit._versions import key as version_key
from kit.dryrun._env import _env_root, environment
from kit.dryrun._requirements import check_version, generated_dir, load_rules, verified_versions
from kit.errors import CommandTimeout, DryRunError

__all__ = ["VersionInfo", "released_versions", "versions"]

_INDEX_TIMEOUT = 60.0


@dataclass(frozen=True)
class VersionInfo:
    """One sglang version as the dry-run sees it.

    `status` is "verified" (a hand-pinned list in kit/data/dryrun/, run by the tests) or
    "best-effort" (a list made from the wheel's own requirements by kit/data/dryrun/rules.yaml);
    `state` is "ready", "partial" (a setup that did not finish) or "not set up".
    """

    version: str
    status: str
    state: str
    path: str
    size_bytes: int | None = None
    kept_extra: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def to_dict(self) -> dict:
        return {**self.__dict__, "kept_extra": list(self.kept_extra), "ready": self.ready}

    def __str__(self) -> str:
        size = f"  {self.size_bytes / 1e9:.2f} GB" if self.size_bytes else ""
        how = {"ready": "set up", "partial": "partly set up (run setup again to finish)",
               "not set up": f"not set up (sgl-kit dryrun setup --sglang {self.version})"}[self.state]
        return f"{self.version:<14} {self.status:<12} {how}{size}"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(str(self))}</code>"


def versions(*, sizes: bool = False, released: bool = False) -> list[VersionInfo]:
    """Every verified version, and each best-effort one this machine has started on (an environment
    or a generated list); with `released`, also every release in the rules' range that pip can find."""
    names = set(verified_versions())
    for path in _env_root().glob("sglang-*-py*-*"):
        if path.is_dir():
            names.add(path.name[len("sglang-"):].rsplit("-", 2)[0])
    for path in generated_dir().glob("requirements-*.txt"):
        names.add(path.name[len("requirements-"):].rsplit("-", 1)[0])
    if released:
        names.update(released_versions())
    out = []
    for version in sorted(names, key=version_key):
        try:
            status = check_version(version)
        except DryRunError:
            continue
        env = environment(version)
        state = "ready" if env.ready else "partial" if env.path.is_dir() else "not set up"
        info = env.check_info()
        out.append(VersionInfo(version, status, state, str(env.path),
                               env.size_bytes() if sizes and env.path.is_dir() else None,
                               tuple(info.get("kept_extra") or ())))
    return out


def released_versions() -> list[str]:
    """sglang releases in the rules' range, as the package index lists them (`pip index versions sglang`)."""
    rules = load_rules()
    with contextlib.suppress(OSError, CommandTimeout):
        proc = pip(["index", "versions", "sglang"], python=sys.executable, timeout=_INDEX_TIMEOUT)
        match = re.search(r"Available versions:\s*(.+)", proc.stdout)
        if proc.returncode == 0 and match:
            found = [v.strip() for v in match.group(1).split(",")]
            return sorted((v for v in found if re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", v) and rules.covers(v)),
                          key=version_key)
    raise DryRunError("could not list sglang's releases with `pip index versions sglang`",
                      hint="check that the package index is reachable, or leave out --released")
