"""Reading option values out of an argv list, the way argparse keeps them (the last one wins)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["option_value", "option_values"]


def option_value(tokens: Sequence[str], names: str | Sequence[str]) -> str | None:
    """The last value given to any of ``names`` (``--port 1`` or ``--port=1``), or None."""
    return option_values(tokens, names)[0]


def option_values(tokens: Sequence[str], names: str | Sequence[str]) -> tuple[str | None, int | None, int]:
    """(value, index, width) of the last ``--name VALUE`` or ``--name=VALUE`` among tokens.

    ``width`` is how many tokens it takes (1 for ``--name=VALUE``, 2 otherwise), so a
    caller can cut the option out; an option that ends the argv without a value is ignored.
    """
    wanted = (names,) if isinstance(names, str) else tuple(names)
    found: tuple[str | None, int | None, int] = (None, None, 0)
    for i, tok in enumerate(tokens):
        name, eq, value = tok.partition("=")
        if name in wanted:
            if eq:
                found = (value, i, 1)
            elif i + 1 < len(tokens):
                found = (tokens[i + 1], i, 2)
    return found
