"""Text as people paste it: Markdown and shell prompts taken off, line numbers kept.

``strip_markdown`` never joins or drops lines, so a line number in the result is the line
number in what was pasted. Inside code fences only the fence lines go; outside them inline
code marks, emphasis (``_x_``, ``*x*``, ``**x**``), block quotes (``> ``) and HTML tags
such as ``<details>`` are taken off the text around the values, and HTML comments (``<!-- -->``,
which an issue template leaves and GitHub does not show) are blanked. ``text_problem(data)`` says
when a file is no text at all (empty, binary, an image, an archive), before anything reads it.
"""

from __future__ import annotations

import re

__all__ = ["strip_markdown", "strip_prompt", "text_problem"]

_FENCE = re.compile(r"^\s{0,3}(?:>\s?)*(`{3,}|~{3,})\s*[\w+.-]*\s*$")
_QUOTE = re.compile(r"^\s{0,3}(?:>\s?)+")
_TAG = re.compile(r"</?(?:details|summary|pre|code|br|p|div|b|i|em|strong|kbd|sub|sup)\b[^>]*>", re.I)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
# Emphasis opens after a space or start and closes before a space, punctuation or end; the
# markers must hug the text, so `--model_path` or `a * b` are left alone.
_EMPHASIS = re.compile(r"(?<![\w\\])(\*\*|__|\*|_)(?=\S)(.+?)(?<=\S)\1(?![\w*])")
# `$ cmd`, `(venv) user@host:~/dir$ cmd`, `root@box:/# cmd`
_PROMPT = re.compile(r"^\s*(?:\([\w.@-]+\)\s*)?(?:[\w.-]+@[\w.-]+(?::[^\s$#]*)?\s*[$#]|\$)\s+")


def strip_markdown(text: str) -> str:
    """The text with Markdown removed line by line (the number of lines stays the same)."""
    out: list[str] = []
    fenced = comment = False
    for line in text.split("\n"):
        if comment or (not fenced and "<!--" in line):
            line, comment = _uncomment(line, comment)
        if _FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        line = _QUOTE.sub("", line)
        if not fenced:
            line = _TAG.sub("", line)
            line = _INLINE_CODE.sub(r"\1", line)
            line = _EMPHASIS.sub(r"\2", line)
        out.append(line)
    return "\n".join(out)


def _uncomment(line: str, inside: bool) -> tuple[str, bool]:
    """The line without its HTML comments, and whether a comment is still open at its end."""
    out, pos = [], 0
    while pos <= len(line):
        if inside:
            end = line.find("-->", pos)
            if end < 0:
                return "".join(out), True
            pos, inside = end + 3, False
        start = line.find("<!--", pos)
        if start < 0:
            out.append(line[pos:])
            break
        out.append(line[pos:start])
        pos, inside = start + 4, True
    return "".join(out), inside


def strip_prompt(line: str) -> str:
    """A shell line without the prompt pasted in front of it."""
    return _PROMPT.sub("", line, count=1)


def text_problem(data: bytes, size: int | None = None) -> str | None:
    """Why ``data`` is not text a person pasted (empty, an image, an archive, an executable, other
    binary), or None when it is text. ``size``: the whole file's, when ``data`` is its head."""
    size = len(data) if size is None else size
    if not data.strip():
        return "it is empty" if not data else "it holds only white space"
    magic = {b"\x7fELF": "an executable (ELF)", b"MZ": "a Windows executable", b"\x89PNG": "a PNG image",
             b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image", b"%PDF": "a PDF", b"PK\x03\x04": "a zip archive",
             b"\x1f\x8b": "gzip-compressed (zcat it first)", b"(\xb5/\xfd": "zstd-compressed (zstdcat it first)",
             b"BZh": "bzip2-compressed (bzcat it first)", b"\xfd7zXZ": "xz-compressed (xzcat it first)"}
    for head, what in magic.items():
        if data.startswith(head) and (head not in (b"MZ", b"BZh") or b"\0" in data[:4096]):
            return f"it is {what}, {size:,} bytes, not text"
    sample = data[:65536]
    if b"\0" in sample[:8192]:
        return f"it is binary ({size:,} bytes, with NUL bytes), not text"
    text = sample.decode("utf-8", "replace")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b"))
    if odd > 0.1 * len(text):
        return f"it is binary ({size:,} bytes, {odd / len(text):.0%} of them neither UTF-8 text nor white space), not text"
    return None
