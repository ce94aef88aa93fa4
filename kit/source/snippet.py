"""Numbered lines of one source file, with marks: what every read returns."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from kit.errors import (
    LineRangeError,
)

__all__ = ['SourceSnippet', 'chomp', 'split_lines']


def split_lines(text: str) -> list[str]:
    # Split on "\n" only, as sed and ast do; str.splitlines() also splits on \x0c etc.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [chomp(line) for line in lines]


def chomp(line: str) -> str:
    # One trailing "\r" (a CRLF file) is line ending, not content; hosts may or may not strip it.
    return line[:-1] if line.endswith("\r") else line


# --------------------------------------------------------------------------- snippets


@dataclass
class SourceSnippet:
    """Lines `start..end` (1-based, inclusive) of one file in a package, with optional marks."""

    path: str
    start: int
    end: int
    lines: list[str]
    total_lines: int
    host: str = "local"
    version: str | None = None
    qualname: str | None = None
    marks: dict[int, str] = field(default_factory=dict)
    package: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> dict:
        return {"path": self.path, "start": self.start, "end": self.end, "total_lines": self.total_lines,
                "qualname": self.qualname, "version": self.version, "host": self.host, "lines": self.lines,
                "marks": {str(k): v for k, v in self.marks.items()}}

    def line(self, lineno: int) -> str:
        self._check_lineno(lineno)
        return self.lines[lineno - self.start]

    def mark(self, lineno: int, label: str = "") -> SourceSnippet:
        """Flag a line (e.g. "rule 8: multimodal"); returns self so calls chain."""
        self._check_lineno(lineno)
        self.marks[lineno] = label
        return self

    def mark_spans(self) -> list[tuple[str, str]]:
        """Marks as ("1228-1230", label), consecutive lines with one label joined."""
        spans: list[list] = []
        for n, label in sorted(self.marks.items()):
            if spans and spans[-1][1] == n - 1 and spans[-1][2] == label:
                spans[-1][1] = n
            else:
                spans.append([n, n, label])
        return [(f"{a}-{b}" if a != b else f"{a}", label) for a, b, label in spans]

    def find(self, pattern: str, flags: int = 0) -> list[int]:
        """Line numbers whose text matches the regex, so marks never hard-code a line."""
        rx = re.compile(pattern, flags)
        return [n for n, text in enumerate(self.lines, self.start) if rx.search(text)]

    def _check_lineno(self, lineno: int) -> None:
        if not isinstance(lineno, int) or not self.start <= lineno <= self.end:
            raise LineRangeError(
                f"line {lineno!r} is not in {self.path}:{self.start}-{self.end}",
                hint="use snippet.find(regex) to get line numbers inside the snippet",
            )

    def _where(self) -> str:
        who = " ".join(x for x in (self.package, self.version) if x)
        return f"{self.path}:{self.start}-{self.end}" + (f" {who}" if who else "") + f" @ {self.host}"

    def __repr__(self) -> str:
        name = f"{self.qualname} " if self.qualname else ""
        return f"<SourceSnippet {name}{self._where()}>"

    def __str__(self) -> str:
        width = len(str(max(self.end, 1)))
        out = []
        for n, text in enumerate(self.lines, self.start):
            label = self.marks.get(n)
            flag = ">" if label is not None else " "
            tail = f"    <-- {label}" if label else ""
            out.append(f"{flag} {n:>{width}} | {text}{tail}")
        return "\n".join(out)

    def __rich__(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.syntax import Syntax
        from rich.text import Text

        lexer = Syntax.guess_lexer(self.path, self.text)
        syntax = Syntax(
            self.text, lexer, line_numbers=True, start_line=self.start, highlight_lines=set(self.marks)
        )
        body = syntax
        if self.marks:
            notes = Text("\n".join(f"> {span}: {label}" for span, label in self.mark_spans()))
            body = Group(syntax, notes)
        return Panel(body, title=Text(repr(self)[1:-1]), title_align="left")

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import TextLexer, get_lexer_for_filename
        from pygments.util import ClassNotFound

        try:
            lexer = get_lexer_for_filename(self.path, stripnl=False, ensurenl=True)
        except ClassNotFound:
            lexer = TextLexer(stripnl=False, ensurenl=True)
        # Inline styles (noclasses) so the colours survive notebook export and redaction.
        fmt = HtmlFormatter(
            linenos="inline",
            linenostart=self.start,
            hl_lines=[n - self.start + 1 for n in self.marks],
            noclasses=True,
        )
        code = highlight(self.text + "\n", lexer, fmt)
        notes = "".join(
            f"<li><code>{span}</code>: {html.escape(label)}</li>" for span, label in self.mark_spans()
        )
        head = f"<div style='font-family:monospace'><b>{html.escape(repr(self)[1:-1])}</b></div>"
        return head + code + (f"<ul>{notes}</ul>" if notes else "")
