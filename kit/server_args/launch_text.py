"""Launch evidence as people paste it, read one flag at a time, each flag with where it came from.

``read_launch_text(text, flags)`` takes a shell script or command line (backslash-newline
continuations, comments, ``exec``, ``"$@"``, ``${VARS}``, ``$(...)``), ``docker run``, a
compose file, Kubernetes pod / deployment / LeaderWorkerSet / RoleBasedGroup YAML
(``command``, ``args``, ``env``, ``envFrom``), a systemd unit, a wrapper or benchmark script
that starts sglang, ``python -m sglang.launch_server``, ``sglang serve`` and
``sgl.Engine(...)`` keyword arguments, or an argv list (``/proc/PID/cmdline``).

Every flag is parsed on its own. A value that cannot be read (``--port ${PORT}``, a command
cut off at ``--crash-``, a value that is not a valid int) becomes a ``LaunchProblem`` naming
the flag and the text, and the other flags are kept. Each ``LaunchFlag`` has an ``origin``:
the script line, the YAML path, or the variable whose expansion produced it. Without a flag
table (no sglang source at hand) the flags are read by their shape, values untyped.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kit._secrets import mask_fields
from kit.errors import KitError, ParseError

from .command import _looks_like_option, _store
from .flags import FlagTable
from .launch_sources import Word, shell_words, yaml_launch_words
from .markdown import strip_markdown

__all__ = ["LaunchFlag", "LaunchProblem", "LaunchRead", "LaunchText", "read_launch_text"]

# Modules that build ServerArgs from their command line (their own flags are not sglang's).
# (sglang.bench_serving is a client: it starts no server.)
_BENCH_MODULES = ("sglang.bench_one_batch", "sglang.bench_offline_throughput", "sglang.bench_one_batch_server")
_CALL = re.compile(r"(?<![\w.])(?:[\w.]*\.)?(Engine|ServerArgs|Runtime)\s*\(")


@dataclass
class LaunchFlag:
    option: str  # as written: --tp-size, --tp, tp_size= (Engine keyword)
    field: str | None  # the ServerArgs field (None: not known to the flag table)
    value: Any
    text: str | None  # the value as written (None for a switch)
    origin: str
    typed: bool = True  # False when read without a flag table

    def to_dict(self) -> dict:
        return {"option": self.option, "field": self.field, "value": self.value, "text": self.text,
                "origin": self.origin, "typed": self.typed}


@dataclass
class LaunchProblem:
    flag: str | None
    text: str
    why: str
    origin: str

    def __str__(self) -> str:
        head = f"{self.flag}: " if self.flag else ""
        return f"{head}{self.why} ({self.text!r} at {self.origin})"


@dataclass
class LaunchRead:
    """One sglang launch found in the text."""

    launcher: str  # "python -m sglang.launch_server", "sglang serve", "sgl.Engine", "flags", ...
    origin: str
    flags: list[LaunchFlag] = field(default_factory=list)
    problems: list[LaunchProblem] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_origin: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # fields set, value not readable
    ignored: list[str] = field(default_factory=list)  # a wrapper's own flags
    head: list[str] = field(default_factory=list)  # the words before the first flag (interpreter, launcher)
    argv: list[str] = field(default_factory=list)  # the flags as written, unreadable values included

    @property
    def readable_argv(self) -> list[str]:
        """The flags that were read, as argv (for sglang's own parser or the dry-run)."""
        return [tok for f in self.flags for tok in _as_argv(f)]

    @property
    def command(self) -> list[str]:
        """The launch as argv: its head and its flags as written."""
        return [*self.head, *self.argv]

    @property
    def explicit(self) -> dict[str, Any]:
        """Field -> value for every flag read (the last one wins, as with argparse); a secret flag's value
        masked (kit/_secrets.py: the kit never needs it; ``readable_argv`` keeps it for sglang's own parser)."""
        out: dict[str, Any] = {}
        for flag in self.flags:
            if flag.field is not None:
                out[flag.field] = flag.value
        return mask_fields(out)

    def to_dict(self) -> dict:
        return {"launcher": self.launcher, "origin": self.origin, "flags": [f.to_dict() for f in self.flags],
                "problems": [str(p) for p in self.problems], "env": dict(self.env), "notes": list(self.notes),
                "unreadable": list(self.unreadable), "ignored": list(self.ignored)}


@dataclass
class LaunchText:
    form: str  # "shell", "yaml", "systemd", "python", "argv"
    launches: list[LaunchRead] = field(default_factory=list)
    problems: list[LaunchProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def primary(self) -> LaunchRead | None:
        """The launch with the most flags (the first among equals)."""
        return max(self.launches, key=lambda r: len(r.flags), default=None)

    def all_problems(self) -> list[LaunchProblem]:
        return [*self.problems, *(p for r in self.launches for p in r.problems)]

    def to_dict(self) -> dict:
        return {"form": self.form, "launches": [r.to_dict() for r in self.launches],
                "problems": [str(p) for p in self.problems], "notes": list(self.notes)}


def read_launch_text(text: str | Iterable[str], flags: FlagTable | None = None, *, where: str = "",
                     first_line: int = 1) -> LaunchText:
    """Every sglang launch in ``text`` (or in an argv list), read flag by flag. ``where`` names the
    file in origins; ``first_line`` is the line of ``where`` that ``text`` starts at (a paste's piece)."""
    if not isinstance(text, str):
        argv = list(text)
        words = [Word(tok, f"{where or 'argv'}[{i}]") for i, tok in enumerate(argv)]
        out = LaunchText("argv")
        _launches_in([words], flags, out, {}, {})
        _nothing_found(out, where)
        return out
    clean = "\n" * max(0, first_line - 1) + strip_markdown(text)
    form = _form(clean)
    out = LaunchText(form)
    if form == "python":
        _engine_calls(clean, flags, out, where)
    else:
        if form == "yaml":
            try:
                found = yaml_launch_words(clean, where)
            except ValueError as err:
                found = None
                out.problems.append(LaunchProblem(None, "", f"not valid YAML ({err}); read line by line as shell "
                                                  "text instead", where or "the text"))
            if found is None:
                out.form = form = "shell"
        if form != "yaml":
            found = shell_words(clean, where, systemd=form == "systemd")
        for command in found.commands:
            _launches_in([command.words], flags, out, command.env, command.env_origin, notes=command.notes)
        out.notes += found.notes
        out.problems += [LaunchProblem(None, t, why, o) for t, why, o in found.problems]
        if found.loose_env:
            _loose_env_flags(found.loose_env, flags, out)
    _nothing_found(out, where)
    return out


def _nothing_found(out: LaunchText, where: str) -> None:
    if not out.launches:
        out.problems.append(LaunchProblem(None, "", "no sglang launch in it: no `-m sglang.launch_server`, "
                                          "`sglang serve`, `Engine(...)` or bare sglang flags", where or "the text"))


def _form(text: str) -> str:
    body = "\n".join(line for line in text.split("\n") if line.strip() and not line.lstrip().startswith("#"))
    if re.search(r"^\[(?:Service|Unit)\]\s*$|^\s*ExecStart\s*=", body, re.M):
        return "systemd"
    if _CALL.search(body) and not re.search(r"sglang[. ](?:launch_server|serve)\b", body):
        return "python"
    if re.search(r"^\s*(?:apiVersion|kind|services|spec|containers)\s*:", body, re.M) or \
            re.search(r"^\s*-?\s*(?:command|args|image)\s*:", body, re.M):
        return "yaml"
    return "shell"


# --------------------------------------------------------------------------- launches in word lists


def _launches_in(commands: list[list[Word]], flags: FlagTable | None, out: LaunchText, env: dict, env_origin: dict,
                 notes: list[str] | None = None, depth: int = 0) -> None:
    for words in commands:
        nested = [w for w in words if "\n" in w.text or re.search(r"sglang[. ](?:launch_server|serve)|launch_server\.py",
                                                                    w.text) and " " in w.text]
        if nested and not _launcher_at(words) and depth < 4:
            for w in nested:  # `bash -c "python -m sglang.launch_server ..."`, `args: ["python3 -m ..."]`
                inner = shell_words(w.text, w.origin, env=env)
                for command in inner.commands:
                    _launches_in([command.words], flags, out, {**env, **command.env},
                                 {**env_origin, **command.env_origin}, notes=[*(notes or []), *command.notes],
                                 depth=depth + 1)
                out.problems += [LaunchProblem(None, t, why, o) for t, why, o in inner.problems]
            continue
        hit = _launcher_at(words)
        if hit is None:
            if not (words and words[0].text.startswith("--") and _known(flags, words[0].text)):
                continue
            hit = (0, "flags")
        start, launcher = hit
        read = LaunchRead(launcher, words[start - 1].origin if start else words[0].origin, notes=list(notes or []))
        read.env.update(env)  # the environment the text gives the process (exported, YAML env, Environment=)
        read.env_origin.update(env_origin)
        _docker_env(words[:start], read)
        read.head = [w.text for w in words[:start]]
        rest = words[start:]
        if launcher == "sglang serve" and rest and not rest[0].text.startswith("-"):
            # `sglang serve MODEL --flags`: sglang/cli/serve.py turns a first word that is no flag into --model-path
            rest = [Word("--model-path", rest[0].origin), *rest]
            read.notes.append(f"`sglang serve {rest[1].text}` at {rest[1].origin}: the model given without a flag is "
                              "its --model-path (sglang serve reads it so)")
        _read_flags(rest, flags, read, bench=launcher.startswith("python -m sglang.bench"))
        for f in read.flags:
            if f.field == "config" and f.text:
                read.problems.append(LaunchProblem(f.option, f.text, "its flags are not in the text (sglang puts the "
                                                   "file's options before the command line's, which win): give the "
                                                   "file too", f.origin))
        if launcher == "sglang serve" and not _has_serve(flags):
            read.problems.append(LaunchProblem(None, "sglang serve", f"sglang {flags.version} has no `sglang serve` "
                                               "(no sglang/cli/serve.py): this launch did not run with that "
                                               "version; its flags are read with that version's table anyway",
                                               read.origin))
        out.launches.append(read)


def _has_serve(flags: FlagTable | None) -> bool:
    """Whether the flag table's sglang has `sglang serve` (sglang/cli/serve.py); True when it cannot tell."""
    tree = getattr(flags, "tree", None)
    if tree is None or not hasattr(tree, "read_text"):
        return True
    try:
        tree.read_text("cli/serve.py")
        return True
    except KitError:
        return False


def _known(flags: FlagTable | None, tok: str) -> bool:
    """Whether a command's first word is an sglang flag (any ``--word`` without a flag table)."""
    if flags is None:
        return True
    try:
        return flags.match(tok) is not None
    except ParseError:
        return False


def _launcher_at(words: list[Word]) -> tuple[int, str] | None:
    """(index of the first sglang flag, the launcher) for the first sglang launch in ``words``."""
    texts = [w.text for w in words]
    for j, tok in enumerate(texts):
        nxt = texts[j + 1: j + 3]
        module = nxt[0] if tok == "-m" and nxt else (tok[2:] if tok.startswith("-m") and len(tok) > 2 else None)
        skip = 2 if tok == "-m" else 1
        if module is not None:
            if module.endswith("launch_server"):
                return j + skip, "python -m sglang.launch_server"
            if module in _BENCH_MODULES:
                return j + skip, f"python -m {module}"
            if module in ("sglang", "sglang.cli.main") and texts[j + skip: j + skip + 1] == ["serve"]:
                return j + skip + 1, "sglang serve"
        if tok.rsplit("/", 1)[-1] == "sglang" and nxt[:1] == ["serve"]:
            return j + 2, "sglang serve"
        if tok.rsplit("/", 1)[-1] == "launch_server.py":
            return j + 1, "launch_server.py"
    return None


def _docker_env(words: list[Word], read: LaunchRead) -> None:
    """``-e K=V`` / ``--env K=V`` / ``K=V`` before the launcher: the server's environment."""
    i = 0
    while i < len(words):
        tok = words[i].text
        item = None
        if tok in ("-e", "--env") and i + 1 < len(words):
            item, i = words[i + 1], i + 1
        elif tok.startswith(("--env=", "-e=")):
            item = Word(tok.partition("=")[2], words[i].origin)
        elif re.match(r"^[A-Za-z_]\w*=", tok):
            item = words[i]
        elif tok == "--env-file" and i + 1 < len(words):
            read.notes.append(f"environment from {words[i + 1].text} ({words[i + 1].origin}) is not in the text")
        if item is not None:
            key, _, value = item.text.partition("=")
            read.env[key], read.env_origin[key] = value, item.origin
        i += 1


def _read_flags(words: list[Word], flags: FlagTable | None, read: LaunchRead, *, bench: bool = False) -> None:
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        tok = w.text
        if tok == "--":
            break
        if tok == "serve" and i == 0:
            i += 1
            continue
        if not _is_option(tok, flags):
            read.problems.append(LaunchProblem(None, tok, "a value where a flag was expected; skipped", w.origin))
            i += 1
            continue
        nxt = _one_flag(words, i, flags, read, bench) if flags is not None else _one_untyped(words, i, read)
        if not (read.problems and read.problems[-1].why.startswith("cut off") and read.problems[-1].origin == w.origin):
            read.argv += [x.text for x in words[i:nxt]]
        i = nxt


def _is_option(tok: str, flags: FlagTable | None) -> bool:
    if flags is not None:
        return _looks_like_option(tok, flags)
    return tok.startswith("-") and len(tok) > 1 and not re.match(r"^-\d", tok) and " " not in tok


def _values_after(words: list[Word], i: int, flags: FlagTable | None, most: float) -> list[Word]:
    out = []
    while i < len(words) and len(out) < most and not _is_option(words[i].text, flags):
        out.append(words[i])
        i += 1
    return out


def _one_untyped(words: list[Word], i: int, read: LaunchRead) -> int:
    w = words[i]
    head, eq, value = w.text.partition("=")
    name = head.lstrip("-").replace("-", "_")
    if head.endswith("-") and not eq:
        read.problems.append(LaunchProblem(head, w.text, "cut off: the text ends inside a flag; not read", w.origin))
        return i + 1
    if eq:
        vals = [Word(value, w.origin)]
        nxt = i + 1
    else:
        vals = _values_after(words, i + 1, None, float("inf"))
        nxt = i + 1 + len(vals)
    if any(v.unresolved for v in vals):
        _unresolved(read, head, vals, name)
        return nxt
    texts = [v.text for v in vals]
    value_out: Any = True if not texts else (texts[0] if len(texts) == 1 else texts)
    read.flags.append(LaunchFlag(head, name, value_out, " ".join(texts) or None, _origin(w, vals), typed=False))
    return nxt


def _one_flag(words: list[Word], i: int, flags: FlagTable, read: LaunchRead, bench: bool) -> int:
    w = words[i]
    last = i == len(words) - 1
    try:
        hit = flags.match(w.text)
    except ParseError as err:
        why = (f"cut off: the text ends inside a flag ({err.message.partition(': ')[2]}); not read"
               if w.end_of_text else f"{err.message}; skipped")
        read.problems.append(LaunchProblem(w.text, w.text, why, w.origin))
        return i + 1 + len(_values_after(words, i + 1, flags, float("inf")))
    head = w.text.partition("=")[0]
    if hit is None:
        skipped = _values_after(words, i + 1, flags, float("inf"))
        if bench:
            read.ignored.append(w.text)
        else:
            cut = " (the text ends here: cut off?)" if last else ""
            read.problems.append(LaunchProblem(w.text, w.text, f"not a flag of sglang {flags.version or '?'}{cut}; "
                                               "skipped", w.origin))
        return i + 1 + len(skipped)
    spec, opt, explicit = hit
    if opt != head and (last or head.endswith("-")) and w.end_of_text:
        read.problems.append(LaunchProblem(w.text, w.text, f"cut off: the text ends inside a flag (it could be "
                                           f"{opt} or another flag starting so); not read", w.origin))
        return i + 1
    fewest, most = spec.arity
    if explicit is not None:
        vals, nxt = [Word(explicit, w.origin, unresolved=w.unresolved)], i + 1
        if most == 0:
            read.problems.append(LaunchProblem(opt, w.text, f"{opt} takes no value", w.origin))
            return nxt
    else:
        vals = _values_after(words, i + 1, flags, most)
        nxt = i + 1 + len(vals)
    if len(vals) < fewest:
        end = " and the text ends here (cut off?)" if nxt >= len(words) else ""
        read.problems.append(LaunchProblem(opt, w.text, f"expects {'a value' if fewest == 1 else f'{fewest}+ values'}"
                                           f"{end}; not read", w.origin))
        return nxt
    if any(v.unresolved for v in vals):
        _unresolved(read, opt, vals, spec.field)
        return nxt
    one: dict[str, Any] = {}
    if spec.field in read.explicit and spec.kind in ("append", "extend", "count", "append_const"):
        one[spec.field] = read.explicit[spec.field]
    try:
        _store(spec, opt, [v.text for v in vals], one, 0)
    except ParseError as err:
        read.problems.append(LaunchProblem(opt, " ".join(v.text for v in vals), err.message.partition(": ")[2]
                                           or err.message, _origin(w, vals)))
        return nxt
    if spec.kind in ("ignore", "help", "version"):
        return nxt
    text = " ".join(v.text for v in vals) or None
    read.flags.append(LaunchFlag(opt, spec.field, one.get(spec.field), text, _origin(w, vals)))
    return nxt


def _unresolved(read: LaunchRead, opt: str, vals: list[Word], name: str | None) -> None:
    text = " ".join(v.text for v in vals)
    why = next((v.why for v in vals if v.why), "a shell expression whose value is not in the text")
    read.problems.append(LaunchProblem(opt, text, f"value not readable: {why}; the flag is set, its value unknown",
                                       _origin(None, vals)))
    if name and name not in read.unreadable:
        read.unreadable.append(name)


def _origin(w: Word | None, vals: list[Word]) -> str:
    seen: list[str] = []
    for origin in [*([w.origin] if w else []), *(v.origin for v in vals)]:
        if seen and origin.startswith(seen[-1]):
            seen[-1] = origin
        elif origin not in seen:
            seen.append(origin)
    return ", ".join(seen)


def _as_argv(flag: LaunchFlag) -> list[str]:
    if flag.text is None:
        return [flag.option]
    if flag.option.endswith("="):
        return []
    return [flag.option, *shlex.split(flag.text)] if " " in flag.text and not flag.text.lstrip().startswith(("{", "[")) \
        else [flag.option, flag.text]


# --------------------------------------------------------------------------- env carrying flags


def _loose_env_flags(loose: list[Word], flags: FlagTable | None, out: LaunchText) -> None:
    """Variables such as EXTRA_ARGS that hold flags but no command mentions: read them as flags
    the image's entrypoint passes on (their origin says so)."""
    target = out.primary
    for word in loose:
        inner = shell_words(word.text, word.origin)
        for command in inner.commands:
            read = LaunchRead("flags", word.origin)
            _read_flags(command.words, flags, read)
            if not read.flags:
                continue
            for f in read.flags:
                f.origin += " (no command in the text uses this variable: read as passed on by the image's entrypoint)"
            if target is None:
                out.launches.append(read)
                target = read
            else:
                target.flags += read.flags
                target.problems += read.problems
                target.unreadable += read.unreadable
                target.argv += read.argv


# --------------------------------------------------------------------------- sgl.Engine(...)


def _engine_calls(text: str, flags: FlagTable | None, out: LaunchText, where: str) -> None:
    for m in _CALL.finditer(text):
        end = _closing(text, m.end() - 1)
        line = text.count("\n", 0, m.start()) + 1
        origin = f"{where + ':' if where else 'line '}{line}"
        call_text = text[m.start(): end if end is not None else len(text)]
        read = LaunchRead(f"sgl.{m.group(1)}", origin)
        try:
            call = ast.parse("_(" + call_text[call_text.index("(") + 1:] + ("" if end is not None else ")"),
                             mode="eval").body
        except SyntaxError:
            read.problems.append(LaunchProblem(None, call_text[:80], "the call is cut off or not Python; its "
                                               "keyword arguments were not read", origin))
            out.launches.append(read)
            continue
        for kw in getattr(call, "keywords", []):
            kw_line = line + kw.value.lineno - 1
            kw_origin = f"{where + ':' if where else 'line '}{kw_line}"
            source = ast.get_source_segment("_(" + call_text[call_text.index("(") + 1:], kw.value) or ""
            if kw.arg is None:
                read.problems.append(LaunchProblem("**", source, "keyword arguments from a dict are not read", kw_origin))
                continue
            known = flags is None or flags.get(kw.arg) is not None
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                read.problems.append(LaunchProblem(kw.arg, source, "not a literal (a variable or an expression whose "
                                                   "value is not in the text); the field is set, its value unknown",
                                                   kw_origin))
                read.unreadable.append(kw.arg)
                continue
            if not known:
                read.problems.append(LaunchProblem(kw.arg, source, f"not a ServerArgs field of sglang "
                                                   f"{flags.version or '?'}", kw_origin))
                continue
            read.flags.append(LaunchFlag(f"{kw.arg}=", kw.arg, value, source, kw_origin, typed=flags is not None))
        out.launches.append(read)


def _closing(text: str, at: int) -> int | None:
    depth, quote, i = 0, None, at
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = None
        elif ch in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else ch
            i += len(quote) - 1
        elif ch == "#":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
            continue
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None
