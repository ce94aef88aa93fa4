"""A module's tree with its functions parsed when first looked into.

``ast.parse`` of sglang's ``srt/server_args.py`` (326 kB, 7,500 lines) costs about 0.1 s, and a
question such as ``sgl-kit why FLAG`` looks into a few of its hundred functions. The persistent
index stores, per file, where its longer functions are (:func:`deferred_defs`, plain data).
With that, :func:`skeleton` parses the file with those functions' lines blanked (a one-line
``def NAME(): pass`` kept at each one's ``def`` line, so every other node keeps its line and
column), and puts in each function's place a node that parses the function's own lines, at
their own line numbers, the first time one of its fields (``body``, ``args``, ...) is read, and
then becomes the ``ast.FunctionDef`` a whole parse gives. Until then it has ``name`` and its
positions, is an instance of ``ast.FunctionDef`` (or ``AsyncFunctionDef``), and its class is
named so.

Only functions at the top of the module and directly in a top-level class are deferred; the
enclosing class's end position is stored and set. Anything that does not match what was stored
(a line count, a name, a position) gives up: ``skeleton`` returns None and the caller parses
the whole file; a function whose lines do not parse as stored is taken from a whole parse.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

__all__ = ["MIN_LINES", "deferred_defs", "is_deferred", "skeleton"]

MIN_LINES = 4  # shorter functions stay in the skeleton: parsing them apart would cost more than it saves
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEF_LINE = re.compile(r"(async\s+)?def\s+(\w+)")


def deferred_defs(tree: ast.Module, text: str) -> dict:
    """Where a whole parse found the functions a skeleton defers, as plain data for the index."""
    defs, classes = [], []
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, _DEFS):
            entry = _entry(i, -1, stmt)
            if entry:
                defs.append(entry)
        elif isinstance(stmt, ast.ClassDef):
            inner = [e for j, s in enumerate(stmt.body) if isinstance(s, _DEFS) and (e := _entry(i, j, s))]
            if inner:
                defs.extend(inner)
                classes.append([i, stmt.end_lineno, stmt.end_col_offset])
    return {"lines": text.count("\n") + 1, "defs": defs, "classes": classes}


def _entry(i: int, j: int, node) -> list | None:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    if node.end_lineno - first + 1 < MIN_LINES:
        return None
    return [i, j, first, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, node.name,
            isinstance(node, ast.AsyncFunctionDef)]


def skeleton(text: str, stored, parse: Callable[[str], ast.Module]) -> ast.Module | None:
    """The module's tree with the stored functions deferred, or None when ``stored`` does not fit ``text``."""
    try:
        count, defs, classes = stored["lines"], stored["defs"], stored["classes"]
    except (KeyError, TypeError):
        return None
    lines = text.split("\n")
    if count != len(lines) or not isinstance(defs, list):
        return None
    if not defs:
        return parse(text)
    out = list(lines)
    try:
        for _i, _j, first, line, col, end, _end_col, name, is_async in defs:
            if not 1 <= first <= line <= end <= count or (col and first < 2):
                return None
            indent, head = lines[line - 1][:col], lines[line - 1][col:]
            if indent.strip() or not _DEF_LINE.match(head) or _DEF_LINE.match(head).group(2) != name:
                return None  # the text does not have this function where the layout says
            out[first - 1 : end] = [""] * (end - first + 1)
            out[line - 1] = f"{indent}{'async def' if is_async else 'def'} {name}(): pass"
        tree = parse("\n".join(out))
        for i, j, first, line, col, end, end_col, name, is_async in defs:
            body = tree.body if j < 0 else tree.body[i].body
            index = i if j < 0 else j
            placeholder = body[index]
            if (type(placeholder) is not (ast.AsyncFunctionDef if is_async else ast.FunctionDef)
                    or placeholder.name != name or placeholder.lineno != line or placeholder.col_offset != col):
                return None
            body[index] = _deferred(is_async, name, (first, line, col, end, end_col), lines, text, parse)
        for i, end, end_col in classes:
            cls = tree.body[i]
            if not isinstance(cls, ast.ClassDef):
                return None
            cls.end_lineno, cls.end_col_offset = end, end_col
    except (SyntaxError, ValueError, TypeError, IndexError, AttributeError):
        return None
    return tree


def _deferred(is_async: bool, name: str, where: tuple, lines: list[str], text: str, parse) -> ast.AST:
    first, line, col, end, end_col = where

    def load() -> ast.AST:
        chunk = "\n".join(lines[first - 1 : end])
        try:
            if col == 0:
                node = parse("\n" * (first - 1) + chunk).body[0]
            else:  # an indented method: under an `if 1:` on the line above its first, so columns stay
                node = parse("\n" * (first - 2) + "if 1:\n" + chunk).body[0].body[0]
            if (node.name, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset) == (name, line, col, end, end_col):
                return node
        except (SyntaxError, ValueError, IndexError, AttributeError):
            pass
        return _from_whole(parse(text), line, col)

    cls = _LazyAsyncFunctionDef if is_async else _LazyFunctionDef
    node = cls.__new__(cls)  # no field set: each one read makes the function
    node.__dict__.update(name=name, lineno=line, col_offset=col, end_lineno=end, end_col_offset=end_col, _kit_load=load)
    return node


def _from_whole(tree: ast.Module, line: int, col: int) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, _DEFS) and node.lineno == line and node.col_offset == col:
            return node
    raise SyntaxError(f"no function at line {line}, column {col} of the whole parse")


def is_deferred(node) -> bool:
    """Whether a node is a function not parsed yet (reading any of its fields parses it)."""
    return type(node) in _LAZY


def _materialize(self, attr: str):
    """The first read of a field not yet there parses the function and turns this node into it."""
    state = self.__dict__
    load = state.get("_kit_load")
    if load is None or attr.startswith("__"):
        raise AttributeError(attr)
    real = load()
    state.clear()
    state.update(real.__dict__)
    self.__class__ = type(real)
    return getattr(self, attr)


class _LazyFunctionDef(ast.FunctionDef):
    __slots__ = ()
    __getattr__ = _materialize


class _LazyAsyncFunctionDef(ast.AsyncFunctionDef):
    __slots__ = ()
    __getattr__ = _materialize


_LAZY = (_LazyFunctionDef, _LazyAsyncFunctionDef)

# The evaluator dispatches on the class's name (``_st_FunctionDef``): a deferred function is named as what it becomes.
for _cls, _name in ((_LazyFunctionDef, "FunctionDef"), (_LazyAsyncFunctionDef, "AsyncFunctionDef")):
    _cls.__name__ = _cls.__qualname__ = _name
