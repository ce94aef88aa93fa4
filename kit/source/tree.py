"""SourceTree: a package's source directory on a host."""

from __future__ import annotations

import difflib
import html
import io
import json
import os
import posixpath
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kit._index import MISSING, index_for
from kit._paths import cache_dir
from kit._remote import run as run_script
from kit._remote.locate import VERSION_FILES, declared_version
from kit.errors import (
    AmbiguousSymbol,
    CommandFailed,
    LineRangeError,
    PackageNotFound,
    RemoteFileError,
    SourceError,
    SourceFileNotFound,
    SourceInputError,
    SymbolNotFound,
)
from kit.hosts import Host

from .locate import locate_payload, no_interpreter, not_found, sibling_dist_info
from .search import Definition, GrepMatch, GrepResult, definitions, glob_regex, parse_grep
from .snapshot import (
    SnapshotInfo,
    install_dir,
    load_index,
    save_index,
    slug,
    unpack,
)
from .snippet import SourceSnippet, chomp, split_lines

__all__ = ['SourceTree', 'source_for_server']


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_QUALNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DIST_META = ("METADATA", "WHEEL", "top_level.txt", "entry_points.txt")
_MAX_CANDIDATES = 40  # files to parse when looking a name up; more means the name is too vague


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
        self.version_from: str | None = "located" if version else None  # dist-info, _version.py, version.py
        self.origin: SourceTree | None = None  # the remote tree a snapshot was taken from
        self.snapshot_info: SnapshotInfo | None = None
        self._fingerprint_memo: list[str | None] = []  # fingerprint(), asked once per tree

    # ---- construction

    @classmethod
    def locate(cls, host: Host, package: str = "sglang", python: str = "python3", timeout: float = 30):
        """Find `package` as `python` on `host` would import it, without importing it."""
        _check_package_name(package)
        try:
            res = run_script(host, "locate", package, python=python, timeout=timeout)
        except RemoteFileError as err:  # argv[0] could not be executed at all
            raise no_interpreter(host, python, err.message) from err
        info = locate_payload(res, host, python, package)
        if not info.get("found"):
            raise not_found(info, host, python, package)
        tree = cls(host, info["package_dir"], package, info.get("version"), dist_info=info.get("dist_info"))
        tree.version_from = info.get("version_from") or tree.version_from
        return tree

    @classmethod
    def of_server(cls, server) -> SourceTree:
        """The sglang source that a discovered server's interpreter imports (a kit.target.ServerProcess)."""
        if not server.sglang_dir:
            raise PackageNotFound(f"no sglang install found for pid {server.pid} on {server.host_name}",
                                  hint=f"its interpreter {server.python} cannot import sglang; pass --package-dir")
        if server.host is None:
            raise PackageNotFound(f"pid {server.pid} on {server.host_name} has no host attached",
                                  hint="get the server from kit.target.discover(host)")
        return cls.at(server.host, server.sglang_dir)

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
        dist, version = sibling_dist_info(host, root, package)
        tree = cls(host, root, package, version, dist_info=dist)
        tree.version_from = "dist-info" if version else None
        if version is None:
            tree.version, tree.version_from = _file_version(host, root)
        return tree

    # ---- paths

    def paths_of(self, path: str) -> tuple[str, str]:
        """(path relative to root, absolute path on the host); rejects paths leaving the root.

        Accepts "srt/server_args.py", "sglang/srt/server_args.py" or an absolute path inside root.
        """
        if not isinstance(path, str) or not path or "\0" in path:
            raise SourceInputError(f"not a usable file path: {path!r}")
        root = posixpath.normpath(self.root)
        if posixpath.isabs(path):
            full = posixpath.normpath(path)
        else:
            # Relative paths are read from the root, as `cd root && sed -n ... path` would: a
            # path that climbs out and back in ("../sglang/x.py") names a file inside it.
            rel = posixpath.normpath(path)
            head, _, rest = rel.partition("/")
            full = posixpath.normpath(posixpath.join(root, rest if head == self.package and rest else rel))
        if full == root:
            raise SourceInputError(f"{path!r} names the package directory, not a file in it")
        if not full.startswith(root + "/"):
            raise SourceInputError(f"{path!r} is outside the package root {self.root}",
                                   hint="give a path inside the package, e.g. srt/server_args.py")
        return full[len(root) + 1:], full

    def resolve(self, path: str) -> tuple[str, str]:
        """Deprecated alias of :meth:`paths_of` (it resolves nothing); kept for one release."""
        import warnings

        warnings.warn("SourceTree.resolve is now SourceTree.paths_of", DeprecationWarning, stacklevel=2)
        return self.paths_of(path)

    # ---- reading

    def read_text(self, path: str) -> str:
        rel, full = self.paths_of(path)
        try:
            return self.host.read_text(full)
        except RemoteFileError as err:
            raise self._missing(rel, err) from err

    def read(self, path: str, start: int | None = None, end: int | None = None) -> SourceSnippet:
        """Lines start..end (1-based, inclusive, like `sed -n 'start,endp'`); only those lines travel.

        Lines are split on newlines only, as sed and `ast` count them; a trailing carriage
        return (CRLF files) is dropped.
        """
        rel, full = self.paths_of(path)
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
                cli_hint=f"ask for lines within 1-{total}, or find code by name: `sgl-kit source TARGET --function NAME`",
            )
        return self._snippet(rel, first, last, lines[: last - first + 1], total)

    def _read_lines(self, rel: str, full: str, first: int, end: int | None) -> tuple[list[str], int]:
        try:
            lines, total = self.host.read_lines(full, first, end)
            want = max(0, min(total, end or total) - first + 1)
            if len(lines) != want:
                # The host split on more than "\n" (form feeds, \x1c, \u2028 ...), so its
                # numbering disagrees with sed's and ast's; split the whole file ourselves.
                lines = split_lines(self.host.read_text(full))[first - 1 : end]
        except RemoteFileError as err:
            raise self._missing(rel, err) from err
        return [chomp(line) for line in lines], total

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
        rx = glob_regex(pattern)
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
        # Over the *.py files a fingerprint covers, the answer is the tree's own: kept in its index.
        index = index_for(self) if glob == "*.py" else None
        key = json.dumps([pattern, fixed, ignore_case, max_matches])
        stored = index.get("grep", key) if index is not None else MISSING
        if _is_grep(stored):
            truncated, rows = stored
            return GrepResult(pattern, [GrepMatch(*row) for row in rows], self._label, self.root, truncated)
        res = self.host.run(self._grep_argv(pattern, glob, fixed, ignore_case, max_matches), timeout=180)
        if res.exited not in (0, 1) and not res.stdout_bytes:
            hint = "the pattern is an extended regex; pass fixed=True to search for literal text"
            raise CommandFailed(res, hint=hint)
        matches = sorted(
            parse_grep(res.stdout_bytes, self.root, self._label), key=lambda m: (m.path, m.line)
        )
        errors = res.stderr.strip() if res.exited not in (0, 1) else ""
        if index is not None and not errors:
            index.put("grep", key, (len(matches) > max_matches, [(m.path, m.line, m.text) for m in matches[:max_matches]]))
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
        index = index_for(self)
        key = json.dumps([qualname, path])
        stored = index.get("function", key) if index is not None else MISSING
        if _is_place(stored):  # where the tree's index says it is: no grep, no parse
            rel, start, end, name = stored
            lines = split_lines(self.read_text(rel))
            if end <= len(lines):
                snippet = self._snippet(rel, start, end, lines[start - 1 : end], len(lines))
                snippet.qualname = name
                return snippet
        rels = [self.paths_of(path)[0]] if path else self._files_defining(qualname)
        texts = {rel: self.read_text(rel) for rel in rels}
        defs = {rel: definitions(text) for rel, text in texts.items()}
        rel, found = self._pick(qualname, defs, path)
        lines = split_lines(texts[rel])
        snippet = self._snippet(rel, found.start, found.end, lines[found.start - 1 : found.end], len(lines))
        snippet.qualname = found.qualname
        if index is not None:
            index.put("function", key, (rel, found.start, found.end, found.qualname))
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

    def _pick(self, qualname: str, defs: dict[str, list[Definition] | None], path: str | None) -> tuple[str, Definition]:
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
            msg, hint="names differ between versions; search with tree.grep(r'def \\w*PART') to look around",
            cli_hint="names differ between versions; look around with `sgl-kit grep TARGET 'def .*PART'`",
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
        entry = load_index(index_path).get(key)
        if fingerprint and entry and entry.get("fingerprint") == fingerprint:
            cached = snaps / entry["dir"]
            if (cached / self._dirname / "__init__.py").is_file():
                info = self._info(cached, entry["content_hash"], fingerprint, entry["files"], 0, started)
                return self._local_tree(cached, info)
        target, content_hash, count, sent = self._transfer(snaps)
        index = load_index(index_path)
        rel_dir = target.relative_to(snaps).as_posix()
        index[key] = {
            "fingerprint": fingerprint,
            "dir": rel_dir,
            "content_hash": content_hash,
            "files": count,
        }
        save_index(index_path, index)
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

    def fingerprint(self) -> str | None:
        """A hash of the sorted (size, mtime, path) list of the files a snapshot copies, computed on the
        host in one command and asked once per tree object; None when the host cannot compute it."""
        if not self._fingerprint_memo:
            self._fingerprint_memo.append(self._fingerprint())
        return self._fingerprint_memo[0]

    def _fingerprint(self) -> str | None:
        # Hashed on the host, so a warm check costs one short answer.
        listing = self._selection("-printf '%s %T@ %p\\n'")
        cmd = f"{listing} | LC_ALL=C sort | {{ sha256sum 2>/dev/null || cksum; }}"
        res = self.host.run(cmd, cwd=posixpath.dirname(self.root), timeout=120)
        words = res.stdout.split()
        return words[0] if res.ok and words else None

    def _transfer(self, snaps: Path) -> tuple[Path, str, int, int]:
        """Copy the selection in one tar stream, unpacked and hashed as it arrives (no archive file)."""
        work = snaps / "tmp"
        work.mkdir(parents=True, exist_ok=True)
        unpack_dir = Path(tempfile.mkdtemp(dir=work))
        try:
            allowed = {self._dirname} | ({posixpath.basename(self.dist_info)} if self.dist_info else set())
            # gzip -1: a third of the CPU of tar -z's level 6 on the host, for a quarter more bytes
            cmd = f"{self._selection('-print0')} | tar --null --no-recursion -T - -cf - | gzip -1 -c"
            with self.host.stream(cmd, cwd=posixpath.dirname(self.root), timeout=1800) as stream:
                arriving = _Arriving(stream)
                try:
                    digest, count = unpack(arriving, unpack_dir, allowed)
                except SourceError as exc:
                    raise self._copy_failed(stream, arriving, str(exc)) from None
                arriving.drain()
            if stream.exited not in (0, 1) or count == 0 or not (unpack_dir / self._dirname).is_dir():
                raise self._copy_failed(stream, arriving, f"{count} files arrived")
            name = slug(f"{self.package}-{self.version or 'unknown'}-{digest[:12]}")
            target = snaps / slug(self.host.name) / name
            install_dir(unpack_dir, target)
            return target, digest, count, arriving.sent
        finally:
            shutil.rmtree(unpack_dir, ignore_errors=True)

    def _copy_failed(self, stream, arriving: _Arriving, what: str) -> SourceError:
        tail = arriving.err.decode("utf-8", "replace").strip().splitlines()[-5:]
        return SourceError(
            f"snapshot of {self.root} on {self._label} failed (exit {stream.exited}, {what}): {' / '.join(tail)}",
            hint="check that GNU tar and gzip exist on the host; reads without a snapshot still work",
        )

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
            cli_hint=f"find it with `sgl-kit grep TARGET PATTERN --glob '{posixpath.basename(rel)}'`; "
            "file layout changes between versions",
        )

    def __repr__(self) -> str:
        return f"<SourceTree {self._who} at {self.root} @ {self._label}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self)[1:-1])}</code>"


_cache_root = cache_dir  # `snapshot(cache_dir=...)` shadows the function name inside the method


def source_for_server(server, *, tree: SourceTree | None = None, copy: bool = True,
                      progress: Callable[[str], None] | None = None) -> SourceTree:
    """The sglang source a server runs, read from this machine: the one way from a server to it.

    ``server`` is one found by ``kit.target.discover`` (:meth:`SourceTree.of_server`: the install its
    interpreter imports); ``tree``, when given, is read instead (``--package-dir``, a tree already open;
    ``server`` may then be None). A tree on another host is copied once into the local cache
    (:meth:`SourceTree.snapshot`: one tar transfer, none while its files are unchanged), so every read
    after costs no round trip; ``copy=False`` keeps it there, read file by file. ``progress`` is told
    before a copy.
    """
    if tree is None:
        if server is None:
            raise SourceInputError("source_for_server needs a server or a tree",
                                   hint="find the server with kit.target.discover(host) or resolve_server")
        tree = SourceTree.of_server(server)
    if copy and tree.host.name != "local":
        if progress is not None:
            progress(f"copying the sglang source on {tree.host.name} to the local cache (once per version)")
        tree = tree.snapshot()
    return tree


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


def _file_version(host: Host, root: str) -> tuple[str | None, str | None]:
    """(version, file) from the package's own `_version.py` or `version.py` (setuptools-scm writes
    `__version__ = version = '0.5.9'`), for a package directory without a dist-info beside it."""
    for rel in VERSION_FILES:
        try:
            found = declared_version(host.read_text(posixpath.join(root, rel)))
        except (RemoteFileError, OSError, UnicodeError):
            continue
        if found:
            return found, rel
    return None, None


def _no_init(host: Host, root: str, package: str) -> PackageNotFound:
    inner = posixpath.join(root, package)
    hint = "pass the package directory itself (the one holding __init__.py)"
    if host.exists(inner + "/__init__.py"):
        hint = f"did you mean {inner}? pass the package directory, not site-packages"
    return PackageNotFound(f"{root} on {host.name} has no __init__.py, so it is not a package", hint=hint)


def _is_grep(stored) -> bool:
    """A grep answer as the index keeps it: (truncated, [(path, line, text), ...])."""
    return (isinstance(stored, tuple) and len(stored) == 2 and isinstance(stored[0], bool)
            and isinstance(stored[1], list) and all(
                isinstance(r, tuple) and len(r) == 3 and isinstance(r[0], str) and type(r[1]) is int
                and isinstance(r[2], str) for r in stored[1]))


def _is_place(stored) -> bool:
    """A function's place as the index keeps it: (file, first line, last line, qualname)."""
    return (isinstance(stored, tuple) and len(stored) == 4 and isinstance(stored[0], str) and isinstance(stored[3], str)
            and type(stored[1]) is int and type(stored[2]) is int and 1 <= stored[1] <= stored[2])


class _Arriving(io.RawIOBase):
    """The stdout of a CommandStream as a file read front to back (tarfile's stream mode reads it), with
    the bytes counted and the first 8 kB of stderr kept for the error message."""

    def __init__(self, stream) -> None:
        self._chunks = iter(stream)
        self._buf = b""
        self.sent = 0
        self.err = bytearray()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            try:
                fd_name, data = next(self._chunks)
            except StopIteration:
                return 0
            if fd_name == "stdout":
                self._buf = data
                self.sent += len(data)
            elif len(self.err) < 8192:
                self.err += data
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def drain(self) -> None:
        """Read what is left (tar's end blocks, stderr), so the command's exit status is known."""
        while self.readinto(bytearray(65536)):
            pass
