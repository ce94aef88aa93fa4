"""Environment variables the source reads (`envs.X.get()`, `os.environ.get`, `get_bool_env_var`),
answered from the server process's own environment when it is known.

sglang declares its variables in ``sglang/srt/environ.py`` as ``X = EnvBool(False)``,
``EnvInt(...)`` and so on; the declaration gives the default and how a value is parsed,
so ``envs.X.get()`` is computed the way sglang computes it.
"""

from __future__ import annotations

import ast
import re

from .modules import Modules, dotted
from .values import unknown

__all__ = ["Environment", "env_call"]

_ENVS_GET = re.compile(r"^(?:\w+\.)*envs\.([A-Za-z_][A-Za-z0-9_]*)\.get$")
_OS_GET = ("os.environ.get", "os.getenv", "environ.get", "getenv")
_TRUE = ("true", "1", "yes", "y")
_FALSE = ("false", "0", "no", "n")


class Environment:
    """A process's environment as far as the kit could read it.

    ``values`` holds the variables read; ``prefixes`` (when given) says which names were
    read at all: a name outside them is unknown rather than unset. ``where`` says where
    the values came from, for the notes.
    """

    def __init__(self, values: dict[str, str], prefixes: tuple[str, ...] | None = None,
                 where: str = "the server's environment") -> None:
        self.values = dict(values)
        self.prefixes = tuple(prefixes) if prefixes else None
        self.where = where

    def covers(self, name: str) -> bool:
        return self.prefixes is None or name.startswith(self.prefixes)


def env_call(ev, node: ast.Call, args: list | None):
    """The value of an environment read, an Unknown saying why not, or None if `node` is no such read."""
    name = dotted(node.func)
    match = _ENVS_GET.match(name)
    if match:
        return _envs_field(ev, match.group(1))
    if name in _OS_GET and args and isinstance(args[0], str):
        return _raw(ev, args[0], args[1] if len(args) > 1 else None, f"{name}({args[0]!r})")
    if name.rsplit(".", 1)[-1] == "get_bool_env_var" and args and isinstance(args[0], str):
        default = args[1] if len(args) > 1 else _keyword_constant(node, "default", "false")
        raw = _raw(ev, args[0], default, f"get_bool_env_var({args[0]!r})")
        return raw.lower() in ("true", "1") if isinstance(raw, str) else raw
    return None


def _keyword_constant(node: ast.Call, name: str, otherwise):
    """A keyword argument written as a constant (``default="true"``), else ``otherwise``."""
    for kw in node.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return otherwise


def _lookup(ev, var: str):
    environ: Environment | None = getattr(ev, "environ", None)
    if environ is None:
        return unknown(var, "reads the server's environment, which is not known here "
                            "(discovery reads it from /proc/PID/environ of a running server)")
    if not environ.covers(var):
        return unknown(var, f"not among the variables read from {environ.where}")
    return environ.values.get(var)


def _raw(ev, var: str, default, label: str):
    value = _lookup(ev, var)
    if value is None:
        ev.note(f"{var} is not set in {ev.environ.where}: {label} gives {default!r}")
        return default
    if not isinstance(value, str):
        return value  # an Unknown
    ev.note(f"{var}={value!r} in {ev.environ.where}")
    return value


def _envs_field(ev, var: str):
    declared = _declaration(ev.modules, var)
    if declared is None:
        return unknown(f"envs.{var}", "not declared in sglang/srt/environ.py as read")
    kind, default_node, where = declared
    try:
        default = ast.literal_eval(default_node) if default_node is not None else None
    except ValueError:
        return unknown(f"envs.{var}", f"its default `{ast.unparse(default_node)}` is computed")
    value = _lookup(ev, var)
    if value is None:
        ev.note(f"{var} is not set in {ev.environ.where}: its default {default!r} applies ({where})")
        return default
    if not isinstance(value, str):
        return value
    parsed = _parse(kind, value, default)
    ev.note(f"{var}={value!r} in {ev.environ.where}, read as {parsed!r} ({where})")
    return parsed


def _declaration(modules: Modules, var: str):
    """(EnvBool/EnvInt/..., default node, file:line) of `VAR = EnvX(default)` in class Envs."""
    module = modules.find(f"{modules.package}.srt.environ")
    cls = module.classes.get("Envs") if module is not None else None
    for stmt in cls.body if cls is not None else ():
        if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in stmt.targets)
                and isinstance(stmt.value, ast.Call)):
            args = stmt.value.args
            default = args[0] if args else next((k.value for k in stmt.value.keywords if k.arg == "default"), None)
            return dotted(stmt.value.func).rsplit(".", 1)[-1], default, module.where(stmt)
    return None


def _parse(kind: str, value: str, default):
    """As sglang's EnvField subclasses parse it; an invalid value falls back to the default, as there."""
    try:
        if kind == "EnvBool":
            low = value.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            return default
        if kind == "EnvInt":
            return int(value)
        if kind == "EnvFloat":
            return float(value)
        if kind == "EnvTuple":
            return tuple(s.strip() for s in value.split(",") if s.strip())
    except ValueError:
        return default
    return value
