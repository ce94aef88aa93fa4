"""Helpers every part of server_args shares."""

from __future__ import annotations

from typing import Protocol


class SourceLike(Protocol):
    """What these functions need from a source tree (`kit.source.SourceTree` has it)."""

    version: str | None

    def read_text(self, path: str) -> str: ...

    def files(self, pattern: str = "**/*.py") -> list[str]: ...


MISSING = object()


AST_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, KeyError)


def pandas():
    import pandas as pd  # pandas takes ~0.3 s to import; only tables need it

    return pd
