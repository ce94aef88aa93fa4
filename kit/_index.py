"""The persistent index of one source tree: what is costly to read from it, kept between runs.

An installed sglang tree never changes, yet every ``sgl-kit why`` used to read its flag table,
its field defaults and the files that write a field again. The index keeps those facts, as
plain data, in one JSON file per tree under the kit's cache (``<cache>/index/``):

- keyed by the tree's fingerprint (a snapshot's content hash, else the ``find -printf '%s %T@ %p'``
  hash a snapshot checks; a tree that has neither gets no index);
- invalidated by the index format (``FORMAT``), the kit's version, the Python version, and a
  stamp of the kit's own code that computes the facts (size and mtime of its modules and data),
  so an edited kit never reads facts an older one stored;
- filled lazily: each fact is computed the first time a question needs it and stored then, so
  a new tree costs what the first question costs, and later questions read it back;
- written once per process, when it exits (or on ``flush()``), atomically (a temporary file,
  then ``os.replace``), merged with what another process
  stored meanwhile; a file that cannot be read or does not match is ignored and rebuilt;
- at most ``MAX_INDEXES`` files, the most recently used (each fresh unpack of a tree is a new one).

Only plain data goes in: None, bool, int, float, str, and lists, tuples, dicts, sets of them
(``encode``/``decode`` keep tuples, sets and non-string keys apart). Anything else is not stored
and is computed every time. ``SGL_KIT_INDEX=0`` turns the index off.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import sys
import tempfile
import weakref
from pathlib import Path

from kit._paths import cache_dir
from kit._version import __version__

__all__ = ["FORMAT", "INDEX_ENV", "MAX_INDEXES", "MISSING", "NotPlain", "SourceIndex", "decode", "encode", "flush", "index_for",
           "tree_fingerprint"]

FORMAT = 1
MAX_INDEXES = 48  # index files kept in <cache>/index, the most recently used
INDEX_ENV = "SGL_KIT_INDEX"
MISSING = object()

_KIT = Path(__file__).resolve().parent
# The kit's code and data whose output the index holds: editing any of them forgets stored facts.
_CODE = ("_index.py", "_pysource", "server_args", "provenance", "source", "data/lineage.yaml", "_version.py")


class NotPlain(TypeError):
    """A value that the index does not store (not a plain builtin)."""


def encode(value):
    """Plain data as JSON: tuples, sets, dicts and non-finite floats are tagged so they come back as they were."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [encode(v) for v in value]
    if kind is tuple:
        return {"tuple": [encode(v) for v in value]}
    if kind in (set, frozenset):
        items = sorted((encode(v) for v in value), key=lambda e: json.dumps(e, sort_keys=True))
        return {kind.__name__: items}
    if kind is dict:
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    raise NotPlain(f"{kind.__name__} is not plain data")


def decode(data):
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    (tag, body), = data.items()
    if tag == "tuple":
        return tuple(decode(v) for v in body)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in body}
    if tag == "set":
        return {decode(v) for v in body}
    if tag == "frozenset":
        return frozenset(decode(v) for v in body)
    if tag == "float":
        return float(body)
    raise ValueError(f"unknown tag {tag!r} in the index")


def _code_stamp() -> str:
    h = hashlib.sha256()
    for rel in _CODE:
        base = _KIT / rel
        paths = sorted(base.rglob("*.py")) if base.is_dir() else [base]
        for p in paths:
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(_KIT)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def tree_fingerprint(tree) -> str | None:
    """What identifies a tree's content: a snapshot's content hash, else the tree's own fingerprint."""
    info = getattr(tree, "snapshot_info", None)
    digest = getattr(info, "content_hash", None)
    if isinstance(digest, str) and digest:
        return "content:" + digest
    fingerprint = getattr(tree, "fingerprint", None)
    if callable(fingerprint):
        found = fingerprint()
        return "listing:" + found if isinstance(found, str) and found else None
    return None


class SourceIndex:
    """The stored facts of one tree: ``get(section, key)`` and ``put(section, key, value)``."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        self.header = header
        self.sections: dict[str, dict] = {}
        self.loaded = False  # whether a matching file was read
        self.writes = 0
        self.dirty = False
        self._load()

    def _load(self) -> None:
        stored = _read(self.path, self.header)
        if stored is not None:
            self.sections, self.loaded = stored, True
            try:
                os.utime(self.path)  # used now: pruning keeps the most recently used indexes
            except OSError:
                pass

    def get(self, section: str, key: str = ""):
        """The decoded value stored under (section, key), or MISSING."""
        found = self.sections.get(section, {}).get(key, MISSING)
        if found is MISSING:
            return MISSING
        try:
            return decode(found)
        except (ValueError, TypeError, KeyError):
            return MISSING

    def put(self, section: str, key: str, value) -> bool:
        """Store a plain value (written by ``flush``, at the latest when the process exits);
        False, and nothing stored, for a value that is not plain."""
        try:
            encoded = encode(value)
        except NotPlain:
            return False
        self.sections.setdefault(section, {})[key] = encoded
        if not self.dirty:
            self.dirty = True
            _pending(self)
        return True

    def flush(self) -> None:
        """Write what was stored since the last flush (one write for all the facts of a command)."""
        if self.dirty:
            self.dirty = False
            self._save()

    def _save(self) -> None:
        # Another process may have stored other facts since we read: keep them, ours win.
        merged = _read(self.path, self.header) or {}
        for section, entries in self.sections.items():
            merged.setdefault(section, {}).update(entries)
        self.sections = merged
        body = json.dumps({**self.header, "sections": merged}, sort_keys=True, separators=(",", ":"))
        new = not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(body)
                os.replace(tmp, self.path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        except OSError:
            return  # a read-only cache: the facts are recomputed next time
        self.writes += 1
        if new:
            _prune(self.path.parent, keep=self.path)

    def __repr__(self) -> str:
        facts = sum(len(v) for v in self.sections.values())
        return f"<SourceIndex {self.path.name}: {facts} facts in {len(self.sections)} sections>"


_PENDING: list[SourceIndex] = []


def _pending(index: SourceIndex) -> None:
    if not _PENDING:
        atexit.register(flush)
    if index not in _PENDING:
        _PENDING.append(index)


def flush() -> None:
    """Write every index with facts not yet written (the kit does it when the process exits)."""
    while _PENDING:
        _PENDING.pop().flush()


def _prune(directory: Path, keep: Path, limit: int | None = None) -> None:
    """Keep the ``MAX_INDEXES`` most recently used index files (every unpacked or snapshot tree has one)."""
    limit = MAX_INDEXES if limit is None else limit
    try:
        found = [(p.stat().st_mtime, p) for p in directory.glob("*.json") if p != keep]
    except OSError:
        return
    found.sort(reverse=True)
    for _, old in found[max(0, limit - 1):]:
        try:
            old.unlink()
        except OSError:
            pass


def _read(path: Path, header: dict) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in header.items()):
        return None
    sections = data.get("sections")
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        return None
    return sections


def enabled() -> bool:
    return os.environ.get(INDEX_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def index_for(tree) -> SourceIndex | None:
    """The persistent index of a source tree (a kit.source.SourceTree, or anything with a ``fingerprint()``
    or a snapshot's ``snapshot_info``), or None when it is turned off (``SGL_KIT_INDEX=0``) or the tree
    cannot say what it is. Made once per tree object: what the layers above store (kit._pysource,
    kit.provenance) and what the tree itself stores (its greps, its functions) go in one write."""
    if tree is None or not enabled():
        return None
    memo = _MEMO.get(id(tree))
    if memo is not None and memo[0]() is tree:
        return memo[1]
    found = _open(tree)
    try:
        ref = weakref.ref(tree)
    except TypeError:  # not weak-referenceable: asked again each time
        return found
    _MEMO[id(tree)] = (ref, found)
    weakref.finalize(tree, _MEMO.pop, id(tree), None)
    return found


_MEMO: dict[int, tuple] = {}


def _open(tree) -> SourceIndex | None:
    try:
        fingerprint = tree_fingerprint(tree)
    except Exception:  # noqa: BLE001 - a tree that cannot say what it is simply gets no index
        return None
    if fingerprint is None:
        return None
    package = getattr(tree, "package", None) or "sglang"
    version = getattr(tree, "version", None)
    header = {
        "format": FORMAT,
        "kit": __version__,
        "code": _code_stamp(),
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "package": package,
        "version": version,
        "fingerprint": fingerprint,
    }
    name = hashlib.sha256(f"{package}\0{fingerprint}".encode()).hexdigest()[:24]
    label = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{package}-{version}")
    return SourceIndex(cache_dir() / "index" / f"{label}-{name}.json", header)
