"""Environments of the lazy interpreter: memoized thunks, scopes, and the markers of a return."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from .modules import ModuleInfo
from .values import unknown

RET, DONE = "<ret>", "<done>"


class Thunk:
    """A memoized computation; replays the notes it produced on every read."""

    __slots__ = ("fn", "value", "notes", "state", "line")

    def __init__(self, fn: Callable[[], object], line: int | None = None) -> None:
        self.fn = fn
        self.value = None
        self.notes: list[str] = []
        self.state = 0  # 0 new, 1 running, 2 done
        self.line = line

    def force(self, ev):  # ev: the Evaluator, which collects the notes
        if self.state == 1:
            return unknown("a value", "depends on itself (cycle)")
        if self.state == 0:
            self.state = 1
            ev.notes.append([])
            try:
                self.value = self.fn()
            finally:
                self.notes = ev.notes.pop()
                self.state = 2
        ev.note(*self.notes)
        return self.value


def const(value, line: int | None = None) -> Thunk:
    thunk = Thunk(lambda: value, line)
    thunk.value, thunk.state = value, 2
    return thunk


@dataclass
class Scope:
    module: ModuleInfo
    cls: ast.ClassDef | None = None
    self_name: str | None = None
    depth: int = 0
    follow: bool = False  # interpret calls into the tree (model-config code), not just read args
    class_body: bool = False  # evaluating a class attribute: the class's other attributes are in scope


@dataclass
class Env:
    vars: dict[str, Thunk]
    scope: Scope

    def with_vars(self, **updates: Thunk) -> Env:
        return Env({**self.vars, **updates}, self.scope)


def default_for(key: str):
    if key == DONE:
        return False
    if key == RET:
        return None
    return unknown(key, "not set on every path")
