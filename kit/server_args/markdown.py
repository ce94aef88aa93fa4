"""Text as people paste it: Markdown and shell prompts taken off, line numbers kept.

``strip_markdown`` never joins or drops lines, so a line number in the result is the line
number in what was pasted. Inside code fences only the fence lines go; outside them inline
code marks, emphasis (``_x_``, ``*x*``, ``**x**``), block quotes (``> ``) and HTML tags
such as ``<details>`` are taken off the text around the values.
"""

from __future__ import annotations

import re

__all__ = ["strip_markdown", "strip_prompt"]

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
    fenced = False
    for line in text.split("\n"):
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


def strip_prompt(line: str) -> str:
    """A shell line without the prompt pasted in front of it."""
    return _PROMPT.sub("", line, count=1)
