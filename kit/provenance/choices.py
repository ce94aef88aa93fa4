"""What a function of the source returns for a launch: sglang's own automatic choices.

``choice(tree, "auto_choose_speculative_params", snapshot, model_config)`` walks the
``return`` statements of the function (found by name, in any module under ``srt/``),
evaluates the guards on the way to each against the launch, and gives the one that
fires, with its value when it is a literal. That is how the doctor knows that sglang
0.5.11 would pick ``(3, 1, 4)`` speculative steps for Qwen3.6 when no flag says otherwise.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from kit._pysource import Evaluator
from kit._text import short_path
from kit.model_config import load_model_config

from .explain import _Defaults
from .guards import explain_write
from .result import AssignmentSite
from .sites import Write, index_for

__all__ = ["Choice", "choice"]


@dataclass
class Choice:
    """The ``return`` that fires: its site (with guards), and its value when that is a literal."""

    function: str
    site: AssignmentSite | None  # None when no return could be decided
    value: Any = None
    known: bool = False  # value is a literal that was read
    candidates: int = 0  # how many returns the function has

    @property
    def where(self) -> str:
        return short_path(self.site.where) if self.site is not None else ""


def choice(tree, function: str | tuple[str, ...], snapshot=None, model_config=None, *, under: str = "srt",
           parameters: dict | None = None) -> Choice | None:
    """The return of ``function`` that fires for ``snapshot`` (a dict or ServerArgsSnapshot).

    ``function`` may be several names (a function renamed between releases): the first one the
    tree defines is read. ``parameters`` gives values of other parameters (``model_arch``).
    None when the tree has no such function. A Choice with ``site`` None when every return's
    guards are undecided or none fires.
    """
    index = index_for(tree)
    modules = index.modules
    found = None
    for name in (function,) if isinstance(function, str) else function:
        name = name.split(".")[-1]
        for path in _files_defining(tree, name, under):
            module = modules.get(path)
            node = next((n for n in ast.walk(module.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name == name), None) if module is not None else None
            if node is not None:
                found = (name, module, node)
                break
        if found:
            break
    if found is None:
        return None
    function, module, node = found
    values = dict(getattr(snapshot, "fields", snapshot) or {})
    ev = Evaluator(modules, values, load_model_config(model_config), defaults=_Defaults(tree), parameters=parameters)
    parents = index.parents(module)
    returns = [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
    out = Choice(function, None, candidates=len(returns))
    for ret in sorted(returns, key=lambda r: r.lineno):
        (site,) = explain_write(module, Write(ret, "return", "", ret.value, ret.lineno), parents, ev)
        if site.status == "fired":
            out.site = site
            try:
                out.value, out.known = ast.literal_eval(ret.value), True
            except (ValueError, SyntaxError, TypeError):
                pass
            return out
        if site.status == "unknown":
            return out  # an earlier return may fire: no later one can be trusted
    return out


def _files_defining(tree, name: str, under: str) -> list[str]:
    grep = getattr(tree, "grep", None)
    if callable(grep):
        hits = grep(rf"^[[:space:]]*(async[[:space:]]+)?def {name}\(", max_matches=50)
        return list(dict.fromkeys(h.path for h in hits if not under or h.path.startswith(under)))
    return []
