"""The words of launch evidence, each with its origin: shell scripts, systemd units, Kubernetes and compose YAML.

``shell_words`` follows what the shell does: backslash-newline joins lines, a comment ends a
command (also one inside a continued command: the lines after it are a new command, which
is said), ``VAR=value`` and ``export`` lines set variables that later ``$VAR`` / ``${VAR}``
/ ``${VAR:-default}`` expand to (an unquoted expansion that holds flags becomes several
words), ``$((...))`` over known numbers is computed, and ``$(...)``, backticks, ``$1`` or an
unknown variable stay as words marked ``unresolved``. ``"$@"`` leaves a note: the script's
own arguments are not in the text. ``yaml_launch_words`` finds every container (pod,
deployment, LeaderWorkerSet, RoleBasedGroup, compose service) with its command, args, env,
and the names of envFrom sources it cannot see.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from .markdown import strip_prompt

__all__ = ["Command", "Found", "Word", "shell_words", "yaml_launch_words"]


@dataclass
class Word:
    text: str
    origin: str
    unresolved: bool = False
    why: str | None = None
    end_of_text: bool = False


@dataclass
class Command:
    words: list[Word]
    env: dict[str, str] = field(default_factory=dict)
    env_origin: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Found:
    commands: list[Command] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (text, why, origin)
    loose_env: list[Word] = field(default_factory=list)
    exported: set[str] = field(default_factory=set)  # names the script exports (or the unit sets)


class Array(list):
    """A bash array (``ARGS=(--tp 8 ...)``): its words, each with the line it was written on."""


class Opaque(str):
    """A variable's value that only the shell can compute (``X=$(hostname)``): expanding it is unresolved."""

    why: str = ""


_SEPARATORS = {";", "&&", "||", "|", "&", ";;", "|&"}
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)
_REDIRECT = re.compile(r"(?:(?<=\s)|^)(?:\d*|&)(?:>>?|<)&?\s*(?:\"[^\"]*\"|'[^']*'|[^\s;&|]+)")
_MID_BACKSLASH = re.compile(r"(?<=\s)\\(?=\s)")
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?:(:?[-=+?])([^}]*))?\}|\$([A-Za-z_]\w*)|\$\{?([0-9#*@?!$-])\}?")
_SUBST = re.compile("\x01(\\d+)\x01")
_ARRAY_START = re.compile(r"^\s*(?:(?:declare|local|readonly)\s+-a\s+|export\s+)?([A-Za-z_]\w*)(\+?)=\((.*)$", re.S)
_ARRAY_USE = re.compile(r"\$\{([A-Za-z_]\w*)\[[@*]\]\}")


def _where(where: str, line: int) -> str:
    return f"{where}:{line}" if where else f"line {line}"


def shell_words(text: str, where: str = "", *, env: dict[str, str] | None = None, systemd: bool = False) -> Found:
    """The commands of a shell script (or a systemd unit's ExecStart), word by word."""
    found = Found()
    variables: dict[str, tuple[str, str]] = {k: (v, "the container's env") for k, v in (env or {}).items()}
    found.exported.update(env or {})
    lines = text.split("\n")
    if systemd:
        lines = _systemd_lines(lines, where, variables, found)
    words: list[Word] = []
    start_line = 0
    orphan_from: int | None = None
    pending = ""
    array: tuple[str, bool, str, list[Word]] | None = None  # an open ``NAME=(`` : name, +=, origin, its words
    for no, raw in enumerate(lines, 1):
        if array is not None or (not words and not pending and _ARRAY_START.match(raw)):
            array = _array_line(array, raw, no, where, variables)
            continue
        line = (pending + "\n" + raw) if pending else (raw if words else strip_prompt(raw))
        if words and not pending and line.lstrip().startswith("#"):
            # bash: a comment inside a continued command ends the command at this line
            continued = line.rstrip().endswith("\\")
            _end(found, words, variables, where, start_line)
            words = []
            if continued:
                orphan_from = no + 1
            continue
        continued = line.rstrip().endswith("\\") and not line.rstrip().endswith("\\\\")
        body = line.rstrip()[:-1] if continued else line
        body = _MID_BACKSLASH.sub(" ", body)
        try:
            toks = _tokens(body, variables, _where(where, no))
        except ValueError:
            if no < len(lines):
                pending = line
                continue
            toks = _closed(body, variables, _where(where, no), found, line)
        pending = ""
        if not words:
            start_line = no
        if orphan_from is not None:
            if toks:
                found.problems.append((body.strip(), "after the comment on the line before, the shell starts a new "
                                       "command here, so sglang never got these words", _where(where, no)))
            if not continued:
                orphan_from = None
            continue
        for tok in toks:
            if tok.text in _SEPARATORS:
                _end(found, words, variables, where, start_line)
                words = []
                start_line = no
            else:
                words.append(tok)
        if not continued:
            _end(found, words, variables, where, start_line)
            words = []
    _end(found, words, variables, where, start_line)
    if found.commands and found.commands[-1].words:
        found.commands[-1].words[-1].end_of_text = True
    return found


def _array_line(array, raw: str, no: int, where: str, variables: dict):
    """One line of a bash array assignment (``ARGS=(`` ... ``)``, one or many lines): its words, expanded
    with the variables set so far; at the closing ``)`` the array is a variable (None: it is closed)."""
    body = raw
    if array is None:
        m = _ARRAY_START.match(raw)
        array = (m.group(1), bool(m.group(2)), _where(where, no), [])
        body = m.group(3)
    name, append, origin, items = array
    stripped = re.sub(r"(?<![\\$])#.*$", "", body).rstrip().removesuffix("\\").rstrip()
    closed = stripped.endswith(")")
    if closed:
        stripped = stripped[:-1]
    try:
        items += _tokens(stripped, variables, _where(where, no))
    except ValueError:
        items.append(Word(stripped.strip(), _where(where, no), unresolved=True, why="an unclosed quote in the array"))
    if not closed:
        return (name, append, origin, items)
    before = list(variables[f"{name}[@]"][0]) if append and f"{name}[@]" in variables else []
    variables[f"{name}[@]"] = (Array(before + items), origin)
    return None


def _closed(body: str, variables: dict, origin: str, found: Found, line: str) -> list[Word]:
    """A quote left open at the end of the text (a cut-off post): read as if it were closed there."""
    for quote in ("'", '"'):
        try:
            toks = _tokens(body + quote, variables, origin)
        except ValueError:
            continue
        found.problems.append((line.strip()[:120], f"a {quote} quote is never closed (the text is cut off?); "
                               "read as if it closed at the end", origin))
        return toks
    found.problems.append((line.strip()[:120], "an unclosed quote: the text is cut off here; not read", origin))
    return []


def _systemd_lines(lines: list[str], where: str, variables: dict, found: Found) -> list[str]:
    out, in_exec = [], False
    for no, line in enumerate(lines, 1):
        key, eq, value = line.strip().partition("=")
        if in_exec:
            out.append(line)
            in_exec = line.rstrip().endswith("\\")
            continue
        if eq and key.strip() == "ExecStart":
            out.append(value.lstrip("-@:+!"))
            in_exec = value.rstrip().endswith("\\")
        elif eq and key.strip() == "Environment":
            for item in shlex.split(value):
                k, sep, v = item.partition("=")
                if sep:
                    variables[k] = (v, _where(where, no))
                    found.exported.add(k)
            out.append("")
        elif eq and key.strip() == "EnvironmentFile":
            found.notes.append(f"environment from {value.strip()} ({_where(where, no)}) is not in the text")
            out.append("")
        else:
            out.append("")
    return out


def _end(found: Found, words: list[Word], variables: dict, where: str, line: int) -> None:
    if not words:
        return
    assigns = [_ASSIGN.match(w.text) for w in words]
    if words[0].text in ("export", "declare", "local", "readonly") or all(assigns):
        for w in words:
            m = _ASSIGN.match(w.text)
            if m:
                value = m.group(2)
                if w.unresolved:
                    value = Opaque(value)
                    value.why = w.why or ""
                variables[m.group(1)] = (value, w.origin)
                if words[0].text == "export":
                    found.exported.add(m.group(1))
        return
    notes = [f"`$@` at {w.origin}: the arguments given to the script are not in the text"
             for w in words if w.why == "$@"]
    kept = [w for w in words if w.why != "$@"]
    exported = {k: variables[k] for k in found.exported if k in variables}
    found.commands.append(Command(kept, notes=notes, env={k: v for k, (v, _) in exported.items()},
                                  env_origin={k: o for k, (_, o) in exported.items()}))


def _tokens(body: str, variables: dict, origin: str) -> list[Word]:
    """shlex words of one line, after ``$(...)`` and backticks were set aside, then expanded."""
    held: list[str] = []
    body = _hold_substitutions(body, held)
    body = _REDIRECT.sub(" ", body)
    lex = shlex.shlex(body, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[Word] = []
    for tok in lex:
        out += _expand(tok, origin, variables, held)
    return out


def _hold_substitutions(body: str, held: list[str]) -> str:
    out, i = [], 0
    while i < len(body):
        if body.startswith("$(", i) or (body[i] == "`" and "`" in body[i + 1:]):
            end = _match_close(body, i)
            held.append(body[i:end])
            out.append(f"\x01{len(held) - 1}\x01")
            i = end
            continue
        out.append(body[i])
        i += 1
    return "".join(out)


def _match_close(body: str, i: int) -> int:
    if body[i] == "`":
        j = body.find("`", i + 1)
        return len(body) if j < 0 else j + 1
    depth, j = 0, i + 1
    while j < len(body):
        if body[j] == "(":
            depth += 1
        elif body[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(body)


def _expand(tok: str, origin: str, variables: dict, held: list[str]) -> list[Word]:
    if tok in ("$@", "${@}", "$*", "${*}"):
        return [Word(tok, origin, unresolved=True, why="$@")]
    whole_array = _ARRAY_USE.fullmatch(tok)
    if whole_array:  # "${ARGS[@]}": the array's words, each from the line it was written on
        name = whole_array.group(1)
        if f"{name}[@]" not in variables:
            return [Word(tok, origin, unresolved=True, why=f"the array {name} is not set in the text")]
        items, at = variables[f"{name}[@]"]
        return [Word(w.text, f"{origin} via ${{{name}[@]}} ({w.origin})", w.unresolved, w.why) for w in items]
    via: list[str] = []
    why: list[str] = []
    whole = _VAR.fullmatch(tok)

    def var(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        if name is None:
            why.append(f"{m.group(0)} is an argument of the script, not in the text")
            return m.group(0)
        if name in variables and isinstance(variables[name][0], Opaque):
            why.append(f"${name} is set at {variables[name][1]} from {variables[name][0]}, which only the shell "
                       "computes")
            return m.group(0)
        if name in variables:
            value, where = variables[name]
            if m.group(2) and m.group(2).endswith("+"):
                value = m.group(3)
            via.append(f"${name} ({where})")
            return value
        if m.group(2) and m.group(2).lstrip(":") in "-=":
            via.append(f"${name} unset, its default")
            return m.group(3)
        why.append(f"${{{name}}} is a shell variable not set in the text")
        return m.group(0)

    text = _VAR.sub(var, tok) if "$" in tok else tok

    def subst(m: re.Match) -> str:
        inner = held[int(m.group(1))]
        number = _arithmetic(inner, variables)
        if number is not None:
            via.append(f"{inner} = {number}")
            return str(number)
        why.append(f"{inner} is a command substitution, run only by the shell")
        return inner

    text = _SUBST.sub(subst, text)
    where = origin + (" via " + ", ".join(via) if via else "")
    if why:
        return [Word(text, where, unresolved=True, why="; ".join(why))]
    if whole and via and re.search(r"\s", text.strip()):
        try:
            return [Word(t, where) for t in shlex.split(text)]
        except ValueError:
            pass
    return [Word(text, where)]


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arithmetic(inner: str, variables: dict) -> int | None:
    """``$(( A * B ))`` when every name is a known integer (shell arithmetic is integer)."""
    if not (inner.startswith("$((") and inner.endswith("))")):
        return None
    expr = inner[3:-2]
    expr = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", expr)

    def name(m: re.Match) -> str:
        value = variables.get(m.group(0), ("", ""))[0].strip()
        return value if re.fullmatch(r"-?\d+", value) else "_unknown_"

    expr = re.sub(r"[A-Za-z_]\w*", name, expr).replace("/", "//").replace("////", "//")
    try:
        return _eval(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, KeyError):
        return None


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    raise ValueError("not integer arithmetic")


# --------------------------------------------------------------------------- YAML


def yaml_launch_words(text: str, where: str = "") -> Found | None:
    """Commands of the containers in Kubernetes or compose YAML; None when it holds no container.
    Raises ValueError (with the parser's words) when it is not valid YAML."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{getattr(err, 'problem', None) or err}{at}") from None
    found = Found()
    prefix = f"{where}: " if where else ""
    for n, doc in enumerate(docs):
        root = f"doc{n}." if len(docs) > 1 else ""
        for path, container in _containers(doc, root.rstrip(".") or ""):
            _container(found, prefix, path, container)
    return found if (found.commands or found.loose_env) else None


def _containers(node: Any, path: str):
    if isinstance(node, dict):
        if ("image" in node or "command" in node or "args" in node or "entrypoint" in node) and \
                any(k in node for k in ("command", "args", "entrypoint")):
            yield path, node
            return
        for key, value in node.items():
            yield from _containers(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _containers(value, f"{path}[{i}]")


def _container(found: Found, prefix: str, path: str, c: dict) -> None:
    env: dict[str, tuple[str, str]] = {}
    raw_env = c.get("env", c.get("environment"))
    items = raw_env.items() if isinstance(raw_env, dict) else enumerate(raw_env or [])
    key = "env" if "env" in c else "environment"
    for i, item in items:
        at = f"{prefix}{path}.{key}[{i}]" if isinstance(i, int) else f"{prefix}{path}.{key}.{i}"
        if isinstance(item, dict) and "name" in item:
            if "value" in item:
                env[str(item["name"])] = (str(item["value"]), at)
            else:
                found.notes.append(f"{item['name']} ({at}) comes from valueFrom, not in the text")
        elif isinstance(i, str):
            env[i] = ("" if item is None else str(item).lower() if isinstance(item, bool) else str(item), at)
        elif isinstance(item, str) and "=" in item:
            k, _, v = item.partition("=")
            env[k] = (v, at)
    for i, src in enumerate(c.get("envFrom") or []):
        for kind in ("configMapRef", "secretRef"):
            if isinstance(src, dict) and isinstance(src.get(kind), dict):
                found.notes.append(f"environment from {kind[:-3]} {src[kind].get('name')!r} "
                                   f"({prefix}{path}.envFrom[{i}]) is not in the text")
    if c.get("env_file"):
        found.notes.append(f"environment from env_file {c['env_file']!r} ({prefix}{path}) is not in the text")
    words: list[Word] = []
    texts: list[str] = []
    for part in ("entrypoint", "command", "args"):
        value = c.get(part)
        if value is None:
            continue
        at = f"{prefix}{path}.{part}"
        if isinstance(value, str):
            texts.append(value)
            sub = shell_words(value, at, env={k: v for k, (v, _) in env.items()})
            found.problems += sub.problems
            for cmd in sub.commands:
                words += cmd.words
            continue
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            item = str(item)
            texts.append(item)
            words += _k8s_expand(item, f"{at}[{i}]", env)
    used = " ".join(texts)
    for name, (value, at) in env.items():
        if value.lstrip().startswith("--") and not re.search(rf"\$\(?\{{?{re.escape(name)}\b", used):
            found.loose_env.append(Word(value, f"{at} ({name})"))
    if words:
        found.commands.append(Command(words, env={k: v for k, (v, _) in env.items()},
                                      env_origin={k: o for k, (_, o) in env.items()}))


def _k8s_expand(item: str, at: str, env: dict[str, tuple[str, str]]) -> list[Word]:
    """Kubernetes replaces ``$(VAR)`` in command and args by the container's env (``$$`` escapes)."""
    via = []

    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name in env:
            via.append(f"$({name}) ({env[name][1]})")
            return env[name][0]
        return m.group(0)

    text = re.sub(r"(?<!\$)\$\(([A-Za-z_]\w*)\)", sub, item)
    origin = at + (" via " + ", ".join(via) if via else "")
    if via and text.strip().startswith("--") and " " in text.strip():
        return [Word(t, origin) for t in shlex.split(text)]
    if re.search(r"\$\{?[A-Za-z_]", text) and "\n" not in text and " " not in text.strip():
        return [Word(text, origin, unresolved=True, why=f"{text} is not set in the container's env")]
    return [Word(text, origin)]
