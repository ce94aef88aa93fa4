"""Text for people and for JSON, one convention for the whole kit:

    wrap("affects: a long sentence ...", 60, "   ", "     ")  # filled, indented, never a word split
    clip("a   long\\nvalue", 11)                             # one line, at most 11 characters: "a long v..."
    plain({"tp": (1, 2), "x": object()})                     # JSON-able: {"tp": [1, 2], "x": "<object object at 0x...>"}
    short_path("sglang/srt/server_args.py:512")              # "srt/server_args.py:512", as the kit shows a site
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ELLIPSIS", "clip", "plain", "short_path", "wrap"]

ELLIPSIS = "..."


def wrap(text: str, width: int, first: str = "", rest: str = "") -> str:
    """``text`` filled to ``width`` columns, its first line indented by ``first`` and the others by ``rest``.
    Lines break at spaces only: never inside a word, nor at a hyphen (``--tp-size``), and a word longer
    than the line (a path) stays whole on a line of its own. Empty text gives ``first``."""
    return "\n".join(textwrap.wrap(str(text), width, initial_indent=first, subsequent_indent=rest,
                                   break_long_words=False, break_on_hyphens=False)) or first


def clip(text: Any, width: int) -> str:
    """``text`` (any value, as ``str``) on one line, each run of whitespace one space, and at most
    ``width`` characters: when cut, its last three are ``...``."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    return text[: width - len(ELLIPSIS)] + ELLIPSIS if width > len(ELLIPSIS) else text[:width]


def plain(value: Any, other: Callable[[Any], Any] = repr) -> Any:
    """``value`` as JSON-able data: None, bools, numbers and strings as they are, lists and tuples as
    lists, sets as lists in a stable order, mappings as dicts with string keys, each item the same way;
    anything else becomes ``other(value)`` (its ``repr`` unless the caller has its own text for it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v, other) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v, other) for v in value), key=repr)
    if isinstance(value, Mapping):
        return {str(k): plain(v, other) for k, v in value.items()}
    return other(value)


def short_path(path: str) -> str:
    """A file (or ``file:line``) of sglang's tree as the kit shows it: relative to the package,
    ``srt/server_args.py:512`` for ``sglang/srt/server_args.py:512``; any other path as it is."""
    return path.removeprefix("sglang/")
