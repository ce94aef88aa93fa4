"""The arguments an SGLang server actually runs with, and where each value came from.

Three witnesses, read without importing or running any SGLang code:

- the startup log line, `server_args=ServerArgs(...)` (sglang <= 0.5.18) or
  `server_args={...}` (0.5.19 and later);
- `/server_info`, whose per-rank `internal_states` hold values the scheduler changed
  after it loaded the model;
- the launch command, read against the flag table of the SGLang source that serves it.

`defaults` and `flag_table` read that source with `ast`. Log values are parsed with a
small tokenizer and `ast.literal_eval`/`ast.parse`; nothing is ever passed to `eval`.
`classify` puts the three together: a value that differs from its default although no
flag asked for it is `auto-changed`, which is how the incident's
`disable_piecewise_cuda_graph=True` shows up.
"""

from __future__ import annotations

import ast
import codecs
import html
import io
import json
import math
import operator
import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

from kit.errors import KitError, ParseError, RemoteFileError, SourceFileNotFound, SymbolNotFound

__all__ = [
    "FieldDefault",
    "FieldDefaults",
    "FlagSpec",
    "FlagTable",
    "NonLiteral",
    "ServerArgsSnapshot",
    "classify",
    "defaults",
    "diff",
    "flag_table",
    "format_server_args",
    "from_server_info",
    "parse_command",
    "parse_log",
    "parse_log_all",
    "parse_log_file",
    "parse_log_file_all",
]


class SourceLike(Protocol):
    """What these functions need from a source tree (`kit.source.SourceTree` has it)."""

    version: str | None

    def read_text(self, path: str) -> str: ...

    def files(self, pattern: str = "**/*.py") -> list[str]: ...


_MISSING = object()
_AST_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, KeyError)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _pandas():
    import pandas as pd  # pandas takes ~0.3 s to import; only tables need it

    return pd


# ---------------------------------------------------------------------------
# Values that are not Python literals


@dataclass(frozen=True, eq=False)
class NonLiteral:
    """A logged value that is not a Python literal.

    Calls such as `LoRARef(lora_id='x')` or `CudaGraphConfig(decode=PhaseConfig(...))` keep
    their callee in `call` and their arguments, parsed the same way, in `args`/`kwargs`.
    Opaque reprs such as `<function f at 0x7f..>` or `<Backend.DISABLED: 'disabled'>`
    keep only their text. Two values are equal when their text is.
    """

    text: str
    call: str | None = None
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NonLiteral) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def get(self, key: str, default: Any = None) -> Any:
        return self.kwargs.get(key, default)

    def __repr__(self) -> str:
        return f"NonLiteral({_short(self.text)})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(self.text)}</code>"


# A string, a bare quote (a string the line cut off), a bracket, a separator, or a run
# of anything else. Raw and byte prefixes do not change where a string ends, so the
# letters before a quote are left in the "other" run.
_TOKEN = re.compile(
    r"""(?P<s>'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
    r"""|(?P<q>['"])|(?P<o>[(\[{<])|(?P<c>[)\]}>])|(?P<p>[,:=])|[^'"()\[\]{}<>,:=]+""",
    re.S,
)
_CLOSER = {"(": ")", "[": "]", "{": "}", "<": ">"}
# `<` opens a repr such as `<function f at 0x..>` only where a value starts.
_VALUE_START = frozenset("=,:([{")


@dataclass
class _Split:
    items: list[tuple[int, int]]
    end: int
    complete: bool
    reason: str = ""


def _split_top(text: str, start: int, closer: str) -> _Split:
    """Spans of the top-level, comma-separated items from `start` up to `closer`."""
    stack, items, item, prev = [closer], [], start, "("
    for m in _TOKEN.finditer(text, start):
        kind, tok = m.lastgroup, m.group()
        if kind == "q":
            return _Split(items, item, False, "a string is cut off")
        if kind == "o" and (tok != "<" or prev in _VALUE_START or stack[-1] == ">"):
            stack.append(_CLOSER[tok])
        elif kind == "c" and (tok != ">" or stack[-1] == ">"):
            if tok != stack[-1]:
                return _Split(items, item, False, f"unbalanced {tok!r}")
            stack.pop()
            if not stack:
                items.append((item, m.start()))
                return _Split(items, m.end(), True)
        elif tok == "," and len(stack) == 1:
            items.append((item, m.start()))
            item = m.end()
        stripped = tok.rstrip()
        if stripped:
            prev = stripped[-1]
    return _Split(items, item, False, "the line ends before the closing bracket")


_PLACEHOLDER = re.compile(r"_kitNL(\d+)_")


def _mask_angles(text: str) -> tuple[str, list[str]]:
    """Replace each `<...>` repr by a name so that the rest parses as Python."""
    pieces, groups, depth, begin, last, prev = [], [], 0, 0, 0, "("
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok == "<" and (depth or prev in _VALUE_START):
            if depth == 0:
                begin = m.start()
            depth += 1
        elif tok == ">" and depth:
            depth -= 1
            if depth == 0:
                pieces += [text[last:begin], f"_kitNL{len(groups)}_"]
                groups.append(text[begin : m.end()])
                last = m.end()
        stripped = tok.rstrip()
        if stripped:
            prev = stripped[-1]
    pieces.append(text[last:])
    return "".join(pieces), groups


def _unmask(text: str, groups: list[str]) -> str:
    if not groups:
        return text
    return _PLACEHOLDER.sub(
        lambda m: groups[int(m.group(1))] if int(m.group(1)) < len(groups) else m.group(), text
    )


def _parse_value(text: str) -> tuple[Any, bool]:
    """(value, is_literal). Calls become structured NonLiterals; anything else keeps its text."""
    try:
        return ast.literal_eval(text), True
    except _AST_ERRORS:
        pass
    try:
        masked, groups = _mask_angles(text)
        node = ast.parse(masked.strip(), mode="eval").body
        return _from_node(node, _Segments(masked.strip()), groups, top=text), False
    except _AST_ERRORS:
        return NonLiteral(text), False


class _Segments:
    """Source text of nodes of a one-expression parse (col offsets are UTF-8 bytes)."""

    def __init__(self, src: str) -> None:
        self.lines = src.split("\n")

    def __call__(self, node: ast.AST) -> str:
        if node.lineno == node.end_lineno:
            return self.lines[node.lineno - 1].encode()[node.col_offset : node.end_col_offset].decode()
        first = self.lines[node.lineno - 1].encode()[node.col_offset :].decode()
        middle = self.lines[node.lineno : node.end_lineno - 1]
        last = self.lines[node.end_lineno - 1].encode()[: node.end_col_offset].decode()
        return "\n".join([first, *middle, last])


def _from_node(node: ast.AST, seg: _Segments, groups: list[str], top: str | None = None) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _from_node(node.operand, seg, groups)
        if isinstance(inner, (int, float, complex)) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_from_node(e, seg, groups) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _from_node(k, seg, groups): _from_node(v, seg, groups)
            for k, v in zip(node.keys, node.values, strict=False)
        }
    text = top if top is not None else _unmask(seg(node), groups)
    if isinstance(node, ast.Name):
        match = _PLACEHOLDER.fullmatch(node.id)
        if match and int(match.group(1)) < len(groups):
            return NonLiteral(groups[int(match.group(1))])
        if node.id in ("inf", "nan"):  # repr(float("inf")) is a bare name
            return float(node.id)
    if isinstance(node, ast.Call):
        return _call_value(node, seg, groups, text)
    return NonLiteral(text)


def _call_value(node: ast.Call, seg: _Segments, groups: list[str], text: str) -> Any:
    name = _dotted(node.func)
    if (
        name is None
        or any(isinstance(a, ast.Starred) for a in node.args)
        or any(k.arg is None for k in node.keywords)
    ):
        return NonLiteral(text)
    args = tuple(_from_node(a, seg, groups) for a in node.args)
    kwargs = {k.arg: _from_node(k.value, seg, groups) for k in node.keywords}
    if name in ("set", "frozenset") and len(args) <= 1 and not kwargs:
        try:  # `set()` and `frozenset({...})` are how empty and frozen sets print
            return (set if name == "set" else frozenset)(*args)
        except TypeError:
            pass
    return NonLiteral(text, call=name, args=args, kwargs=kwargs)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _render(value: Any) -> str:
    """repr(), except that NonLiterals print as the text they were logged as."""
    if isinstance(value, NonLiteral):
        return value.text
    if isinstance(value, list):
        return "[" + ", ".join(map(_render, value)) + "]"
    if isinstance(value, tuple) and type(value) is tuple:
        inner = ", ".join(map(_render, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict) and type(value) is dict:
        return "{" + ", ".join(f"{_render(k)}: {_render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, set) and type(value) is set and value:
        return "{" + ", ".join(map(_render, value)) + "}"
    return repr(value)


def format_server_args(values: Mapping[str, Any], form: str = "ServerArgs") -> str:
    """The text SGLang logs for these values: the dataclass repr, or (0.5.19+) the dict."""
    if form == "ServerArgs":
        return "ServerArgs(" + ", ".join(f"{k}={_render(v)}" for k, v in values.items()) + ")"
    if form == "dict":
        return _render(dict(values))
    raise ValueError(f"form must be 'ServerArgs' or 'dict', not {form!r}")


# ---------------------------------------------------------------------------
# Snapshots


@dataclass(eq=False)
class ServerArgsSnapshot:
    """One set of server arguments, as a log line or /server_info reported it.

    `fields` keeps the logged order. `raw` holds the text of every value that is not a
    Python literal. `stage` says whether the values are SGLang's input ("raw") or what
    it resolved them to ("resolved"). `truncated` means the line was cut off: `fields`
    then holds everything before the cut, and `stopped_at` says where that was.
    """

    fields: dict[str, Any]
    raw: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    form: str = "ServerArgs"
    stage: str = "unknown"
    truncated: bool = False
    source: str = ""
    line: int | None = None
    offset: int | None = None
    stopped_at: int | None = None
    process: str = ""
    timestamp: str | None = None
    internal_differences: list[tuple[int, str, Any, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """A field, or a dotted path into a nested value: `get("cuda_graph_config.prefill.backend")`."""
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        head, _, rest = name.partition(".")
        value = self.fields[head]
        for part in rest.split(".") if rest else ():
            value = _child(value, part)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name, _MISSING) is not _MISSING

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def keys(self):
        return self.fields.keys()

    def items(self):
        return self.fields.items()

    def to_frame(self):
        """One row per field: flag, value, and whether the value is a Python literal."""
        pd = _pandas()
        rows = [(k, v, k not in self.raw) for k, v in self.fields.items()]
        return pd.DataFrame(rows, columns=["flag", "value", "literal"])

    def _summary(self) -> str:
        bits = [self.form, self.stage, f"sglang {self.version}" if self.version else "version unknown"]
        head = f"{len(self.fields)} fields"
        if self.raw:
            head += f", {len(self.raw)} not literal"
        if self.truncated:
            head += ", TRUNCATED"
        if self.internal_differences:
            head += f", {len(self.internal_differences)} changed after start"
        where = f" from {self.source}" if self.source else ""
        return f"{' '.join(bits)}: {head}{where}"

    def __repr__(self) -> str:
        return f"<ServerArgsSnapshot {self._summary()}>"

    def _repr_html_(self) -> str:
        table = self.to_frame().to_html(index=False, max_rows=400)
        return f"<div><b>ServerArgsSnapshot</b> {html.escape(self._summary())}{table}</div>"


def _child(value: Any, key: str) -> Any:
    if isinstance(value, NonLiteral):
        return value.kwargs[key]
    if isinstance(value, Mapping):
        return value[key]
    if isinstance(value, (list, tuple)) and key.lstrip("-").isdigit():
        try:
            return value[int(key)]
        except IndexError:
            raise KeyError(key) from None
    raise KeyError(key)


# ---------------------------------------------------------------------------
# Log lines

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


def _version_key(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    nums = re.findall(r"\d+", version)[:3]
    return tuple(int(n) for n in nums) if nums else None


class _LogScan:
    """Collects snapshots and version lines while a log goes past, one line at a time."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.snaps: list[ServerArgsSnapshot] = []
        self.error: ParseError | None = None
        self.version: str | None = None
        self.unversioned: list[ServerArgsSnapshot] = []
        self.lines = 0

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
    split = _split_top(line, opening + 1, "}" if form == "dict" else ")")
    fields, raw, bad = _read_items(line, split.items, form)
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
        value, literal = _parse_value(text)
        fields[name] = value
        if not literal:
            raw[name] = text
    return fields, raw, None


def _dict_key(text: str) -> str | None:
    try:
        key = ast.literal_eval(text)
    except _AST_ERRORS:
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
        key = _version_key(snap.version)
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


# ---------------------------------------------------------------------------
# /server_info


def from_server_info(data: Mapping[str, Any] | str | bytes) -> ServerArgsSnapshot:
    """The args of a `/server_info` (or deprecated `/get_server_info`) response.

    sglang 0.5.11 (entrypoints/http_server.py `server_info`) returns
    `{**asdict(server_args), **scheduler_info, "internal_states": [...], "version": ...}`,
    one internal state per data-parallel rank. Each state starts from
    `vars(get_global_server_args())` in the scheduler (managers/scheduler.py
    `get_internal_state`), so it shows what the scheduler changed after loading the
    model (e.g. model_runner sets chunked_prefill_size=-1 for some VLMs). Those values
    are taken as effective; every change is listed in `internal_differences`.
    """
    data = _json_object(data)
    states = data.get("internal_states") or []
    states = [s for s in (states if isinstance(states, list) else [states]) if isinstance(s, Mapping)]
    top = {k: v for k, v in data.items() if k not in ("internal_states", "version")}
    keys = _arg_keys(top, states)
    fields = {k: states[0][k] if states and k in states[0] else top[k] for k in keys}
    diffs = [
        (rank, k, top[k], state[k])
        for rank, state in enumerate(states)
        for k in keys
        if k in state and not _same(state[k], top[k])
    ]
    extras: dict[str, Any] = {k: v for k, v in top.items() if k not in fields}
    if states:
        extras["internal_states"] = [{k: v for k, v in s.items() if k not in top} for s in states]
    version = data.get("version")
    return ServerArgsSnapshot(
        fields,
        version=str(version) if version is not None else None,
        form="dict",
        stage="resolved",
        source="server_info",
        internal_differences=diffs,
        extras=extras,
    )


def _json_object(data: Any) -> Mapping[str, Any]:
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as err:
            raise ParseError(f"server_info is not JSON: {err.msg}", position=err.pos) from None
    if not isinstance(data, Mapping):
        raise ParseError(f"server_info must be a JSON object, got {type(data).__name__}", position=0)
    return data


def _arg_keys(top: dict[str, Any], states: list[Mapping[str, Any]]) -> list[str]:
    # The scheduler's state repeats every arg; the keys it lacks are scheduler info.
    if states:
        shared = [k for k in top if k in states[0]]
        if len(shared) * 2 >= len(top):
            return shared
    return list(top)


# ---------------------------------------------------------------------------
# Reading SGLang source with ast only


class _Unknown(Exception):
    """The value of an expression cannot be known without running code."""


_SAFE_CALLS = {
    "list": list,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "dict": dict,
    "sorted": sorted,
    "len": len,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "min": min,
    "max": max,
    "abs": abs,
}
_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
_MAX_ITEMS = 100_000


class _Module:
    """One parsed source file and the names bound at its top level."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.node = ast.parse(text)
        self.lines = text.split("\n")
        self.assigns: dict[str, ast.expr] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.imports: dict[str, tuple[str, int, str]] = {}
        for stmt in self.node.body:
            self._index(stmt)

    def _index(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            self.assigns[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            self.assigns[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.ClassDef):
            self.classes[stmt.name] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                self.imports[alias.asname or alias.name] = (stmt.module or "", stmt.level, alias.name)
        elif isinstance(stmt, (ast.If, ast.Try)):
            for inner in stmt.body:  # `if TYPE_CHECKING:` and `try: import` blocks
                self._index(inner)

    def segment(self, node: ast.AST | None) -> str | None:
        if node is None:
            return None
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return self.lines[first].encode()[node.col_offset : node.end_col_offset].decode()
        head = self.lines[first].encode()[node.col_offset :].decode()
        tail = self.lines[last].encode()[: node.end_col_offset].decode()
        return "\n".join([head, *self.lines[first + 1 : last], tail])


class _Source:
    """Modules of one package tree, parsed on first use."""

    def __init__(self, tree: SourceLike) -> None:
        self.tree = tree
        self.package = getattr(tree, "package", None) or "sglang"
        self._modules: dict[str, _Module | None] = {}

    def module(self, path: str) -> _Module:
        mod = self.find(path)
        if mod is None:
            raise SourceFileNotFound(
                f"{path} is not in the sglang {getattr(self.tree, 'version', None) or ''} source tree",
                hint="is this the package directory of sglang (…/site-packages/sglang)?",
            )
        return mod

    def find(self, path: str) -> _Module | None:
        if path not in self._modules:
            try:
                self._modules[path] = _Module(path, self.tree.read_text(path))
            except (KitError, OSError, SyntaxError, ValueError):
                self._modules[path] = None
        return self._modules[path]

    def imported(self, mod: _Module, name: str) -> tuple[_Module, str] | None:
        """The module that an imported name comes from, and its name there."""
        if name not in mod.imports:
            return None
        dotted, level, real = mod.imports[name]
        for path in self._paths(mod.path, dotted, level):
            found = self.find(path)
            if found is not None:
                return found, real
        return None

    def _paths(self, here: str, dotted: str, level: int) -> list[str]:
        if level:
            base = posixpath.dirname(here)
            for _ in range(level - 1):
                base = posixpath.dirname(base)
            rel = posixpath.join(base, *dotted.split(".")) if dotted else base
        else:
            head, _, rest = dotted.partition(".")
            if head != self.package or not rest:
                return []
            rel = rest.replace(".", "/")
        return [rel + ".py", posixpath.join(rel, "__init__.py")]

    def class_of(self, mod: _Module, dotted: str, depth: int = 0) -> tuple[_Module, ast.ClassDef] | None:
        name = dotted.rsplit(".", 1)[-1]
        if "." not in dotted and name in mod.classes:
            return mod, mod.classes[name]
        hit = self.imported(mod, dotted.split(".")[0]) if "." not in dotted else None
        if hit is not None and depth < 8:
            return self.class_of(hit[0], hit[1], depth + 1)
        return None


class _Evaluator:
    """Values of constant expressions in SGLang source, computed from the ast alone.

    It knows literals, arithmetic, subscripts, module constants (following imports
    inside the package), class attributes, and a few pure builtins such as `list()`.
    Anything else raises _Unknown.
    """

    def __init__(self, source: _Source) -> None:
        self.src = source
        self._memo: dict[tuple[str, str], Any] = {}
        self._active: set[tuple[str, str]] = set()

    def value(self, node: ast.AST, mod: _Module, cls: ast.ClassDef | None = None) -> Any:
        try:
            return ast.literal_eval(node)
        except _AST_ERRORS:
            pass
        handler = getattr(self, "_" + type(node).__name__, None)
        if handler is None:
            raise _Unknown(type(node).__name__)
        return _bounded(handler(node, mod, cls))

    def name(self, ident: str, mod: _Module, cls: ast.ClassDef | None = None) -> Any:
        if cls is not None and (expr := _class_attr(cls, ident)) is not None:
            return self.value(expr, mod, cls)
        key = (mod.path, ident)
        if key in self._memo:
            return _copy(self._memo[key])
        if key in self._active:
            raise _Unknown(ident)
        self._active.add(key)
        try:
            result = self._lookup(ident, mod)
        finally:
            self._active.discard(key)
        self._memo[key] = result
        return _copy(result)

    def _lookup(self, ident: str, mod: _Module) -> Any:
        if ident in mod.assigns:
            return self.value(mod.assigns[ident], mod)
        hit = self.src.imported(mod, ident)
        if hit is not None:
            return self.name(hit[1], hit[0])
        raise _Unknown(ident)

    def _Name(self, node: ast.Name, mod: _Module, cls) -> Any:
        return self.name(node.id, mod, cls)

    def _Attribute(self, node: ast.Attribute, mod: _Module, cls) -> Any:
        owner = _dotted(node.value)
        found = self.src.class_of(mod, owner) if owner else None
        if found is None:
            raise _Unknown(owner or "attribute")
        expr = _class_attr(found[1], node.attr)
        if expr is None:
            raise _Unknown(node.attr)
        return self.value(expr, found[0], found[1])

    def _UnaryOp(self, node: ast.UnaryOp, mod: _Module, cls) -> Any:
        return _apply_op(_UNARY[type(node.op)], self.value(node.operand, mod, cls))

    def _BinOp(self, node: ast.BinOp, mod: _Module, cls) -> Any:
        left, right = self.value(node.left, mod, cls), self.value(node.right, mod, cls)
        op = _BINOPS.get(type(node.op))
        if op is None or not _small_enough(node.op, left, right):
            raise _Unknown("operator")
        return _apply_op(op, left, right)

    def _Subscript(self, node: ast.Subscript, mod: _Module, cls) -> Any:
        base = self.value(node.value, mod, cls)
        index = node.slice
        if isinstance(index, ast.Slice):
            parts = [
                None if p is None else self.value(p, mod, cls) for p in (index.lower, index.upper, index.step)
            ]
            return _apply_op(operator.getitem, base, slice(*parts))
        return _apply_op(operator.getitem, base, self.value(index, mod, cls))

    def _Call(self, node: ast.Call, mod: _Module, cls) -> Any:
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        if fn not in _SAFE_CALLS or fn in mod.assigns or any(isinstance(a, ast.Starred) for a in node.args):
            raise _Unknown(fn or "call")
        args = [self.value(a, mod, cls) for a in node.args]
        kwargs = {k.arg: self.value(k.value, mod, cls) for k in node.keywords if k.arg}
        if len(kwargs) != len(node.keywords):
            raise _Unknown(fn)
        return _apply_op(_SAFE_CALLS[fn], *args, **kwargs)

    def _List(self, node: ast.List, mod: _Module, cls) -> list:
        return [self.value(e, mod, cls) for e in _no_starred(node.elts)]

    def _Tuple(self, node: ast.Tuple, mod: _Module, cls) -> tuple:
        return tuple(self.value(e, mod, cls) for e in _no_starred(node.elts))

    def _Set(self, node: ast.Set, mod: _Module, cls) -> set:
        return _apply_op(set, [self.value(e, mod, cls) for e in _no_starred(node.elts)])

    def _Dict(self, node: ast.Dict, mod: _Module, cls) -> dict:
        if None in node.keys:
            raise _Unknown("**")
        return _apply_op(
            dict,
            [
                (self.value(k, mod, cls), self.value(v, mod, cls))
                for k, v in zip(node.keys, node.values, strict=False)
            ],
        )

    def _Lambda(self, node: ast.Lambda, mod: _Module, cls) -> Any:
        if node.args.args or node.args.vararg or node.args.kwonlyargs or node.args.kwarg:
            raise _Unknown("lambda")
        return self.value(node.body, mod, cls)


def _no_starred(elts: list[ast.expr]) -> list[ast.expr]:
    if any(isinstance(e, ast.Starred) for e in elts):
        raise _Unknown("*")
    return elts


def _apply_op(fn, *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except (ArithmeticError, TypeError, ValueError, KeyError, IndexError, MemoryError) as err:
        raise _Unknown(str(err)) from None


def _small_enough(op: ast.operator, left: Any, right: Any) -> bool:
    """Refuse operations whose result could be huge (`10 ** 10 ** 9`, `"x" * 10 ** 12`)."""
    if isinstance(op, ast.Pow):
        return (
            isinstance(right, (int, float))
            and abs(right) <= 256
            and not (isinstance(left, int) and abs(left) > 2**64)
        )
    if isinstance(op, ast.LShift):
        return isinstance(right, int) and right <= 256
    if isinstance(op, ast.Mult):
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(times, int):
                return len(seq) * times <= _MAX_ITEMS
    return True


def _bounded(value: Any) -> Any:
    if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict)) and len(value) > _MAX_ITEMS:
        raise _Unknown("too large")
    if isinstance(value, int) and value.bit_length() > 4096:
        raise _Unknown("too large")
    return value


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, set):
        return set(value)
    return value


def _class_attr(cls: ast.ClassDef, ident: str) -> ast.expr | None:
    found = None
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == ident for t in stmt.targets
        ):
            found = stmt.value
        elif (
            isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == ident
        ):
            found = stmt.value if stmt.value is not None else found
    return found


# ---------------------------------------------------------------------------
# Field defaults


@dataclass(frozen=True)
class FieldDefault:
    """The default of one ServerArgs field, as the source declares it.

    kind: "literal" (a Python literal, or an empty `default_factory=list/dict/set/tuple`),
    "expression" (computed; `value` is set when the ast alone can compute it),
    "factory" (another `default_factory`; evaluated only when trivially constant) or
    "required". `known` says whether `value` is meaningful.
    """

    name: str
    kind: str
    value: Any = None
    text: str = ""
    known: bool = False
    annotation: str = ""
    source: str = ""

    def __repr__(self) -> str:
        shown = repr(self.value) if self.known else (self.text or "-")
        return f"<FieldDefault {self.name}: {self.kind} {_short(shown, 50)}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


_FIELD_CALLS = frozenset({"dataclasses.field", "field", "msgspec.field"})
_EMPTY_FACTORIES = {"list": list, "dict": dict, "set": set, "tuple": tuple}


class FieldDefaults(dict):
    """{field: FieldDefault} in field order, for one SGLang version."""

    version: str | None = None

    def to_frame(self):
        pd = _pandas()
        rows = [(d.name, d.kind, d.value if d.known else pd.NA, d.text, d.source) for d in self.values()]
        return pd.DataFrame(rows, columns=["flag", "kind", "value", "text", "source"])

    def _summary(self) -> str:
        kinds = [d.kind for d in self.values()]
        counts = ", ".join(f"{kinds.count(k)} {k}" for k in ("literal", "expression", "factory", "required"))
        return f"sglang {self.version or '?'}: {len(self)} fields ({counts})"

    def __repr__(self) -> str:
        return f"<FieldDefaults {self._summary()}>"

    def _repr_html_(self) -> str:
        table = self.to_frame().to_html(index=False, max_rows=600)
        return f"<div><b>FieldDefaults</b> {html.escape(self._summary())}{table}</div>"


def defaults(tree: SourceLike) -> FieldDefaults:
    """Every ServerArgs field of this SGLang source with its declared default, in field order.

    Reads `srt/server_args.py` (the dataclass, up to 0.5.18) or, where ServerArgs is
    assembled from namespaces (0.5.19+), the classes of `_INPUT_NAMESPACES` in
    `srt/arg_groups/fields/*.py`.
    """
    src = _Source(tree)
    ev = _Evaluator(src)
    out = FieldDefaults()
    out.version = getattr(tree, "version", None)
    for mod, node in _server_args_fields(src):
        fd = _field_default(ev, mod, node)
        out[fd.name] = fd
    return out


def _server_args_fields(src: _Source) -> list[tuple[_Module, ast.AnnAssign]]:
    mod = src.module("srt/server_args.py")
    cls = mod.classes.get("ServerArgs")
    if cls is None:
        raise SymbolNotFound(
            f"no class ServerArgs in srt/server_args.py of sglang {getattr(src.tree, 'version', '')}",
            hint="this layout is not known to the kit; look for `class ServerArgs` with tree.grep",
        )
    own = _class_fields(src, mod, cls)
    namespaces = mod.assigns.get("_INPUT_NAMESPACES")
    if not isinstance(namespaces, (ast.List, ast.Tuple)):
        return own
    fields: list[tuple[_Module, ast.AnnAssign]] = []
    for elt in namespaces.elts:
        found = src.class_of(mod, _dotted(elt) or "")
        if found is not None:
            fields += _class_fields(src, *found)
    return _in_order(fields, _positional_order(src, mod)) + own


def _class_fields(
    src: _Source, mod: _Module, cls: ast.ClassDef, depth: int = 0
) -> list[tuple[_Module, ast.AnnAssign]]:
    inherited: list[tuple[_Module, ast.AnnAssign]] = []
    for base in cls.bases:
        found = src.class_of(mod, _dotted(base) or "")
        if found is not None and depth < 8:
            inherited += _class_fields(src, *found, depth + 1)
    own = [
        (mod, n)
        for n in cls.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and "ClassVar" not in (mod.segment(n.annotation) or "")
    ]
    names = {n.target.id for _, n in own}
    return [f for f in inherited if f[1].target.id not in names] + own


def _positional_order(src: _Source, mod: _Module) -> list[str]:
    # collect_input_fields (0.5.23 srt/arg_groups/fields/__init__.py) puts the fields named in
    # POSITIONAL_FIELD_ORDER first, then the others in namespace order.
    hit = src.imported(mod, "collect_input_fields")
    if hit is None:
        return []
    try:
        order = _Evaluator(src).name("POSITIONAL_FIELD_ORDER", hit[0])
    except _Unknown:
        return []
    return [n for n in order if isinstance(n, str)] if isinstance(order, (list, tuple)) else []


def _in_order(
    fields: list[tuple[_Module, ast.AnnAssign]], order: list[str]
) -> list[tuple[_Module, ast.AnnAssign]]:
    by_name = {n.target.id: (m, n) for m, n in fields}
    first = [by_name[name] for name in order if name in by_name]
    placed = {n.target.id for _, n in first}
    return first + [f for f in fields if f[1].target.id not in placed]


def _field_default(ev: _Evaluator, mod: _Module, node: ast.AnnAssign) -> FieldDefault:
    base = {
        "name": node.target.id,
        "annotation": mod.segment(node.annotation) or "",
        "source": f"{mod.path}:{node.lineno}",
    }
    if node.value is None:
        return FieldDefault(kind="required", **base)
    text = mod.segment(node.value) or ""
    if isinstance(node.value, ast.Call) and _dotted(node.value.func) in _FIELD_CALLS:
        return _from_field_call(ev, mod, node.value, text, base)
    return _plain_default(ev, mod, node.value, text, base)


def _plain_default(ev: _Evaluator, mod: _Module, value: ast.expr, text: str, base: dict) -> FieldDefault:
    try:
        return FieldDefault(kind="literal", value=ast.literal_eval(value), text=text, known=True, **base)
    except _AST_ERRORS:
        pass
    try:
        return FieldDefault(kind="expression", value=ev.value(value, mod), text=text, known=True, **base)
    except _Unknown:
        return FieldDefault(kind="expression", text=text, **base)


def _from_field_call(ev: _Evaluator, mod: _Module, call: ast.Call, text: str, base: dict) -> FieldDefault:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "default" in kw:
        return _plain_default(ev, mod, kw["default"], text, base)
    factory = kw.get("default_factory")
    if factory is None:
        return FieldDefault(kind="required", text=text, **base)
    if isinstance(factory, ast.Name) and factory.id in _EMPTY_FACTORIES and factory.id not in mod.assigns:
        # A fresh empty container per instance: as fixed as a literal.
        return FieldDefault(
            kind="literal", value=_EMPTY_FACTORIES[factory.id](), text=text, known=True, **base
        )
    try:
        if not isinstance(factory, ast.Lambda):
            raise _Unknown("factory")
        value = ev.value(factory, mod)
    except _Unknown:
        return FieldDefault(kind="factory", text=text, **base)
    return FieldDefault(kind="factory", value=value, text=text, known=True, **base)


# ---------------------------------------------------------------------------
# Flag tables

_NO_VALUE_KINDS = {
    "store_true": True,
    "store_false": False,
    "store_const": None,
    "append_const": None,
    "count": None,
    "help": None,
    "version": None,
}
_ARGPARSE_BASES = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_ExtendAction": "extend",
    "BooleanOptionalAction": "boolean_optional",
}


@dataclass(frozen=True)
class FlagSpec:
    """One command-line flag, as an `add_argument` call (or a field annotation) declares it.

    `dest` is argparse's attribute; `field` is the ServerArgs field the value ends up in,
    which differs where `from_cli_args` copies it over (0.5.11: `--tp-size` is stored as
    `tensor_parallel_size`, then `args.tp_size = args.tensor_parallel_size`).
    kind: what parsing it does, following argparse: store, store_true, store_false,
    store_const, boolean_optional, append, extend, count, or ignore (a deprecated flag
    whose action stores nothing). `type`, `default` and `action` are the source text.
    """

    option_strings: tuple[str, ...]
    dest: str
    field: str = ""
    kind: str = "store"
    action: str | None = None
    nargs: int | str | None = None
    type: str | None = None
    choices: tuple | None = None
    default: str | None = None
    const: Any = None
    required: bool = False
    help: str = ""
    source: str = ""

    @property
    def name(self) -> str:
        longs = [o for o in self.option_strings if o.startswith("--")]
        return (longs or list(self.option_strings))[0]

    @property
    def arity(self) -> tuple[int, float]:
        """How many values it takes: (fewest, most)."""
        n = self.nargs
        if n is None:
            return (1, 1)
        if isinstance(n, int):
            return (n, n)
        return {"?": (0, 1), "*": (0, math.inf), "+": (1, math.inf)}.get(n, (0, math.inf))

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", self.dest)

    def __repr__(self) -> str:
        what = (
            self.kind
            + (f" {self.type}" if self.type else "")
            + (f" nargs={self.nargs}" if self.nargs not in (None, 0) else "")
        )
        into = self.field if self.field == self.dest else f"{self.dest} -> {self.field}"
        return f"<FlagSpec {'/'.join(self.option_strings)} -> {into} ({what})>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code> <small>{html.escape(self.source)}</small>"


@dataclass(eq=False)
class FlagTable:
    """The flags of one SGLang version, with argparse's lookup rules (exact, then unique prefix)."""

    flags: list[FlagSpec]
    version: str | None = None
    tree: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._by_option: dict[str, FlagSpec] = {}
        for spec in self.flags:
            for opt in spec.option_strings:
                self._by_option.setdefault(opt, spec)

    def __getitem__(self, key: str) -> FlagSpec:
        """A flag by option string (`--tp-size`), ServerArgs field (`tp_size`) or argparse dest."""
        if key in self._by_option:
            return self._by_option[key]
        for attr in ("field", "dest"):
            for spec in self.flags:
                if getattr(spec, attr) == key:
                    return spec
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[FlagSpec]:
        return iter(self.flags)

    def __len__(self) -> int:
        return len(self.flags)

    @property
    def options(self) -> list[str]:
        return list(self._by_option)

    def has_option(self, option: str) -> bool:
        return option in self._by_option

    def match(self, token: str) -> tuple[FlagSpec, str, str | None] | None:
        """(flag, option string, value after '=') for a command-line token, as argparse reads it.

        Unique prefixes match (`--tp` is `--tp-size` in 0.5.11); a prefix of several
        option strings raises ParseError, as argparse would exit.
        """
        if token in self._by_option:
            return self._by_option[token], token, None
        head, eq, value = token.partition("=")
        if eq and head in self._by_option:
            return self._by_option[head], head, value
        if not token.startswith("--"):
            return None
        hits = [o for o in self._by_option if o.startswith(head)]
        if len(hits) > 1:
            raise ParseError(f"ambiguous option {head}: could match {', '.join(hits[:8])}", position=None)
        return (self._by_option[hits[0]], hits[0], value if eq else None) if hits else None

    def to_frame(self):
        pd = _pandas()
        rows = [
            (
                s.name,
                ", ".join(s.option_strings),
                s.field,
                s.dest,
                s.kind,
                s.nargs,
                s.type,
                s.choices,
                s.default,
                s.source,
            )
            for s in self.flags
        ]
        columns = [
            "flag",
            "options",
            "field",
            "dest",
            "kind",
            "nargs",
            "type",
            "choices",
            "default",
            "source",
        ]
        return pd.DataFrame(rows, columns=columns)

    def __repr__(self) -> str:
        return f"<FlagTable sglang {self.version or '?'}: {len(self.flags)} flags, {len(self._by_option)} option strings>"

    def _repr_html_(self) -> str:
        return (
            f"<div><b>{html.escape(repr(self))}</b>{self.to_frame().to_html(index=False, max_rows=600)}</div>"
        )


def flag_table(tree: SourceLike) -> FlagTable:
    """The flags `ServerArgs.add_cli_args` registers in this SGLang source, read with ast.

    Follows both layouts: explicit `parser.add_argument(...)` calls (0.5.11), and fields
    annotated `A[T, Arg(...)]` that `add_cli_args_from_dataclass` turns into flags (0.5.19+).
    """
    src = _Source(tree)
    ev = _Evaluator(src)
    mod = src.module("srt/server_args.py")
    method = _method(mod, "ServerArgs", "add_cli_args")
    flags: list[FlagSpec] = []
    calls = sorted(
        (n for n in ast.walk(method) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
    )
    for call in calls:
        name = (_dotted(call.func) or "").rsplit(".", 1)[-1]
        if name == "add_argument":
            spec = _flag_from_call(ev, mod, call)
            flags += [spec] if spec is not None else []
        elif name == "add_cli_args_from_dataclass":
            flags += _flags_from_fields(src, ev, mod, call)
    renames = _cli_renames(mod)
    flags = [replace(f, field=renames[f.dest]) if f.dest in renames else f for f in flags]
    return FlagTable(flags, version=getattr(tree, "version", None), tree=tree)


def _cli_renames(mod: _Module) -> dict[str, str]:
    """{dest: field} for the `args.FIELD = args.DEST` copies in ServerArgs.from_cli_args."""
    try:
        method = _method(mod, "ServerArgs", "from_cli_args")
    except SymbolNotFound:
        return {}
    renames = {}
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = _dotted(node.targets[0]), _dotted(node.value)
            if target and value and target.count(".") == 1 and value.count(".") == 1:
                renames[value.split(".")[1]] = target.split(".")[1]
    return renames


def _method(mod: _Module, cls_name: str, name: str) -> ast.FunctionDef:
    cls = mod.classes.get(cls_name)
    for stmt in cls.body if cls else ():
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return stmt
    raise SymbolNotFound(
        f"no {cls_name}.{name} in {mod.path}",
        hint="this SGLang layout is not known to the kit; find where flags are added with tree.grep('add_argument')",
    )


def _flag_from_call(ev: _Evaluator, mod: _Module, call: ast.Call) -> FlagSpec | None:
    if not call.args or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args):
        return None
    opts = tuple(a.value for a in call.args)
    if not all(o.startswith("-") for o in opts):
        return None  # a positional argument; ServerArgs has none
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    kind, nargs, const = _action(ev, mod, kw)
    dest = _const(kw.get("dest")) or _derive_dest(opts)
    if kind == "boolean_optional":
        opts += tuple("--no-" + o[2:] for o in opts if o.startswith("--"))
    return FlagSpec(
        option_strings=opts,
        dest=dest,
        kind=kind,
        action=mod.segment(kw.get("action")),
        nargs=nargs,
        type=mod.segment(kw.get("type")),
        choices=_choices(ev, mod, kw.get("choices")),
        default=mod.segment(kw.get("default")),
        const=const,
        required=_const(kw.get("required")) is True,
        help=_help(ev, mod, kw.get("help")),
        source=f"{mod.path}:{call.lineno}",
    )


def _const(node: ast.AST | None) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _derive_dest(opts: tuple[str, ...]) -> str:
    # argparse: the first long option string, else the first one, without dashes.
    longs = [o for o in opts if len(o) > 1 and o[1] == "-"]
    return (longs or list(opts))[0].lstrip("-").replace("-", "_")


def _known(ev: _Evaluator, mod: _Module, node: ast.AST | None, default: Any = None) -> Any:
    if node is None:
        return default
    try:
        return ev.value(node, mod)
    except _Unknown:
        return default


def _choices(ev: _Evaluator, mod: _Module, node: ast.AST | None) -> tuple | None:
    value = _known(ev, mod, node)
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return tuple(sorted(value, key=repr)) if isinstance(value, (set, frozenset)) else tuple(value)
    return None


def _help(ev: _Evaluator, mod: _Module, node: ast.AST | None) -> str:
    value = _known(ev, mod, node)
    return value if isinstance(value, str) else (mod.segment(node) or "")


def _action(ev: _Evaluator, mod: _Module, kw: dict[str, ast.expr]) -> tuple[str, int | str | None, Any]:
    """(kind, nargs, const) of an add_argument call."""
    node = kw.get("action")
    nargs = _known(ev, mod, kw.get("nargs"))
    const = _known(ev, mod, kw.get("const"))
    if node is None:
        return "store", nargs, const
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _builtin_action(node.value, nargs, const)
    dotted = _dotted(node) or ""
    base = _ARGPARSE_BASES.get(dotted.rsplit(".", 1)[-1])
    if dotted.startswith("argparse.") and base:
        return _builtin_action(base, nargs, const)
    found = ev.src.class_of(mod, dotted)
    if found is None:
        return "store", nargs, const
    return _custom_action(ev, mod, kw, *found)


def _builtin_action(kind: str, nargs: Any, const: Any) -> tuple[str, int | str | None, Any]:
    if kind == "boolean_optional":
        return kind, 0, None
    if kind in _NO_VALUE_KINDS:
        fixed = _NO_VALUE_KINDS[kind]
        return kind, 0, fixed if fixed is not None else const
    return kind, nargs, const


def _custom_action(ev: _Evaluator, mod: _Module, kw: dict, cls_mod: _Module, cls: ast.ClassDef) -> tuple:
    """What an `argparse.Action` subclass does, read from its __init__ defaults and __call__."""
    for base in cls.bases:
        kind = _ARGPARSE_BASES.get((_dotted(base) or "").rsplit(".", 1)[-1])
        if kind and kind != "store":
            return _builtin_action(kind, _known(ev, mod, kw.get("nargs")), _known(ev, mod, kw.get("const")))
    params = _init_defaults(cls)

    def param(name: str) -> Any:
        if name in kw:
            return _known(ev, mod, kw[name])
        return _known(ev, cls_mod, params.get(name))

    stored = _stored_value(cls)
    if stored is None:
        return "ignore", param("nargs"), None
    if isinstance(stored, ast.Constant):
        return "store_const", param("nargs"), stored.value
    if isinstance(stored, ast.Attribute) and _dotted(stored.value) == "self":
        return "store_const", param("nargs"), param(stored.attr)
    return "store", param("nargs"), None


def _init_defaults(cls: ast.ClassDef) -> dict[str, ast.expr]:
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            a = stmt.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=False) if d is not None]
            return {arg.arg: d for arg, d in pairs}
    return {}


def _stored_value(cls: ast.ClassDef) -> ast.expr | None:
    """X in `setattr(namespace, self.dest, X)` inside __call__; None if it stores nothing."""
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__call__":
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Call)
                    and _dotted(node.func) == "setattr"
                    and len(node.args) == 3
                    and _dotted(node.args[1]) == "self.dest"
                ):
                    return node.args[2]
    return None


def _flags_from_fields(src: _Source, ev: _Evaluator, mod: _Module, call: ast.Call) -> list[FlagSpec]:
    # Mirrors add_cli_args_from_dataclass (0.5.23 srt/arg_groups/arg_utils.py): each field
    # annotated A[T, "help"] or A[T, Arg(...)] becomes a flag unless Arg(no_cli=True).
    target = _dotted(call.args[1]) if len(call.args) > 1 else None
    if target == "ServerArgs":
        fields = _server_args_fields(src)
    else:
        found = src.class_of(mod, target or "")
        fields = _class_fields(src, *found) if found else []
    only = _known(ev, mod, next((k.value for k in call.keywords if k.arg == "fields"), None))
    specs = [_field_flag(ev, m, node) for m, node in fields if only is None or node.target.id in only]
    return [s for s in specs if s is not None]


def _field_flag(ev: _Evaluator, mod: _Module, node: ast.AnnAssign) -> FlagSpec | None:
    inner, meta = _annotated(node.annotation)
    if meta is None:
        return None
    arg = {k.arg: k.value for k in meta.keywords if k.arg} if isinstance(meta, ast.Call) else {"help": meta}
    if _known(ev, mod, arg.get("no_cli")) is True:
        return None
    name = node.target.id
    cli = _known(ev, mod, arg.get("cli_name")) or "--" + name.replace("_", "-")
    opts = (cli, *(_known(ev, mod, arg.get("aliases")) or ()))
    kind, nargs, type_text, choices = _field_shape(ev, mod, inner, arg)
    if kind == "boolean_optional":
        opts += tuple("--no-" + o[2:] for o in opts if o.startswith("--"))
    has_default = node.value is not None
    required = _known(ev, mod, arg.get("required"))
    return FlagSpec(
        option_strings=tuple(opts),
        dest=name,
        kind=kind,
        action=mod.segment(arg.get("action")),
        nargs=nargs,
        type=type_text,
        choices=choices,
        default=mod.segment(node.value) if has_default else None,
        const=_known(ev, mod, arg.get("const"), True if kind == "store_true" else None),
        required=required is True or (required is None and not has_default and kind == "store"),
        help=_help(ev, mod, arg.get("help")),
        source=f"{mod.path}:{node.lineno}",
    )


def _annotated(ann: ast.expr) -> tuple[ast.expr, ast.expr | None]:
    """(T, metadata) of `A[T, "help"]`, `A[T, Arg(...)]` or `Annotated[...]`."""
    if not (
        isinstance(ann, ast.Subscript) and (_dotted(ann.value) or "").rsplit(".", 1)[-1] in ("A", "Annotated")
    ):
        return ann, None
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    for meta in parts[1:]:
        if isinstance(meta, ast.Call) and (_dotted(meta.func) or "").rsplit(".", 1)[-1] == "Arg":
            return parts[0], meta
        if isinstance(meta, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not isinstance(
            _const(meta), (int, float)
        ):
            return parts[0], meta
    return parts[0], None


def _field_shape(
    ev: _Evaluator, mod: _Module, tp: ast.expr, arg: dict
) -> tuple[str, Any, str | None, tuple | None]:
    """(kind, nargs, type, choices) the way add_cli_args_from_dataclass derives them from T."""
    explicit_choices = _choices(ev, mod, arg.get("choices"))
    type_parser = mod.segment(arg.get("type_parser"))
    nargs = _known(ev, mod, arg.get("nargs"))
    if arg.get("action") is not None:
        kind, a_nargs, _ = _action(
            ev, mod, {"action": arg["action"], **({"nargs": arg["nargs"]} if "nargs" in arg else {})}
        )
        return kind, a_nargs, type_parser, explicit_choices
    tp = _unwrap_optional(tp)
    head = (_dotted(tp.value) or "").rsplit(".", 1)[-1] if isinstance(tp, ast.Subscript) else _dotted(tp)
    if head == "Literal":
        values = _known(ev, mod, tp.slice)
        values = values if isinstance(values, tuple) else (values,)
        return (
            "store",
            nargs,
            type_parser or _type_name(type(values[0]).__name__ if values else "str"),
            explicit_choices or values,
        )
    if head in ("list", "List") and type_parser is None:
        elem = tp.slice if isinstance(tp, ast.Subscript) else None
        return (
            "store",
            nargs or "+",
            _type_name(_dotted(elem) if elem is not None else "str"),
            explicit_choices,
        )
    if head == "bool":
        return "store_true", 0, None, None
    return "store", nargs, type_parser or _type_name(head), explicit_choices


def _unwrap_optional(tp: ast.expr) -> ast.expr:
    if isinstance(tp, ast.Subscript) and (_dotted(tp.value) or "").rsplit(".", 1)[-1] in (
        "Optional",
        "Union",
    ):
        parts = tp.slice.elts if isinstance(tp.slice, ast.Tuple) else [tp.slice]
        rest = [p for p in parts if not _is_none(p)]
        return rest[0] if len(rest) == 1 else tp
    if isinstance(tp, ast.BinOp) and isinstance(tp.op, ast.BitOr):
        sides = [s for s in (tp.left, tp.right) if not _is_none(s)]
        return sides[0] if len(sides) == 1 else tp
    return tp


def _is_none(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value is None) or _dotted(node) == "None"


def _type_name(name: str | None) -> str:
    # _infer_type_func maps str/int/float to themselves and anything else to str.
    return name if name in ("str", "int", "float") else "str"


# ---------------------------------------------------------------------------
# Launch commands

_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def parse_command(
    argv: str | Iterable[str],
    flags: FlagTable,
    *,
    cwd: str | None = None,
    read_text: Any = None,
    strict: bool = True,
) -> dict[str, Any]:
    """The fields a launch command sets explicitly, by dest, with values typed like argparse would.

    Takes `python -m sglang.launch_server ...`, `sglang serve ...` (also as the
    `/proc/PID/cmdline` of a console script) or bare flags. `--config file.yaml` is merged
    the way sglang's ConfigArgumentMerger does it: the file's options go first, so flags on
    the command line win. The file is read with `read_text(path)`, else on the host of
    `flags.tree`, else locally; relative paths are taken from `cwd`.
    Unknown flags raise ParseError (position = index in argv) unless strict=False.
    """
    tokens = list(shlex.split(argv) if isinstance(argv, str) else argv)
    args = _server_args_tokens(tokens)
    args = _merge_config(args, flags, cwd, read_text)
    return _parse_tokens(args, flags, strict)


def _server_args_tokens(tokens: list[str]) -> list[tuple[str, int]]:
    indexed = list(zip(tokens, range(len(tokens)), strict=False))
    start = 0
    while start < len(tokens) and _ENV_ASSIGN.match(tokens[start]):
        start += 1  # `VAR=1 python -m ...`
    if start < len(tokens) and tokens[start].startswith("-") and tokens[start] != "-m":
        return indexed[start:]
    for j in range(start, len(tokens)):
        tok, nxt = tokens[j], tokens[j + 1 : j + 3]
        if tok == "-m" and nxt and nxt[0].endswith("launch_server"):
            return indexed[j + 2 :]
        if tok == "-m" and nxt[:1] in (["sglang"], ["sglang.cli.main"]) and nxt[1:] == ["serve"]:
            return _drop_model_type(indexed[j + 3 :])
        if posixpath.basename(tok) == "sglang" and nxt[:1] == ["serve"]:
            return _drop_model_type(indexed[j + 2 :])
        if posixpath.basename(tok) == "launch_server.py":
            return indexed[j + 1 :]
    raise ParseError(
        "not an SGLang launch command: no `-m sglang.launch_server` or `sglang serve` in it",
        position=0,
        hint="pass the server's argv (e.g. /proc/PID/cmdline split on NUL), or just its flags",
    )


def _drop_model_type(args: list[tuple[str, int]]) -> list[tuple[str, int]]:
    # `sglang serve` consumes --model-type before ServerArgs sees the rest (sglang/cli/serve.py).
    out, i = [], 0
    while i < len(args):
        tok = args[i][0]
        if tok == "--model-type":
            i += 2
            continue
        if not tok.startswith("--model-type="):
            out.append(args[i])
        i += 1
    return out


def _looks_like_option(tok: str, flags: FlagTable) -> bool:
    # argparse's _parse_optional: what is not an option is a value.
    if not tok.startswith("-") or len(tok) == 1:
        return False
    if flags.has_option(tok) or flags.has_option(tok.partition("=")[0]):
        return True
    if _NEGATIVE.match(tok):
        return False
    return " " not in tok


def _parse_tokens(args: list[tuple[str, int]], flags: FlagTable, strict: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        tok, pos = args[i]
        if tok == "--":
            break
        hit = _match(flags, tok, pos) if _looks_like_option(tok, flags) else None
        if hit is None:
            if strict:
                what = "unknown flag" if _looks_like_option(tok, flags) else "unexpected value"
                raise ParseError(
                    f"{what} {tok!r} at argv[{pos}] for sglang {flags.version or '?'}",
                    position=pos,
                    hint="is the flag table from the same sglang version as the server? strict=False skips it",
                )
            i += 1
            continue
        spec, opt, explicit = hit
        values, i = _take_values(spec, opt, explicit, args, i + 1, flags)
        _store(spec, opt, values, out, pos)
    return out


def _match(flags: FlagTable, tok: str, pos: int) -> tuple[FlagSpec, str, str | None] | None:
    try:
        return flags.match(tok)
    except ParseError as err:
        raise ParseError(err.message, position=pos, hint="argparse rejects ambiguous abbreviations") from None


def _take_values(
    spec: FlagSpec, opt: str, explicit: str | None, args: list, i: int, flags: FlagTable
) -> tuple[list, int]:
    fewest, most = spec.arity
    if explicit is not None:
        if most == 0:
            raise ParseError(f"{opt} takes no value, got {opt}={explicit}", position=args[i - 1][1])
        return [explicit], i
    values = []
    while i < len(args) and len(values) < most and not _looks_like_option(args[i][0], flags):
        values.append(args[i][0])
        i += 1
    if len(values) < fewest:
        raise ParseError(
            f"{opt} expects {'a value' if fewest == 1 else f'{fewest}+ values'}", position=args[i - 1][1]
        )
    return values, i


def _store(spec: FlagSpec, opt: str, values: list[str], out: dict[str, Any], pos: int) -> None:
    kind, dest = spec.kind, spec.field
    if kind in ("ignore", "help", "version"):
        return
    if kind == "boolean_optional":
        out[dest] = not opt.startswith("--no-")
    elif kind in ("store_true", "store_false", "store_const"):
        out[dest] = spec.const
    elif kind == "count":
        out[dest] = (out.get(dest) or 0) + 1
    elif kind == "append_const":
        out[dest] = [*_as_list(out.get(dest)), spec.const]
    else:
        value = _typed(spec, opt, values, pos)
        if kind == "append":
            out[dest] = [*_as_list(out.get(dest)), value]
        elif kind == "extend":
            out[dest] = [*_as_list(out.get(dest)), *value]
        else:
            out[dest] = value


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _typed(spec: FlagSpec, opt: str, values: list[str], pos: int) -> Any:
    convert = _CONVERTERS.get((spec.type or "str").rsplit(".", 1)[-1], str)
    try:
        typed = [convert(v) for v in values]
    except (ValueError, TypeError, ArithmeticError, InvalidOperation) as err:
        raise ParseError(f"{opt}: {values!r} is not a valid {spec.type}: {err}", position=pos) from None
    if spec.nargs is None:
        return typed[0]
    if spec.nargs == "?":
        return typed[0] if typed else spec.const
    return typed


def _nullable_str(text: str) -> str | None:
    return None if not text or text == "None" else text


def _human_readable_int(text: str) -> int:
    # sglang.srt.utils.common.human_readable_int: SI (k, M, G, T) and IEC (Ki, Mi, Gi, Ti) suffixes.
    text = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if not m:
        return int(text)
    number, suffix = m.groups()
    if suffix.endswith("i"):
        return int(number) * 2 ** (10 * ("KMGT".index(suffix[0]) + 1))
    return int(Decimal(number) * 10 ** (3 * ("kMGT".index(suffix) + 1)))


_CONVERTERS = {
    "str": str,
    "int": int,
    "float": float,
    "loads": json.loads,
    "json_list_type": json.loads,
    "nullable_str": _nullable_str,
    "human_readable_int": _human_readable_int,
}


def _merge_config(args: list[tuple[str, int]], flags: FlagTable, cwd: str | None, read_text: Any) -> list:
    # sglang 0.5.11 prepare_server_args + ConfigArgumentMerger (srt/server_args_config_parser.py):
    # only a literal `--config PATH` token triggers it; the file's options are placed before
    # the command line's, so the command line wins; `--config PATH` itself is removed.
    at = [i for i, (tok, _) in enumerate(args) if tok == "--config"]
    if not at:
        return args
    if len(at) > 1 or at[0] == len(args) - 1:
        why = "several --config options" if len(at) > 1 else "--config without a file"
        raise ParseError(f"{why}; sglang refuses to start with it", position=args[at[-1]][1])
    i = at[0]
    path, pos = args[i + 1][0], args[i][1]
    data = _read_config(path, pos, flags, cwd, read_text)
    return [(tok, pos) for tok in _config_args(data, flags, pos)] + args[:i] + args[i + 2 :]


def _read_config(path: str, pos: int, flags: FlagTable, cwd: str | None, read_text: Any) -> dict:
    import yaml  # PyYAML; sglang reads the file with yaml.safe_load as well

    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise ParseError(f"config file must be YAML (.yaml/.yml), got {path}", position=pos)
    full = path if posixpath.isabs(path) or not cwd else posixpath.join(cwd, path)
    reader = read_text or getattr(getattr(flags.tree, "host", None), "read_text", None) or _read_local
    try:
        data = yaml.safe_load(reader(full))
    except yaml.YAMLError as err:
        raise ParseError(f"config file {full} is not valid YAML: {err}", position=pos) from None
    except (OSError, RemoteFileError) as err:
        raise ParseError(
            f"cannot read config file {full}: {err}",
            position=pos,
            hint="relative paths are taken from cwd= (the server's /proc/PID/cwd)",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParseError(f"config file {full} must hold a mapping at its top level", position=pos)
    return data


def _read_local(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _config_args(data: dict, flags: FlagTable, pos: int) -> list[str]:
    out: list[str] = []
    for key, value in data.items():
        spec, opt = _config_flag(str(key), flags, pos)
        if spec.kind not in ("store", "store_true"):
            raise ParseError(
                f"config option {key!r} has action {spec.action or spec.kind}, which sglang's config "
                "merger refuses",
                position=pos,
            )
        if isinstance(value, bool):
            out += ([opt] if value else []) if spec.kind == "store_true" else [opt, str(value).lower()]
        elif isinstance(value, list):
            out += [opt, *map(str, value)] if value else []
        elif isinstance(value, dict):
            out += [opt, json.dumps(value)]
        else:
            out += [opt, str(value)]
    return out


def _config_flag(key: str, flags: FlagTable, pos: int) -> tuple[FlagSpec, str]:
    # sglang 0.5.11 turns each key into `--{key}`; newer versions also accept any long
    # spelling written with underscores, so a field such as `tp_size` is taken too.
    hit = _match(flags, "--" + key, pos)
    if hit is not None:
        return hit[0], hit[1]
    spec = flags.get(key.replace("-", "_"))
    if spec is None:
        raise ParseError(f"config key {key!r} is not a flag of sglang {flags.version or '?'}", position=pos)
    return spec, spec.name


# ---------------------------------------------------------------------------
# Comparing


def _norm(value: Any) -> Any:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_norm(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted((_norm(v) for v in value), key=repr)))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted(((repr(k), _norm(v)) for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, NonLiteral):
        return ("nonliteral", value.text)
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return value


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(_norm(a) == _norm(b))
    except (TypeError, ValueError):
        return False


def _fields_of(x: ServerArgsSnapshot | Mapping[str, Any]) -> Mapping[str, Any]:
    return x.fields if isinstance(x, ServerArgsSnapshot) else x


def classify(
    snapshot: ServerArgsSnapshot | Mapping[str, Any],
    explicit: Mapping[str, Any],
    defaults: Mapping[str, FieldDefault | Any],
):
    """One row per field: flag, default, cli (NA if not given), effective, origin.

    origin: `default`; `explicit` (given and kept); `explicit-overridden` (given, but the
    server runs another value); `auto-changed` (not given, yet the server runs a value
    other than the default: something in SGLang decided it). A field whose default
    cannot be known from the source counts as `default`.
    """
    pd = _pandas()
    effective = _fields_of(snapshot)
    names = list(effective) + [k for k in explicit if k not in effective]
    rows = [_classify_row(n, effective, explicit, defaults, pd.NA) for n in names]
    return pd.DataFrame(rows, columns=["flag", "default", "cli", "effective", "origin"])


def _classify_row(name: str, effective: Mapping, explicit: Mapping, defaults: Mapping, na: Any) -> tuple:
    fd = defaults.get(name, _MISSING)
    known = fd is not _MISSING and (not isinstance(fd, FieldDefault) or fd.known)
    default = (fd.value if isinstance(fd, FieldDefault) else fd) if known else na
    eff = effective.get(name, _MISSING)
    if name in explicit:
        origin = "explicit" if eff is _MISSING or _same(eff, explicit[name]) else "explicit-overridden"
    elif eff is _MISSING or not known or _same(eff, default):
        origin = "default"
    else:
        origin = "auto-changed"
    return (name, default, explicit[name] if name in explicit else na, na if eff is _MISSING else eff, origin)


def diff(a: ServerArgsSnapshot | Mapping[str, Any], b: ServerArgsSnapshot | Mapping[str, Any]):
    """Fields whose values differ between two snapshots or two parsed commands: flag, a, b.

    Nested values (`CudaGraphConfig(...)`, dicts) are compared leaf by leaf under dotted
    names; a field present on one side only shows NA on the other.
    """
    pd = _pandas()
    fa, fb = _flatten(_fields_of(a)), _flatten(_fields_of(b))
    names = list(fa) + [k for k in fb if k not in fa]
    rows = [
        (k, fa.get(k, pd.NA), fb.get(k, pd.NA))
        for k in names
        if not (k in fa and k in fb and _same(fa[k], fb[k]))
    ]
    return pd.DataFrame(rows, columns=["flag", "a", "b"])


def _flatten(fields: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        name = f"{prefix}{key}"
        nested = _nested(value)
        if nested:
            out.update(_flatten(nested, name + "."))
        else:
            out[name] = value
    return out


def _nested(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, NonLiteral) and value.kwargs and not value.args:
        return value.kwargs
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        return value
    return None
