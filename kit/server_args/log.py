"""The `server_args=...` lines of a log: any prefix, both forms, cut lines, huge files."""

from __future__ import annotations

import ast
import codecs
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit._secrets import mask_fields
from kit._versions import triple
from kit.errors import ParseError

from .common import AST_ERRORS
from .markdown import text_problem
from .snapshot import ServerArgsSnapshot
from .values import parse_value, split_top

_MARK = re.compile(r"(?<![\w.])server_args=(?=ServerArgs\(|\{)")


_NAME_EQ = re.compile(r"\s*([A-Za-z_]\w*)\s*=(?!=)")


_KEY = re.compile(r"""\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*:""")


# `sglang==0.5.11`, `sglang version: 0.5.11`, `SGLang v0.5.11`, `sglang-0.5.11.dist-info`
_VERSION = re.compile(
    r"\bsglang(?:\s*==\s*|[\s_-]*(?:version\s*[:=]?\s*)?v?)(\d+\.\d+(?:\.\d+)?(?:\.?post\d+|rc\d+|\.dev\d+)?)",
    re.I,
)


# ISO (sglang, docker -t) and syslog (journald) times.
_TIMES = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?|\b[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d\b"


_TIMESTAMP = re.compile(_TIMES)


# What differs between two lines of one process: times, and the source line number in
# formats such as `INFO engine.py:311:` (0.5.23 logs raw and resolved args at 311 and 1185).
_VOLATILE = re.compile(_TIMES + r"|(?<=\.py):\d+")


# sglang 0.5.19 replaced `logger.info(f"{server_args=}")` (a repr taken after
# __post_init__ had resolved every value) by `server_args={server_args.resolved_dict()}`,
# and from then on a ServerArgs object holds the raw input until `resolve_once()`.
_DICT_LOGS_SINCE = (0, 5, 19)


_MAX_LINE = 4 * 1024 * 1024


class _LogScan:
    """Collects snapshots and version lines while a log goes past, one line at a time."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.snaps: list[ServerArgsSnapshot] = []
        self.error: ParseError | None = None
        self.version: str | None = None
        self.unversioned: list[ServerArgsSnapshot] = []
        self.lines = 0
        self.cut_mark: tuple[int, str] | None = None  # a `server_args=` cut before its first field

    def feed(self, no: int, offset: int, line: str) -> None:
        self.lines = no
        if "glang" in line or "GLang" in line or "GLANG" in line:
            self._version_in(line)
        if "server_args=" in line:
            self._snapshots_in(no, offset, line)

    def _version_in(self, line: str) -> None:
        m = _VERSION.search(line)
        if m:
            self.version = m.group(1)
            for snap in self.unversioned:
                snap.version = self.version
            self.unversioned.clear()

    def _snapshots_in(self, no: int, offset: int, line: str) -> None:
        pos = 0
        at = line.find("server_args=")
        if self.cut_mark is None and not _MARK.search(line) and re.fullmatch(r"server_args=[\w({]{0,11}", line[at:].strip()):
            self.cut_mark = (no, line[at:].strip())
        while (m := _MARK.search(line, pos)) is not None:
            try:
                snap, end = _read_payload(line, m, pos, offset)
            except ParseError as err:
                self.error = self.error or err
                pos = max(err.position - offset, m.end()) if err.position is not None else m.end()
                continue
            snap.version, snap.line = self.version, no
            snap.source = f"{self.origin}:{no}" if self.origin else f"line {no}"
            if snap.version is None:
                self.unversioned.append(snap)
            self.snaps.append(snap)
            pos = end

    def finish(self, total: int) -> list[ServerArgsSnapshot]:
        if not self.snaps:
            if self.error is not None:
                raise self.error
            if self.cut_mark is not None:
                no, text = self.cut_mark
                raise ParseError(
                    f"the server_args line at line {no} of {self.origin or 'the log'} is cut off before its first "
                    f"field ({text!r}): every field is unknown",
                    position=total,
                    hint="send the whole line (sglang logs it once at startup), or /server_info of the running server",
                )
            raise ParseError(
                f"no `server_args=ServerArgs(...)` or `server_args={{...}}` line in {self.origin or 'the log'} "
                f"({self.lines} lines read)",
                position=total,
                hint="SGLang logs it once at startup; read the log from the start of the server's run, "
                "or use /server_info on a running server",
            )
        _assign_stages(self.snaps)
        return self.snaps


def _read_payload(line: str, m: re.Match, begin: int, offset: int) -> tuple[ServerArgsSnapshot, int]:
    start = m.end()
    form = "dict" if line[start] == "{" else "ServerArgs"
    opening = start if form == "dict" else start + len("ServerArgs")
    split = split_top(line, opening + 1, "}" if form == "dict" else ")")
    fields, raw, bad = _read_items(line, split.items, form)
    fields, raw = mask_fields(fields), mask_fields(raw)  # the kit never needs a server's keys (kit/_secrets.py)
    truncated = not split.complete or bad is not None
    stop = bad if bad is not None else split.end
    while truncated and stop < len(line) and line[stop] == " ":
        stop += 1
    if truncated and not fields:
        why = "an item is not `name=value`" if bad is not None else split.reason
        raise ParseError(
            f"`server_args=` at line offset {m.start()} yields no complete field: {why}",
            position=offset + stop,
            hint="the line is cut off or garbled before its first field ends",
        )
    prefix = line[begin : m.start()]
    ts = _TIMESTAMP.search(prefix)
    snap = ServerArgsSnapshot(
        fields,
        raw,
        form=form,
        truncated=truncated,
        offset=offset + m.start(),
        stopped_at=offset + stop if truncated else None,
        process=_process_key(prefix),
        timestamp=ts.group() if ts else None,
    )
    return snap, max(stop, m.end())


def _process_key(prefix: str) -> str:
    """The prefix without what changes from line to line: `python[4242]: [ TP0]` -> `python[4242]: [TP0]`."""
    key = re.sub(r"\[\s*\]", "", _VOLATILE.sub("", prefix))
    return " ".join(re.sub(r"\[\s+", "[", key).split())


def _read_items(line: str, items: list[tuple[int, int]], form: str) -> tuple[dict, dict, int | None]:
    fields: dict[str, Any] = {}
    raw: dict[str, str] = {}
    head = _NAME_EQ if form == "ServerArgs" else _KEY
    for n, (a, b) in enumerate(items):
        m = head.match(line, a, b)
        text = line[m.end() : b].strip() if m else ""
        if not text:
            if n == len(items) - 1 and not line[a:b].strip():
                continue  # a trailing comma
            return fields, raw, a
        name = m.group(1) if form == "ServerArgs" else _dict_key(m.group(1))
        if name is None:
            return fields, raw, a
        value, literal = parse_value(text)
        fields[name] = value
        if not literal:
            raw[name] = text
    return fields, raw, None


def _dict_key(text: str) -> str | None:
    try:
        key = ast.literal_eval(text)
    except AST_ERRORS:
        return None
    return key if isinstance(key, str) else None


def _assign_stages(snaps: list[ServerArgsSnapshot]) -> None:
    # sglang <= 0.5.18 logs `f"{server_args=}"` in Engine.__init__ and Engine._launch_subprocesses
    # (0.5.11 sglang/srt/entrypoints/engine.py:188 and :679), both after __post_init__ resolved
    # every value. From 0.5.19 (0.5.23 engine.py:311 and :1185) it logs
    # `server_args={...resolved_dict()}`: Engine.__init__ before `resolve_once()` (the raw
    # input), then _launch_subprocesses after it. `sglang serve` reaches only the second.
    i = 0
    while i < len(snaps):
        snap, nxt = snaps[i], snaps[i + 1] if i + 1 < len(snaps) else None
        key = triple(snap.version)
        if snap.form == "ServerArgs":
            snap.stage = "raw" if key is not None and key >= _DICT_LOGS_SINCE else "resolved"
        elif key is not None and key < _DICT_LOGS_SINCE:
            snap.stage = "unknown"
        elif nxt is not None and nxt.form == "dict" and nxt.process == snap.process:
            snap.stage, nxt.stage = "raw", "resolved"
            i += 1
        else:
            snap.stage = "resolved"
        i += 1


def _pick(snaps: list[ServerArgsSnapshot]) -> ServerArgsSnapshot:
    resolved = [s for s in snaps if s.stage == "resolved"]
    return (resolved or snaps)[-1]


def _text_lines(text: str) -> Iterator[tuple[int, int, str]]:
    start, no, n = 0, 1, len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end
        line = text[start:end]
        yield no, start, line[:-1] if line.endswith("\r") else line
        start, no = end + 1, no + 1


def parse_log_all(text: str | bytes) -> list[ServerArgsSnapshot]:
    """Every `server_args=` snapshot in a log, in order, each with its stage and version.

    Raises ParseError (with the offset where parsing stopped) when there is none.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    scan = _LogScan("")
    for no, offset, line in _text_lines(text):
        scan.feed(no, offset, line)
    return scan.finish(len(text))


def parse_log(text: str | bytes) -> ServerArgsSnapshot:
    """The last resolved `server_args=` snapshot of a log (or the last one, if none is resolved)."""
    return _pick(parse_log_all(text))


def _file_lines(f, limit: int) -> Iterator[tuple[int, int, str]]:
    """Lines of a file object, at most `limit` characters each; the rest of a longer line is skipped."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    no, offset, continued = 1, 0, False
    while chunk := f.readline(limit):
        if isinstance(chunk, bytes):
            chunk = decode(chunk)
        ends = chunk.endswith("\n")
        if not continued:
            line = chunk[:-1] if ends else chunk
            yield no, offset, line[:-1] if line.endswith("\r") else line
        offset += len(chunk)
        no, continued = (no + 1, False) if ends else (no, True)


def parse_log_file_all(
    src: str | Path | io.IOBase, *, max_line_chars: int = _MAX_LINE
) -> list[ServerArgsSnapshot]:
    """`parse_log_all` for a path or an open file, reading one line at a time.

    Memory stays bounded by `max_line_chars`: a longer line is parsed up to that length
    (its snapshot is then `truncated`). Offsets count decoded characters.
    """
    if hasattr(src, "readline"):
        return _scan_file(src, getattr(src, "name", "") or "log", max_line_chars)
    with open(src, "rb") as f:
        head = f.read(65536)
        why = text_problem(head, os.fstat(f.fileno()).st_size) if head.strip() else None
        if why is not None:  # an empty log goes on to say it has no server_args line
            raise ParseError(f"{src} is no server log: {why}", position=0,
                             hint="give the server's log as text (its server_args line, Decode batch lines)")
        f.seek(0)
        return _scan_file(f, str(src), max_line_chars)


def _scan_file(f, name: str, limit: int) -> list[ServerArgsSnapshot]:
    scan, end = _LogScan(str(name)), 0
    for no, offset, line in _file_lines(f, limit):
        scan.feed(no, offset, line)
        end = offset + len(line)
    return scan.finish(end)


def parse_log_file(src: str | Path | io.IOBase, *, max_line_chars: int = _MAX_LINE) -> ServerArgsSnapshot:
    """`parse_log` for a path or an open file, streamed line by line."""
    return _pick(parse_log_file_all(src, max_line_chars=max_line_chars))


# --------------------------------------------------------------------------- what a cut-off line lacks


def missing_fields(snap: ServerArgsSnapshot, names) -> list[str]:
    """The fields of ``names`` (this version's ServerArgs fields, in order) that a cut-off line lacks.

    Their values are unknown: a line cut off after ``tp_size`` says nothing of what follows, and
    the version's defaults are no answer. An uncut line lacks nothing.
    """
    if not snap.truncated:
        return []
    return [name for name in names if name not in snap.fields]


# --------------------------------------------------------------------------- sglang's own words


@dataclass
class LogNotice:
    """A line in which sglang says something about its setup: a warning, or a change it made."""

    line: int  # 1-based, in the text given
    level: str | None  # WARNING, INFO, ... when the line's prefix says
    text: str  # the message, without the time/rank prefix
    kind: str  # "warning", "notice" (sglang changed a setting), "capacity", "retract", "error"
    source: str = ""  # the file it was read from, when known

    def to_dict(self) -> dict:
        return {"line": self.line, "level": self.level, "text": self.text, "kind": self.kind, "source": self.source}

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}"


# sglang's own words when it changes or caps a setting at startup, or runs out of room.
_NOTICE = re.compile(
    r"Automatically (?:turn off|set|reduce|disable|adjust|enable)|Disabl(?:e|ing) |is disabled because|Falling back|"
    r"Overlap scheduler is disabled|auto-disabl|is capped to|is (?:set|reduced|adjusted) to \d|was reduced from|"
    r"Using default MoE kernel config|Not enough memory|too small|exceeds? the|larger than|KV cache pool is full|"
    r"set to .* because|is not supported|will be (?:ignored|disabled)|deprecated", re.I)
_RETRACT = re.compile(r"\bretract", re.I)
_CAPACITY = re.compile(r"\bmax_total_num_tokens=\d+")
_LEVEL = re.compile(r"\b(WARNING|WARN|ERROR|INFO|DEBUG|CRITICAL)\b")
_PREFIX = re.compile(r"^(?:[^\[\]]{0,60}\[[^\]]{0,80}\]\s*)?(?:(?:WARNING|WARN|ERROR|INFO|DEBUG)\b\s*(?:\S+\.py:\d+:?\s*)?"
                     r"(?:\[[^\]]*\]\s*)?)?")


def log_notices(text: str, *, limit: int = 500) -> list[LogNotice]:
    """sglang's warnings and notices in a log, each with its line, so rules can read them."""
    out: list[LogNotice] = []
    for no, _, line in _text_lines(text):
        if "server_args=" in line or "Decode batch" in line or "Prefill batch" in line:
            continue
        level_m = _LEVEL.search(line[:120])
        level = level_m.group(1) if level_m else None
        if _CAPACITY.search(line):
            kind = "capacity"
        elif _RETRACT.search(line) and "#retracted-req: 0" not in line:
            kind = "retract"
        elif _NOTICE.search(line):
            kind = "notice"
        elif level in ("WARNING", "WARN") or "Warning:" in line or "UserWarning" in line:
            kind = "warning"
        elif level in ("ERROR", "CRITICAL") or line.startswith(("Traceback", "RuntimeError", "ValueError")):
            kind = "error"
        else:
            continue
        message = _PREFIX.sub("", line, count=1)
        out.append(LogNotice(no, level, message.strip() or line.strip(), kind))
        if len(out) >= limit:
            break
    return out


_MAMBA_POOL = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+)")


def log_capacity(text: str) -> dict[str, Any] | None:
    """The numbers of sglang's ready line (``max_total_num_tokens=..., max_running_requests=...,
    context_len=...``): what the memory pool and the scheduler ended up with, or None. With a hybrid
    model's ``Mamba Cache is allocated. max_mamba_cache_size: N`` line (mem_cache/memory_pool.py), its
    ``max_mamba_cache_size`` too."""
    found, mamba = None, None
    for _, _, line in _text_lines(text):
        if _CAPACITY.search(line):
            found = {k: _number(v) for k, v in re.findall(r"\b([a-z_]+)=([\d.]+(?:GB)?)", line)}
        m = _MAMBA_POOL.search(line)
        if m:
            mamba = int(m.group(1))
    if found is not None and mamba is not None:
        found["max_mamba_cache_size"] = mamba
    return found


def _number(text: str) -> Any:
    text = text.removesuffix("GB")
    try:
        return int(text)
    except ValueError:
        return float(text)
