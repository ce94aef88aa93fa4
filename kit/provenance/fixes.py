"""What to change, read from the same source: the flag that turns a rule off, and the startup checks
that refuse a flag someone tries instead.

An early return guarding the site that fired (``if self.enforce_piecewise_cuda_graph:
... return`` at the top of ``_handle_piecewise_cuda_graph``) names the flag that skips
the rule: that is the fix for this version, whatever its line numbers. A ``raise`` whose
guard holds once a flag is set (``if self.language_only and len(self.encoder_urls) == 0:
raise ValueError(...)``) is a fix that fails at startup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit._text import short_path
from kit.errors import KitError
from kit.server_args import flag_table

__all__ = ["Escape", "Refusal", "escapes", "refusals"]

_SELF_FIELD = re.compile(r"^(?:self|server_args|args|cfg)\.([A-Za-z_][A-Za-z0-9_]*)$")


@dataclass(frozen=True)
class Escape:
    """A flag that skips the rule that fired: setting ``option`` makes the early return at ``line`` happen."""

    option: str
    field: str
    where: str
    condition: str

    def __str__(self) -> str:
        return f"{self.option} (the early return `if {self.condition}` at {self.where})"


@dataclass(frozen=True)
class Refusal:
    """A startup check that refuses the launch: ``raise`` at ``where`` when ``condition`` holds."""

    where: str
    condition: str
    message: str
    status: str  # fired (it would refuse), unknown

    def __str__(self) -> str:
        return f"{self.where}: `{self.condition}` -> {self.message}"


def escapes(tree, explanation, *, sites=None) -> list[Escape]:
    """Flags that skip the fired sites of ``explanation`` (or these ``sites``: a chain's rules whether
    they fired or not): early returns on a boolean field with a flag."""
    try:
        flags = flag_table(tree)
    except KitError:
        return []
    found: dict[str, Escape] = {}
    for site in explanation.fired if sites is None else sites:
        for guard in site.guards:
            match = _SELF_FIELD.match(guard.text)
            if guard.kind != "early return" or not guard.negated or match is None:
                continue
            spec = next((s for s in flags if s.field == match.group(1) and s.kind == "store_true"), None)
            if spec is not None:
                path = short_path(site.file)
                found.setdefault(spec.name, Escape(spec.name, spec.field, f"{path}:{guard.line}", guard.text))
    return list(found.values())


def refusals(tree, snapshot, setting: dict, model_config=None, path: str | None = None) -> list[Refusal]:
    """The startup checks (kit.provenance.startup: every ``raise`` and ``assert`` of ServerArgs'
    resolution, ``check_server_args`` and the ``arg_groups`` hooks that run) that mention a field of
    ``setting`` (field -> value) and that a launch with it would hit (status ``fired``) or that cannot be
    decided (``unknown``); their guards are evaluated against the snapshot with the setting applied.
    ``path`` keeps only the checks of that file."""
    from .startup import evaluate

    values = dict(getattr(snapshot, "fields", snapshot) or {})
    values.update(setting)
    report = evaluate(tree, values, model_config)
    words = [re.compile(rf"\b{re.escape(name)}\b") for name in setting]
    out = []
    for check in report.checks:
        if check.status == "passes" or (path is not None and not check.where.startswith(path + ":")):
            continue
        if not any(w.search(check.condition) for w in words):
            continue
        status = "fired" if check.status == "refuses" else "unknown"
        out.append(Refusal(check.where, check.condition, check.message, status))
    return out
