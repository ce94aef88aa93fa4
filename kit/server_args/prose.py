"""Flags and scheduler numbers named in prose: "we run it with --dp 8 and --tp 8", "the log shows
#running-req: 15".

A post often has no launch command and no log line, only sentences that name a few flags or
numbers. ``prose_flags(text, flags)`` reads the flags this release's flag table knows (other tools'
flags in the same sentence are left alone, and a line that holds a command is the launch reader's), each with its value as the table's arity takes it and the
line it was written on; it is never a whole launch: the fields it does not name stay unknown.
``prose_decode(text)`` reads the ``Decode batch`` fields a sentence quotes (``#running-req: 15``,
``gen throughput (token/s): 75.15``) as one DecodeStat per line, so a rule sees the number and where it
was said. Lines that are log lines or commands are for the other readers and are skipped here.
"""

from __future__ import annotations

import re

from .decode_stats import _FIELDS, DecodeStat
from .flags import FlagTable
from .launch_sources import Word
from .launch_text import LaunchRead, _read_flags

__all__ = ["prose_decode", "prose_flags"]

_FLAG = re.compile(r"(?<![\w/.-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:=([^\s,;)]+)|[ \t]+([^\s,;:)]+))?")
_VALUE = re.compile(r"^(?:[\d.]+[kKmM]?|[\w./-]*[\d/_.][\w./-]*|[A-Za-z][A-Za-z0-9_-]*)$")
# A line that holds a command (even inline, in a sentence) is the launch reader's: its flags belong to that
# command, and a docker line whose flags follow the image with no launcher is no sglang launch at all.
_COMMAND_LINE = re.compile(r"sglang[. ]launch_server|sglang\s+serve|\b(?:docker|podman)\s+run\b|\bpython3?\s|"
                           r"\b(?:kubectl|nohup|torchrun|srun)\s|^\s*(?:\$|#)?\s*sglang\s")
_LOG_LINE = re.compile(r"^\s*\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|Decode batch|Prefill batch|server_args=")
_NUMBER = re.compile("(" + "|".join(re.escape(k) for k in sorted(_FIELDS, key=len, reverse=True)) +
                     r")\s*[:=]\s*`?(-?[\d.]+|True|False)`?", re.I)


def prose_flags(text: str, flags: FlagTable, *, where: str = "", skip: set[int] | None = None) -> LaunchRead | None:
    """The sglang flags named in the sentences of ``text`` (lines in ``skip``, 1-based, are other
    evidence), read with ``flags``; None when there are none."""
    words: list[Word] = []
    for no, line in enumerate(text.replace("`", " ").split("\n"), 1):
        if (skip and no in skip) or _COMMAND_LINE.search(line) or _LOG_LINE.search(line):
            continue
        origin = f"{where + ' ' if where else ''}line {no} (prose)"
        for m in _FLAG.finditer(line):
            option, inline, after = m.group(1), m.group(2), m.group(3)
            try:
                hit = flags.match(option if inline is None else f"{option}={inline}")
            except Exception:  # an ambiguous prefix in a sentence: not a flag named
                hit = None
            if hit is None:
                continue
            spec = hit[0]
            if inline is not None:
                inline = _sentence_end(inline)
            words.append(Word(option if inline is None else f"{option}={inline}", origin))
            after = _sentence_end(after) if after else after
            if inline is None and after and spec.arity[1] and _VALUE.match(after) and not after.startswith("-") \
                    and (not spec.choices or after in {str(c) for c in spec.choices}):  # "the --x help says"
                words.append(Word(after, origin))
    if not words:
        return None
    read = LaunchRead("prose", words[0].origin)
    _read_flags(words, flags, read)
    read.notes.append("flags named in sentences, not a launch command: the fields they do not name are unknown")
    return read if read.flags else None


def _sentence_end(value: str) -> str:
    """A value written at the end of a sentence, without the sentence's full stop ("--attention-backend fa3.")."""
    return value[:-1] if len(value) > 1 and value.endswith(".") else value


def prose_decode(text: str, *, skip: set[int] | None = None) -> list[DecodeStat]:
    """One DecodeStat per sentence that quotes ``Decode batch`` fields (``#running-req: 15``)."""
    out = []
    for no, line in enumerate(text.split("\n"), 1):
        if (skip and no in skip) or _LOG_LINE.search(line):
            continue
        found = _NUMBER.findall(line)
        if not found:
            continue
        stat = DecodeStat(line=no)
        for key, value in found:
            name, kind = _FIELDS[next(k for k in _FIELDS if k.lower() == key.lower())]
            try:
                setattr(stat, name, kind(value))
            except (TypeError, ValueError):
                continue
        out.append(stat)
    return out
