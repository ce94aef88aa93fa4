"""SGLang's own source on a host: `sed -n 'A,Bp'`-style reads, grep, functions by name.

During an incident the question is rarely "what does line 1229 say" but "what does
the code that set this flag say, in the version that is actually installed on that
box". Line numbers move between releases, so everything here finds code by name
(`ast`) or by pattern (`grep` on the host) and reports the line numbers it found.

Every command sent to a host is an argv list (no shell), except the two snapshot
pipelines (find | tar, find | sha256sum), where the directory names pass through
`shlex.quote`.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import html
import json
import os
import posixpath
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kit.errors import (
    CommandFailed,
    LineRangeError,
    PackageNotFound,
    ParseError,
    RemoteFileError,
    SourceError,
    SourceFileNotFound,
    SymbolNotFound,
)

if TYPE_CHECKING:
    from kit.hosts import Host

__all__ = [
    "AmbiguousSymbol",
    "GrepMatch",
    "GrepResult",
    "SnapshotInfo",
    "SourceInputError",
    "SourceSnippet",
    "SourceTree",
    "cache_dir",
    "install_package_source",
]


class SourceInputError(SourceError, ValueError):
    """A path, pattern or name given to a SourceTree is unusable (e.g. escapes the package root)."""


class AmbiguousSymbol(SourceError):
    """A qualified name matches definitions in more than one file."""


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_QUALNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DIST_META = ("METADATA", "WHEEL", "top_level.txt", "entry_points.txt")
_MAX_CANDIDATES = 40  # files to parse when looking a name up; more means the name is too vague


def cache_dir() -> Path:
    """The kit's cache: `$SGL_KIT_CACHE`, else `~/.cache/sglang-investigation-kit`."""
    env = os.environ.get("SGL_KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sglang-investigation-kit"


def _norm_dist(name: str) -> str:
    # PEP 503 normalisation, with "_" because that is what dist-info and wheel names use.
    return re.sub(r"[-_.]+", "_", name).lower()


def _split_lines(text: str) -> list[str]:
    # Split on "\n" only, as sed and ast do; str.splitlines() also splits on \x0c etc.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [_chomp(line) for line in lines]


def _chomp(line: str) -> str:
    # One trailing "\r" (a CRLF file) is line ending, not content; hosts may or may not strip it.
    return line[:-1] if line.endswith("\r") else line


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --------------------------------------------------------------------------- snippets


@dataclass
class SourceSnippet:
    """Lines `start..end` (1-based, inclusive) of one file in a package, with optional marks."""

    path: str
    start: int
    end: int
    lines: list[str]
    total_lines: int
    host: str = "local"
    version: str | None = None
    qualname: str | None = None
    marks: dict[int, str] = field(default_factory=dict)
    package: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def line(self, lineno: int) -> str:
        self._check_lineno(lineno)
        return self.lines[lineno - self.start]

    def mark(self, lineno: int, label: str = "") -> SourceSnippet:
        """Flag a line (e.g. "rule 8: multimodal"); returns self so calls chain."""
        self._check_lineno(lineno)
        self.marks[lineno] = label
        return self

    def mark_spans(self) -> list[tuple[str, str]]:
        """Marks as ("1228-1230", label), consecutive lines with one label joined."""
        spans: list[list] = []
        for n, label in sorted(self.marks.items()):
            if spans and spans[-1][1] == n - 1 and spans[-1][2] == label:
                spans[-1][1] = n
            else:
                spans.append([n, n, label])
        return [(f"{a}-{b}" if a != b else f"{a}", label) for a, b, label in spans]

    def find(self, pattern: str, flags: int = 0) -> list[int]:
        """Line numbers whose text matches the regex, so marks never hard-code a line."""
        rx = re.compile(pattern, flags)
        return [n for n, text in enumerate(self.lines, self.start) if rx.search(text)]

    def _check_lineno(self, lineno: int) -> None:
        if not isinstance(lineno, int) or not self.start <= lineno <= self.end:
            raise LineRangeError(
                f"line {lineno!r} is not in {self.path}:{self.start}-{self.end}",
                hint="use snippet.find(regex) to get line numbers inside the snippet",
            )

    def _where(self) -> str:
        who = " ".join(x for x in (self.package, self.version) if x)
        return f"{self.path}:{self.start}-{self.end}" + (f" {who}" if who else "") + f" @ {self.host}"

    def __repr__(self) -> str:
        name = f"{self.qualname} " if self.qualname else ""
        return f"<SourceSnippet {name}{self._where()}>"

    def __str__(self) -> str:
        width = len(str(max(self.end, 1)))
        out = []
        for n, text in enumerate(self.lines, self.start):
            label = self.marks.get(n)
            flag = ">" if label is not None else " "
            tail = f"    <-- {label}" if label else ""
            out.append(f"{flag} {n:>{width}} | {text}{tail}")
        return "\n".join(out)

    def __rich__(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.syntax import Syntax
        from rich.text import Text

        lexer = Syntax.guess_lexer(self.path, self.text)
        syntax = Syntax(
            self.text, lexer, line_numbers=True, start_line=self.start, highlight_lines=set(self.marks)
        )
        body = syntax
        if self.marks:
            notes = Text("\n".join(f"> {span}: {label}" for span, label in self.mark_spans()))
            body = Group(syntax, notes)
        return Panel(body, title=Text(repr(self)[1:-1]), title_align="left")

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import TextLexer, get_lexer_for_filename
        from pygments.util import ClassNotFound

        try:
            lexer = get_lexer_for_filename(self.path, stripnl=False, ensurenl=True)
        except ClassNotFound:
            lexer = TextLexer(stripnl=False, ensurenl=True)
        # Inline styles (noclasses) so the colours survive notebook export and redaction.
        fmt = HtmlFormatter(
            linenos="inline",
            linenostart=self.start,
            hl_lines=[n - self.start + 1 for n in self.marks],
            noclasses=True,
        )
        code = highlight(self.text + "\n", lexer, fmt)
        notes = "".join(
            f"<li><code>{span}</code>: {html.escape(label)}</li>" for span, label in self.mark_spans()
        )
        head = f"<div style='font-family:monospace'><b>{html.escape(repr(self)[1:-1])}</b></div>"
        return head + code + (f"<ul>{notes}</ul>" if notes else "")


# --------------------------------------------------------------------------- grep


@dataclass(frozen=True)
class GrepMatch:
    path: str  # relative to the package root
    line: int
    text: str

    def __repr__(self) -> str:
        return f"<GrepMatch {self.path}:{self.line} {_shorten(self.text.strip(), 60)!r}>"


@dataclass
class GrepResult:
    """Matches of one grep over a package; iterable like a list of GrepMatch."""

    pattern: str
    matches: list[GrepMatch]
    host: str
    root: str
    truncated: bool = False
    errors: str = ""  # grep's stderr when it exited 2 but still found matches

    def __len__(self) -> int:
        return len(self.matches)

    def __iter__(self) -> Iterator[GrepMatch]:
        return iter(self.matches)

    def __getitem__(self, i):
        return self.matches[i]

    def __bool__(self) -> bool:
        return bool(self.matches)

    @property
    def files(self) -> list[str]:
        return sorted({m.path for m in self.matches})

    def in_file(self, path: str) -> list[GrepMatch]:
        return [m for m in self.matches if m.path == path]

    def __repr__(self) -> str:
        more = " (truncated)" if self.truncated else ""
        return (
            f"<GrepResult {self.pattern!r}: {len(self.matches)} matches in {len(self.files)} files"
            f"{more} @ {self.host}>"
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{html.escape(m.path)}:{m.line}</code></td>"
            f"<td><code>{html.escape(_shorten(m.text, 200))}</code></td></tr>"
            for m in self.matches
        )
        head = html.escape(repr(self)[1:-1])
        return f"<div><b>{head}</b><table>{rows}</table></div>"


def _parse_grep(data: bytes, root: str, host: str) -> list[GrepMatch]:
    """Parse `grep -rnZ` output: `path NUL lineno ':' text '\\n'`.

    Reading record by record (NUL, then ':', then newline) stays correct for file
    names containing ':' or even newlines, which a split on lines would not.
    """
    prefix = root.rstrip("/") + "/"
    out, pos = [], 0
    while pos < len(data):
        nul = data.find(b"\0", pos)
        colon = data.find(b":", nul + 1) if nul >= 0 else -1
        if colon < 0:
            raise ParseError(f"unexpected grep output on {host}: {data[pos : pos + 80]!r}", position=pos)
        eol = data.find(b"\n", colon + 1)
        eol = len(data) if eol < 0 else eol
        path = data[pos:nul].decode("utf-8", "replace")
        lineno = data[nul + 1 : colon]
        if not lineno.isdigit():
            raise ParseError(f"grep output on {host} has no line number at {path!r}", position=nul)
        rel = path[len(prefix) :] if path.startswith(prefix) else path
        text = _chomp(data[colon + 1 : eol].decode("utf-8", "replace"))
        out.append(GrepMatch(rel, int(lineno), text))
        pos = eol + 1
    return out


# --------------------------------------------------------------------------- functions by name


@dataclass(frozen=True)
class _Def:
    qualname: str
    start: int  # first decorator line, else the def/class line
    end: int


def _definitions(text: str) -> list[_Def] | None:
    """Every def/class with its dotted name (nested functions joined with '.'); None if unparsable."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    out: list[_Def] = []
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, kinds):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append(_Def(prefix + child.name, start, child.end_lineno or child.lineno))
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _glob_regex(pattern: str) -> re.Pattern:
    """Translate a path glob (`**` spans directories, `*` does not) to a regex."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            close = pattern.index("]", i + 2)
            body = pattern[i + 1 : close].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


# --------------------------------------------------------------------------- locating a package

# Runs on the host's interpreter. find_spec of a top-level name does not import the
# package, so a broken or GPU-only install can still be located. Kept 3.6-compatible.
_LOCATE_SNIPPET = r"""
import glob, importlib.util, json, os, re, sys
name = sys.argv[1]
out = {"executable": sys.executable, "python": sys.version.split()[0], "sys_path": sys.path}
try:
    spec = importlib.util.find_spec(name)
except Exception as exc:
    spec, out["error"] = None, repr(exc)
locs = list((spec.submodule_search_locations or []) if spec else [])
if locs:
    pkg = os.path.abspath(locs[0])
    norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
    found = []
    for d in glob.glob(os.path.join(glob.escape(os.path.dirname(pkg)), "*.dist-info")):
        top = os.path.join(d, "top_level.txt")
        by_name = norm(os.path.basename(d).split("-")[0]) == norm(name)
        by_top = False
        if not by_name and os.path.isfile(top):
            with open(top, errors="replace") as f:
                by_top = name in f.read().split()
        if by_name or by_top:
            found.append((not by_name, -os.path.getmtime(d), d))
    version = dist = None
    if found:
        dist = sorted(found)[0][2]
        try:
            with open(os.path.join(dist, "METADATA"), errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break
                    if line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
        except OSError:
            pass
    if version is None:
        try:
            import importlib.metadata as md
            version = md.version(name)
        except Exception:
            pass
    out.update(found=True, package_dir=pkg, dist_info=dist, version=version)
else:
    out.update(found=False, is_module=bool(spec and spec.origin))
print("KIT-LOCATE " + json.dumps(out))
"""


def _interpreter_missing(res) -> bool:
    err = res.stderr.lower()
    return res.exited in (126, 127) or ("no such file" in err and "KIT-LOCATE" not in res.stdout)


def _no_interpreter(host: Host, python: str, detail: str) -> PackageNotFound:
    return PackageNotFound(
        f"could not run interpreter {python!r} on {host.name}: {_shorten(detail.strip(), 200)}",
        hint="pass the server's interpreter with --python PATH, or the package with --package-dir DIR",
    )


def _locate_payload(res, host: Host, python: str, package: str) -> dict:
    if _interpreter_missing(res):
        raise _no_interpreter(host, python, f"exit {res.exited}: {res.stderr}")
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("KIT-LOCATE "):
            return json.loads(line[len("KIT-LOCATE ") :])
    raise PackageNotFound(
        f"{python} on {host.name} did not answer the locate probe for {package!r} "
        f"(exit {res.exited}): {_shorten((res.stderr or res.stdout).strip(), 300)}",
        hint="pass --python PATH of the interpreter that runs sglang, or --package-dir DIR",
    )


def _not_found(info: dict, host: Host, python: str, package: str) -> PackageNotFound:
    paths = [p for p in info.get("sys_path", []) if p][:6]
    kind = "a module, not a package" if info.get("is_module") else "not importable"
    return PackageNotFound(
        f"{package!r} is {kind} by {python} ({info.get('executable')}, Python {info.get('python')}) "
        f"on {host.name}; its sys.path: {', '.join(paths)}",
        hint="pass the interpreter that runs the server with --python PATH "
        "(see /proc/PID/exe), or the package directory with --package-dir DIR",
    )


def _sibling_dist_info(host: Host, root: str, package: str) -> tuple[str | None, str | None]:
    """(dist-info path, version) from `<site>/<pkg>-<ver>.dist-info/METADATA` next to root."""
    parent = posixpath.dirname(root)
    res = host.run(
        ["find", parent, "-mindepth", "1", "-maxdepth", "1", "-type", "d", "-name", "*.dist-info"],
        timeout=30,
    )
    want = _norm_dist(package)
    names = [posixpath.basename(p) for p in res.stdout.splitlines()]
    hits = sorted((n for n in names if _norm_dist(n.split("-")[0]) == want), key=_natural_key)
    if not hits:
        return None, None
    dist = posixpath.join(parent, hits[-1])
    try:
        head, _ = host.read_lines(dist + "/METADATA", 1, 60)
    except RemoteFileError:
        return dist, None
    versions = [ln.split(":", 1)[1].strip() for ln in head if ln.startswith("Version:")]
    return dist, (versions[0] if versions else None)


def _natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# --------------------------------------------------------------------------- snapshots


@dataclass
class SnapshotInfo:
    """Where a snapshot came from, where it lives, and what it cost to make."""

    host: str
    root: str
    version: str | None
    path: str  # local directory holding <package>/ and its dist-info
    content_hash: str
    fingerprint: str | None
    files: int
    transferred_bytes: int
    warm: bool
    seconds: float

    def __repr__(self) -> str:
        how = "warm, nothing transferred" if self.warm else f"cold, {self.transferred_bytes:,} bytes"
        return f"<SnapshotInfo {self.version} from {self.host}: {self.files} files, {how}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self)[1:-1])}</code><br><small>{html.escape(self.path)}</small>"


def _load_index(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _save_index(path: Path, index: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "host"


def _check_member(m: tarfile.TarInfo, allowed: set[str]) -> None:
    name = m.name[2:] if m.name.startswith("./") else m.name
    parts = PurePosixPath(name).parts
    bad = (
        not (m.isfile() or m.isdir())
        or name.startswith("/")
        or ".." in parts
        or not parts
        or parts[0] not in allowed
    )
    if bad:
        raise SourceError(
            f"snapshot archive has an unexpected member {m.name!r} (type {m.type!r}); refusing to extract",
            hint="the remote tree may contain odd links; read it live with SourceTree.locate() instead",
        )


def _extract(tar_path: Path, dest: Path, allowed: set[str]) -> None:
    with tarfile.open(tar_path, "r:gz") as tf:
        members = tf.getmembers()
        for m in members:
            _check_member(m, allowed)
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover - Python without PEP 706; members were vetted above
            tf.extractall(dest, members=members)  # noqa: S202


def _content_hash(root: Path) -> tuple[str, int]:
    """sha256 over (relative path, sha256 of bytes) in sorted order: stable across tar runs."""
    h, n = hashlib.sha256(), 0
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(p.relative_to(root).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
        n += 1
    return h.hexdigest(), n


# --------------------------------------------------------------------------- the tree


class SourceTree:
    """A package's source directory on a host (`…/site-packages/sglang`)."""

    def __init__(
        self,
        host: Host,
        root: str,
        package: str,
        version: str | None = None,
        *,
        dist_info: str | None = None,
    ) -> None:
        self.host = host
        self.root = root.rstrip("/") or "/"
        self.package = package
        self.version = version
        self.dist_info = dist_info
        self.origin: SourceTree | None = None  # the remote tree a snapshot was taken from
        self.snapshot_info: SnapshotInfo | None = None

    # ---- construction

    @classmethod
    def locate(cls, host: Host, package: str = "sglang", python: str = "python3", timeout: float = 30):
        """Find `package` as `python` on `host` would import it, without importing it."""
        _check_package_name(package)
        try:
            res = host.run([python, "-c", _LOCATE_SNIPPET, package], timeout=timeout)
        except RemoteFileError as err:  # argv[0] could not be executed at all
            raise _no_interpreter(host, python, err.message) from err
        info = _locate_payload(res, host, python, package)
        if not info.get("found"):
            raise _not_found(info, host, python, package)
        return cls(host, info["package_dir"], package, info.get("version"), dist_info=info.get("dist_info"))

    @classmethod
    def at(cls, host: Host, package_dir: str, package: str | None = None) -> SourceTree:
        """An explicit package directory; the version comes from a sibling dist-info if present."""
        root = _absolute_dir(host, package_dir)
        package = package or posixpath.basename(root)
        try:
            st = host.stat(root)
        except RemoteFileError as err:
            raise PackageNotFound(
                f"package directory {root} does not exist on {host.name}",
                hint="find it with `python -c 'import sglang, os; print(os.path.dirname(sglang.__file__))'` "
                "on the host, or use SourceTree.locate(host, python=...)",
            ) from err
        if not st.is_dir:
            raise PackageNotFound(f"{root} on {host.name} is a file, not a package directory")
        if not host.exists(root + "/__init__.py"):
            raise _no_init(host, root, package)
        dist, version = _sibling_dist_info(host, root, package)
        return cls(host, root, package, version, dist_info=dist)

    # ---- paths

    def resolve(self, path: str) -> tuple[str, str]:
        """(path relative to root, absolute path on the host); rejects paths leaving the root.

        Accepts "srt/server_args.py", "sglang/srt/server_args.py" or an absolute path inside root.
        """
        if not isinstance(path, str) or not path or "\0" in path:
            raise SourceInputError(f"not a usable file path: {path!r}")
        if posixpath.isabs(path):
            norm = posixpath.normpath(path)
            if not norm.startswith(self.root.rstrip("/") + "/"):
                raise SourceInputError(f"{path!r} is outside the package root {self.root}")
            rel = norm[len(self.root.rstrip("/")) + 1 :]
        else:
            rel = posixpath.normpath(path)
            if rel == ".." or rel.startswith("../"):
                raise SourceInputError(f"{path!r} leaves the package root {self.root}")
            head, _, rest = rel.partition("/")
            rel = rest if head == self.package and rest else rel
        if rel in ("", "."):
            raise SourceInputError(f"{path!r} names the package directory, not a file in it")
        return rel, posixpath.join(self.root, rel)

    # ---- reading

    def read_text(self, path: str) -> str:
        rel, full = self.resolve(path)
        try:
            return self.host.read_text(full)
        except RemoteFileError as err:
            raise self._missing(rel, err) from err

    def read(self, path: str, start: int | None = None, end: int | None = None) -> SourceSnippet:
        """Lines start..end (1-based, inclusive, like `sed -n 'start,endp'`); only those lines travel.

        Lines are split on newlines only, as sed and `ast` count them; a trailing carriage
        return (CRLF files) is dropped.
        """
        rel, full = self.resolve(path)
        first = 1 if start is None else start
        _check_range(rel, first, end)
        lines, total = self._read_lines(rel, full, first, end)
        last = total if end is None else end
        if total == 0 and start is None and end is None:
            return self._snippet(rel, 1, 0, [], 0)
        if first > total or last > total:
            raise LineRangeError(
                f"{rel} has {total} lines on {self._label}; asked for lines {first}-{last}",
                hint=f"ask for lines within 1-{total}, or find code by name with tree.function(...)",
            )
        return self._snippet(rel, first, last, lines[: last - first + 1], total)

    def _read_lines(self, rel: str, full: str, first: int, end: int | None) -> tuple[list[str], int]:
        try:
            lines, total = self.host.read_lines(full, first, end)
            want = max(0, min(total, end or total) - first + 1)
            if len(lines) != want:
                # The host split on more than "\n" (form feeds, \x1c, \u2028 ...), so its
                # numbering disagrees with sed's and ast's; split the whole file ourselves.
                lines = _split_lines(self.host.read_text(full))[first - 1 : end]
        except RemoteFileError as err:
            raise self._missing(rel, err) from err
        return [_chomp(line) for line in lines], total

    def files(self, pattern: str = "**/*.py") -> list[str]:
        """Relative paths of regular files matching a glob (`**` spans directories), sorted.

        A pattern without '/' matches the file name anywhere in the tree, like `find -name`.
        """
        last = pattern.rsplit("/", 1)[-1]
        argv = ["find", self.root, "-type", "f"]
        if "**" not in last:
            argv += ["-name", last]  # cut the listing on the host; the regex below is exact
        res = self.host.run(argv + ["-print0"], timeout=120)
        if not res.ok and not res.stdout_bytes:
            raise CommandFailed(res, hint=f"is {self.root} readable on {self._label}?")
        rx = _glob_regex(pattern)
        prefix = self.root.rstrip("/") + "/"
        rels = [p.decode("utf-8", "replace")[len(prefix) :] for p in res.stdout_bytes.split(b"\0") if p]
        return sorted(r for r in rels if rx.match(r if "/" in pattern else posixpath.basename(r)))

    def grep(
        self,
        pattern: str,
        glob: str | None = "*.py",
        *,
        fixed: bool = False,
        ignore_case: bool = False,
        max_matches: int = 1000,
    ) -> GrepResult:
        """`grep -rn` on the host (ERE, or literal with fixed=True); paths relative to root."""
        _check_pattern(pattern, max_matches)
        res = self.host.run(self._grep_argv(pattern, glob, fixed, ignore_case, max_matches), timeout=180)
        if res.exited not in (0, 1) and not res.stdout_bytes:
            hint = "the pattern is an extended regex; pass fixed=True to search for literal text"
            raise CommandFailed(res, hint=hint)
        matches = sorted(
            _parse_grep(res.stdout_bytes, self.root, self._label), key=lambda m: (m.path, m.line)
        )
        errors = res.stderr.strip() if res.exited not in (0, 1) else ""
        return GrepResult(
            pattern, matches[:max_matches], self._label, self.root, len(matches) > max_matches, errors
        )

    def _grep_argv(self, pattern: str, glob: str | None, fixed: bool, ignore_case: bool, cap: int) -> list:
        # LC_ALL=C: bytes that are not UTF-8 would make grep call a source file binary and skip it.
        argv = ["env", "LC_ALL=C", "grep", "-r", "-n", "-I", "-Z", "-F" if fixed else "-E"]
        argv += ["-i"] if ignore_case else []
        argv += [f"--include={glob}"] if glob else []
        # -m is per file; cap+1 lets us tell "exactly cap" from "truncated".
        return argv + ["-m", str(cap + 1), "-e", pattern, "--", self.root]

    def function(self, qualname: str, path: str | None = None) -> SourceSnippet:
        """The def/class `qualname` (e.g. "ServerArgs._handle_piecewise_cuda_graph"), decorators included.

        Without `path`, a grep for `def NAME`/`class NAME` picks candidate files and only
        those are parsed. A unique suffix match (just "_handle_piecewise_cuda_graph") is accepted.
        """
        if not isinstance(qualname, str) or not _QUALNAME.match(qualname):
            raise SourceInputError(f"not a dotted Python name: {qualname!r}")
        rels = [self.resolve(path)[0]] if path else self._files_defining(qualname)
        texts = {rel: self.read_text(rel) for rel in rels}
        defs = {rel: _definitions(text) for rel, text in texts.items()}
        rel, found = self._pick(qualname, defs, path)
        lines = _split_lines(texts[rel])
        snippet = self._snippet(rel, found.start, found.end, lines[found.start - 1 : found.end], len(lines))
        snippet.qualname = found.qualname
        return snippet

    def _files_defining(self, qualname: str) -> list[str]:
        # `A.B.f` lives in a file that defines `A`; grepping for `f` alone would hit every
        # file with an `__init__`. Leading whitespace is allowed so `B.f` finds nested classes.
        outer = qualname.split(".")[0]
        rx = r"^[[:space:]]*((async[[:space:]]+)?def|class)[[:space:]]+" + outer + r"\b"
        files = self.grep(rx, "*.py", max_matches=100_000).files
        if len(files) > _MAX_CANDIDATES:
            raise AmbiguousSymbol(
                f"{outer} is defined in {len(files)} files under {self.root} on {self._label}",
                hint="qualify the name (Class.method) or pass path='…' to choose the file",
            )
        return files

    def _pick(self, qualname: str, defs: dict[str, list[_Def] | None], path: str | None) -> tuple[str, _Def]:
        every = [(rel, d) for rel, ds in sorted(defs.items()) for d in (ds or [])]
        exact = [(rel, d) for rel, d in every if d.qualname == qualname]
        if not exact:
            exact = [(rel, d) for rel, d in every if d.qualname.endswith("." + qualname)]
        where = sorted({f"{rel}:{d.start} ({d.qualname})" for rel, d in exact})
        if len({(rel, d.qualname) for rel, d in exact}) > 1:
            raise AmbiguousSymbol(
                f"{qualname} is defined in several places on {self._label}: {'; '.join(where)}",
                hint="pass the full dotted name, or path='…' to choose the file",
            )
        if not exact:
            raise self._symbol_not_found(qualname, defs, path)
        # Several defs of one name in one file (property setters, if/else): the first one.
        return min(exact, key=lambda rd: rd[1].start)

    def _symbol_not_found(self, qualname: str, defs: dict, path: str | None) -> SymbolNotFound:
        names = sorted({d.qualname for ds in defs.values() for d in (ds or [])})
        near = difflib.get_close_matches(qualname, names, n=5, cutoff=0.6)
        unparsable = sorted(rel for rel, ds in defs.items() if ds is None)
        where = path or (f"{len(defs)} candidate files" if defs else f"any *.py under {self.root}")
        msg = f"no def or class {qualname} in {where} ({self._who}) on {self._label}"
        msg += f"; near misses: {', '.join(near)}" if near else ""
        msg += f"; could not parse: {', '.join(unparsable)}" if unparsable else ""
        return SymbolNotFound(
            msg, hint="names differ between versions; search with tree.grep(r'def \\w*PART') to look around"
        )

    # ---- snapshots

    def snapshot(self, cache_dir: str | os.PathLike | None = None) -> SourceTree:
        """Copy every *.py plus dist-info metadata to a local cache in one tar transfer.

        Returns a tree on LocalHost with `.origin` (this tree) and `.snapshot_info` set;
        reads from it cost no round trips. The cache directory is named by host,
        version and a hash of the file contents.

        A warm call transfers nothing: the host computes, in one command, a fingerprint
        of the sorted (size, mtime, path) list of the selected files, and an index maps
        host+root+version to that fingerprint and the cached directory. Trade-off: an
        edit that keeps both size and mtime (e.g. `touch -r` after patching a line of
        equal length) is not seen; delete the index entry or the cache dir to force a copy.
        A host that cannot compute the fingerprint (no GNU find) gets a full copy every time.
        """
        base = Path(cache_dir) if cache_dir is not None else _cache_root()
        snaps = base / "snapshots"
        index_path, key = snaps / "index.json", f"{self.host.name}|{self.root}|{self.version}"
        started = time.monotonic()
        fingerprint = self._fingerprint()
        entry = _load_index(index_path).get(key)
        if fingerprint and entry and entry.get("fingerprint") == fingerprint:
            cached = snaps / entry["dir"]
            if (cached / self._dirname / "__init__.py").is_file():
                info = self._info(cached, entry["content_hash"], fingerprint, entry["files"], 0, started)
                return self._local_tree(cached, info)
        target, content_hash, count, sent = self._transfer(snaps)
        index = _load_index(index_path)
        rel_dir = target.relative_to(snaps).as_posix()
        index[key] = {
            "fingerprint": fingerprint,
            "dir": rel_dir,
            "content_hash": content_hash,
            "files": count,
        }
        _save_index(index_path, index)
        return self._local_tree(target, self._info(target, content_hash, fingerprint, count, sent, started))

    def _selection(self, action: str) -> str:
        """Shell fragment, run from the root's parent, applying `action` to every selected file.

        Only the two directory names are interpolated, both quoted. A pipeline rather than
        `tar -T -` fed from here: the file list (100+ KB) would have to be written to tar's
        stdin while tar is already writing the archive, and both pipes would fill.
        """
        q = shlex.quote
        parts = [f"find ./{q(self._dirname)} -type f -name '*.py' {action}"]
        if self.dist_info:
            names = " -o ".join(f"-name {n}" for n in _DIST_META)
            dist = q(posixpath.basename(self.dist_info))
            parts.append(f"find ./{dist} -maxdepth 1 -type f \\( {names} \\) {action}")
        return "{ " + "; ".join(parts) + "; }"

    def _fingerprint(self) -> str | None:
        # Hashed on the host, so a warm check costs one short answer.
        listing = self._selection("-printf '%s %T@ %p\\n'")
        cmd = f"{listing} | LC_ALL=C sort | {{ sha256sum 2>/dev/null || cksum; }}"
        res = self.host.run(cmd, cwd=posixpath.dirname(self.root), timeout=120)
        words = res.stdout.split()
        return words[0] if res.ok and words else None

    def _transfer(self, snaps: Path) -> tuple[Path, str, int, int]:
        work = snaps / "tmp"
        work.mkdir(parents=True, exist_ok=True)
        fd, tar_name = tempfile.mkstemp(dir=work, suffix=".tar.gz")
        unpack = Path(tempfile.mkdtemp(dir=work))
        try:
            with os.fdopen(fd, "wb") as fh:
                sent = self._stream_tar(fh)
            allowed = {self._dirname} | ({posixpath.basename(self.dist_info)} if self.dist_info else set())
            _extract(Path(tar_name), unpack, allowed)
            content_hash, count = _content_hash(unpack)
            name = _slug(f"{self.package}-{self.version or 'unknown'}-{content_hash[:12]}")
            target = snaps / _slug(self.host.name) / name
            _install_dir(unpack, target)
            return target, content_hash, count, sent
        finally:
            os.unlink(tar_name)
            shutil.rmtree(unpack, ignore_errors=True)

    def _stream_tar(self, fh) -> int:
        # Names start with "./", so tar never reads one from the list as an option.
        cmd = f"{self._selection('-print0')} | tar --null --no-recursion -T - -czf -"
        sent, err = 0, bytearray()
        with self.host.stream(cmd, cwd=posixpath.dirname(self.root), timeout=1800) as stream:
            for fd_name, data in stream:
                if fd_name == "stdout":
                    fh.write(data)
                    sent += len(data)
                elif len(err) < 8192:
                    err += data
        # tar exits 1 when a file changed while being read: the archive is still usable.
        if stream.exited not in (0, 1) or sent == 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-5:]
            raise SourceError(
                f"snapshot of {self.root} on {self._label} failed (exit {stream.exited}): {' / '.join(tail)}",
                hint="check that GNU tar exists on the host; reads without a snapshot still work",
            )
        return sent

    def _info(self, path: Path, content_hash: str, fingerprint, files: int, sent: int, started: float):
        return SnapshotInfo(
            host=self.host.name,
            root=self.root,
            version=self.version,
            path=str(path),
            content_hash=content_hash,
            fingerprint=fingerprint,
            files=files,
            transferred_bytes=sent,
            warm=sent == 0,
            seconds=time.monotonic() - started,
        )

    def _local_tree(self, directory: Path, info: SnapshotInfo) -> SourceTree:
        from kit.hosts import LocalHost

        tree = SourceTree.at(LocalHost(), str(directory / self._dirname), package=self.package)
        tree.version = tree.version or self.version
        tree.origin = self
        tree.snapshot_info = info
        return tree

    # ---- helpers

    @property
    def _label(self) -> str:
        """Where the code came from, as shown on snippets: a snapshot names its origin host."""
        if self.origin is not None:
            return f"{self.origin.host.name} (snapshot)"
        return self.host.name

    @property
    def _dirname(self) -> str:
        """The package directory's own name; it need not equal the import name given to at()."""
        return posixpath.basename(self.root)

    @property
    def _who(self) -> str:
        return f"{self.package} {self.version or '(version unknown)'}"

    def _snippet(self, rel: str, start: int, end: int, lines: list[str], total: int) -> SourceSnippet:
        return SourceSnippet(rel, start, end, lines, total, self._label, self.version, package=self.package)

    def _missing(self, rel: str, err: Exception) -> SourceFileNotFound:
        detail = getattr(err, "message", str(err))
        return SourceFileNotFound(
            f"cannot read {rel} in {self.root} ({self._who}) on {self._label}: {detail}",
            hint=f"list files with tree.files('**/{posixpath.basename(rel)}') or search with tree.grep(...); "
            "file layout changes between versions",
        )

    def __repr__(self) -> str:
        return f"<SourceTree {self._who} at {self.root} @ {self._label}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self)[1:-1])}</code>"


_cache_root = cache_dir  # `snapshot(cache_dir=...)` shadows the function name inside the method


def _check_package_name(package: str) -> None:
    if not isinstance(package, str) or not _IDENT.match(package):
        raise SourceInputError(f"not a top-level package name: {package!r}")


def _check_range(rel: str, first: int, end: int | None) -> None:
    ok = isinstance(first, int) and first >= 1 and (end is None or (isinstance(end, int) and end >= first))
    if not ok:
        raise LineRangeError(
            f"bad line range {first!r}-{end!r} for {rel}: lines count from 1 and end >= start"
        )


def _check_pattern(pattern: str, max_matches: int) -> None:
    if not isinstance(pattern, str) or "\0" in pattern:
        raise SourceInputError(f"not a usable grep pattern: {pattern!r}")
    if "\n" in pattern:
        # grep would treat each line as a separate pattern; a source line never contains a newline.
        raise SourceInputError(f"grep pattern contains a newline: {pattern!r}; run one grep per line")
    if not isinstance(max_matches, int) or max_matches < 1:
        raise SourceInputError(f"max_matches must be a positive int, not {max_matches!r}")


def _absolute_dir(host: Host, package_dir: str) -> str:
    if not isinstance(package_dir, str) or not package_dir or "\0" in package_dir:
        raise SourceInputError(f"not a usable directory: {package_dir!r}")
    if posixpath.isabs(package_dir):
        return posixpath.normpath(package_dir)
    if getattr(host, "name", None) == "local":
        return os.path.abspath(package_dir)
    raise SourceInputError(f"package directory on {host.name} must be absolute, not {package_dir!r}")


def _no_init(host: Host, root: str, package: str) -> PackageNotFound:
    inner = posixpath.join(root, package)
    hint = "pass the package directory itself (the one holding __init__.py)"
    if host.exists(inner + "/__init__.py"):
        hint = f"did you mean {inner}? pass the package directory, not site-packages"
    return PackageNotFound(f"{root} on {host.name} has no __init__.py, so it is not a package", hint=hint)


def _install_dir(unpacked: Path, target: Path) -> None:
    """Move a finished snapshot into place; if an identical one already exists, keep it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        return
    try:
        os.replace(unpacked, target)
    except OSError:
        if not target.exists():  # lost a race to a concurrent snapshot otherwise
            raise


# --------------------------------------------------------------------------- installing a source tree


def install_package_source(
    package: str = "sglang",
    version: str = "0.5.11",
    prefix: str | os.PathLike = "",
    python_tag: str = "python3.12",
    cache_dir: str | os.PathLike | None = None,
) -> str:
    """Unpack the wheel of `package==version` into `<prefix>/lib/<python_tag>/site-packages`.

    The wheel is fetched with `pip download --no-deps` once and kept under the kit
    cache, so later runs work offline. Only the files are installed (no dependencies,
    nothing imported): enough for source reads, not for running the package.
    Returns the package directory. A marker file makes repeated calls free; a
    different version already installed at the prefix is removed first.
    """
    if not prefix:
        raise SourceInputError("install_package_source needs prefix=, e.g. a lab directory")
    _check_package_name(package)
    base = Path(cache_dir) if cache_dir is not None else _cache_root()
    site = Path(prefix) / "lib" / python_tag / "site-packages"
    marker = site / f".sgl-kit-{_norm_dist(package)}-{version}.installed"
    if marker.is_file() and (site / package / "__init__.py").is_file():
        return str(site / package)
    wheel = _cached_wheel(base / "wheels", package, version) or _download_wheel(
        base / "wheels", package, version
    )
    _remove_installed(site, package)
    _unzip(wheel, site)
    marker.write_text(wheel.name + "\n")
    return str(site / package)


def _cached_wheel(wheels: Path, package: str, version: str) -> Path | None:
    prefix = f"{_norm_dist(package)}-{version}-"
    hits = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    return hits[0] if hits else None


def _download_wheel(wheels: Path, package: str, version: str) -> Path:
    from kit.hosts import LocalHost

    wheels.mkdir(parents=True, exist_ok=True)
    base = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
    ]
    spec = f"{package}=={version}"
    host = LocalHost()
    res = host.run(base + [spec, "-d", str(wheels)], timeout=900)
    if not res.ok and "matching distribution" in res.stderr.lower():
        # Some versions ship only cp311 manylinux wheels; the source is the same for any platform.
        extra = ["--platform", "manylinux_2_34_x86_64", "--python-version", "3.11"]
        res = host.run(base + extra + [spec, "-d", str(wheels)], timeout=900)
    wheel = _cached_wheel(wheels, package, version)
    if not res.ok or wheel is None:
        tail = " / ".join((res.stderr or res.stdout).strip().splitlines()[-4:])
        raise PackageNotFound(
            f"could not download {spec} with pip (exit {res.exited}): {tail}",
            hint=f"check network/proxy/index settings, or copy the wheel into {wheels}",
        )
    return wheel


def _remove_installed(site: Path, package: str) -> None:
    shutil.rmtree(site / package, ignore_errors=True)
    for old in site.glob(f"{_norm_dist(package)}-*.dist-info"):
        shutil.rmtree(old, ignore_errors=True)
    for old in site.glob(f".sgl-kit-{_norm_dist(package)}-*.installed"):
        old.unlink()


def _unzip(wheel: Path, site: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        # Vet every name before writing anything, so a bad wheel leaves nothing behind.
        targets = [(info, _safe_target(site, info.filename, wheel)) for info in zf.infolist()]
        for info, target in targets:
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _safe_target(site: Path, name: str, wheel: Path) -> Path:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or "\\" in name or ".." in parts or ":" in parts[0]:
        raise SourceError(f"wheel {wheel.name} has an unsafe member {name!r}; refusing to unpack")
    return site.joinpath(*parts)
