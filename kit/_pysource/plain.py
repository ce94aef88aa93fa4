"""What the evaluator may compute from plain values alone: a function of the tree called with plain arguments
(followed), and a few standard-library calls whose result follows from their arguments (computed here)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from .values import Unknown, unknown

__all__ = ["PURE_CALLS", "from_plain", "plain_value", "pure_call"]

# Standard-library calls whose result follows from their (plain) arguments alone: a regex on a model path,
# a path's last part. A match is its matched text (truthy as the match is), so `if re.match(...)` is decided.
PURE_CALLS: dict[str, Callable] = {
    "re.match": re.match, "re.search": re.search, "re.fullmatch": re.fullmatch, "re.sub": re.sub,
    "os.path.basename": lambda p: str(p).rstrip("/").rsplit("/", 1)[-1] if p else "",
    "os.path.splitext": lambda p: tuple(posixpath.splitext(p)),
}

NOT_PURE = object()  # pure_call(): not one of PURE_CALLS, or its arguments are not all plain


def pure_call(dotted: str, args: list | None, kwargs: dict | None, label: str):
    """The result of ``dotted(*args, **kwargs)`` when it is one of :data:`PURE_CALLS` and every argument is a
    string, number or None; an Unknown when it raises; :data:`NOT_PURE` otherwise."""
    pure = PURE_CALLS.get(dotted)
    if pure is None or args is None or not all(isinstance(v, str | int | bool) or v is None
                                               for v in [*args, *(kwargs or {}).values()]):
        return NOT_PURE
    try:
        found = pure(*args, **(kwargs or {}))
    except Exception:  # noqa: BLE001 - an error the server would raise too: not decided here
        return unknown(label, f"{dotted}() raised on these values")
    return found.group(0) if isinstance(found, re.Match) else found


def from_plain(values: list) -> bool:
    """Whether a call's arguments are plain values (and unknowns, which stay unknown wherever the function
    uses them), so that what it returns follows from them: ``_resolve_speculative_algorithm_alias(None, None)``."""
    return any(plain_value(v) for v in values) and all(plain_value(v) or isinstance(v, Unknown) for v in values)


def plain_value(value, depth: int = 0) -> bool:
    """None, a bool, number or string, or a list/tuple/dict of them (a value the evidence states fully)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if depth < 2 and isinstance(value, list | tuple):
        return all(plain_value(v, depth + 1) for v in value)
    if depth < 2 and type(value) is dict:
        return all(isinstance(k, str) and plain_value(v, depth + 1) for k, v in value.items())
    return False
