"""What to change, read from the same source: the flag that turns a rule off, and the startup checks
that refuse a flag someone tries instead.

An early return guarding the site that fired (``if self.enforce_piecewise_cuda_graph:
... return`` at the top of ``_handle_piecewise_cuda_graph``) names the flag that skips
the rule: that is the fix for this version, whatever its line numbers. A ``raise`` whose
guard holds once a flag is set (``if self.language_only and len(self.encoder_urls) == 0:
raise ValueError(...)``) is a fix that fails at startup.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kit._pysource import Evaluator
from kit.errors import KitError
from kit.model_config import load_model_config
from kit.server_args import cli_defaults, flag_table

from .guards import explain_write
from .sites import Write, index_for

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
                path = site.file.split("/", 1)[1] if site.file.startswith("sglang/") else site.file
                found.setdefault(spec.name, Escape(spec.name, spec.field, f"{path}:{guard.line}", guard.text))
    return list(found.values())


def refusals(tree, snapshot, setting: dict, model_config=None, path: str = "srt/server_args.py") -> list[Refusal]:
    """The ``raise`` statements of ``path`` that a launch with ``setting`` (field -> value) would hit.

    Only checks that mention one of the set fields count; their guards are evaluated
    against the snapshot with the setting applied. Status ``unknown`` means the guard
    depends on something the source alone cannot tell (hardware, files).
    """
    index = index_for(tree)
    module = index.modules.get(path)
    if module is None:
        return []
    values = dict(getattr(snapshot, "fields", snapshot) or {})
    values.update(setting)
    ev = Evaluator(index.modules, values, load_model_config(model_config), defaults=cli_defaults(tree))
    parents = index.parents(module)
    names = set(setting)
    out = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        tests = _tests_above(node, parents)
        if not any(_mentions(t, names) for t in tests):
            continue
        (site,) = explain_write(module, Write(node, "raise", "", node.exc, node.lineno), parents, ev)
        if site.status in ("fired", "unknown"):
            condition = " and ".join(g.condition for g in site.guards if g.kind in ("if", "else"))
            out.append(Refusal(f"{path}:{node.lineno}", condition, _message(node), site.status))
    return out


def _tests_above(node: ast.AST, parents: dict) -> list[ast.expr]:
    tests = []
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, ast.If):
            tests.append(node.test)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
    return tests


def _mentions(test: ast.expr, names: set[str]) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in names for n in ast.walk(test))


def _message(node: ast.Raise) -> str:
    exc = node.exc
    if isinstance(exc, ast.Call) and exc.args:
        first = exc.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
        return ast.unparse(first)
    return ast.unparse(exc)
