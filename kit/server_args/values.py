"""Logged values: Python literals, and NonLiteral for the rest (`LoRARef(...)`, enums, paths)."""

from __future__ import annotations

import ast
import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kit._text import clip

from .common import AST_ERRORS


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
        return f"NonLiteral({clip(self.text, 60)})"

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


def split_top(text: str, start: int, closer: str) -> _Split:
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


def parse_value(text: str) -> tuple[Any, bool]:
    """(value, is_literal). Calls become structured NonLiterals; anything else keeps its text."""
    try:
        return ast.literal_eval(text), True
    except AST_ERRORS:
        pass
    try:
        masked, groups = _mask_angles(text)
        node = ast.parse(masked.strip(), mode="eval").body
        return _from_node(node, _Segments(masked.strip()), groups, top=text), False
    except AST_ERRORS:
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
    name = dotted_name(node.func)
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


def dotted_name(node: ast.AST) -> str | None:
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


def same_value(a: Any, b: Any) -> bool:
    try:
        return bool(_norm(a) == _norm(b))
    except (TypeError, ValueError):
        return False
