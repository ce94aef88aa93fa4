"""Finding code: grep results, definitions by qualified name, glob patterns."""

from __future__ import annotations

import ast
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass

from kit._text import clip
from kit.errors import (
    ParseError,
)

from .snippet import chomp

__all__ = ['Definition', 'GrepMatch', 'GrepResult', 'definitions', 'glob_regex', 'parse_grep']


# --------------------------------------------------------------------------- grep


@dataclass(frozen=True)
class GrepMatch:
    path: str  # relative to the package root
    line: int
    text: str

    def __repr__(self) -> str:
        return f"<GrepMatch {self.path}:{self.line} {clip(self.text.strip(), 60)!r}>"


@dataclass
class GrepResult:
    """Matches of one grep over a package; iterable like a list of GrepMatch."""

    pattern: str
    matches: list[GrepMatch]
    host: str
    root: str
    truncated: bool = False
    errors: str = ""  # grep's stderr when it exited 2 but still found matches

    def __len__(self) -> int:
        return len(self.matches)

    def __iter__(self) -> Iterator[GrepMatch]:
        return iter(self.matches)

    def __getitem__(self, i):
        return self.matches[i]

    def __bool__(self) -> bool:
        return bool(self.matches)

    @property
    def files(self) -> list[str]:
        return sorted({m.path for m in self.matches})

    def in_file(self, path: str) -> list[GrepMatch]:
        return [m for m in self.matches if m.path == path]

    def __repr__(self) -> str:
        more = " (truncated)" if self.truncated else ""
        return (
            f"<GrepResult {self.pattern!r}: {len(self.matches)} matches in {len(self.files)} files"
            f"{more} @ {self.host}>"
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{html.escape(m.path)}:{m.line}</code></td>"
            f"<td><code>{html.escape(clip(m.text, 200))}</code></td></tr>"
            for m in self.matches
        )
        head = html.escape(repr(self)[1:-1])
        return f"<div><b>{head}</b><table>{rows}</table></div>"


def parse_grep(data: bytes, root: str, host: str) -> list[GrepMatch]:
    """Parse `grep -rnZ` output: `path NUL lineno ':' text '\\n'`.

    Reading record by record (NUL, then ':', then newline) stays correct for file
    names containing ':' or even newlines, which a split on lines would not.
    """
    prefix = root.rstrip("/") + "/"
    out, pos = [], 0
    while pos < len(data):
        nul = data.find(b"\0", pos)
        colon = data.find(b":", nul + 1) if nul >= 0 else -1
        if colon < 0:
            raise ParseError(f"unexpected grep output on {host}: {data[pos : pos + 80]!r}", position=pos)
        eol = data.find(b"\n", colon + 1)
        eol = len(data) if eol < 0 else eol
        path = data[pos:nul].decode("utf-8", "replace")
        lineno = data[nul + 1 : colon]
        if not lineno.isdigit():
            raise ParseError(f"grep output on {host} has no line number at {path!r}", position=nul)
        rel = path[len(prefix) :] if path.startswith(prefix) else path
        text = chomp(data[colon + 1 : eol].decode("utf-8", "replace"))
        out.append(GrepMatch(rel, int(lineno), text))
        pos = eol + 1
    return out


# --------------------------------------------------------------------------- functions by name


@dataclass(frozen=True)
class Definition:
    qualname: str
    start: int  # first decorator line, else the def/class line
    end: int


def definitions(text: str) -> list[Definition] | None:
    """Every def/class with its dotted name (nested functions joined with '.'); None if unparsable."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    out: list[Definition] = []
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, kinds):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append(Definition(prefix + child.name, start, child.end_lineno or child.lineno))
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def glob_regex(pattern: str) -> re.Pattern:
    """Translate a path glob (`**` spans directories, `*` does not) to a regex."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            close = pattern.index("]", i + 2)
            body = pattern[i + 1 : close].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)
