"""Snapshots: a remote package copied once into the local cache, checked by fingerprint."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kit.errors import (
    SourceError,
)

__all__ = ['SnapshotInfo', 'content_hash', 'extract', 'install_dir', 'load_index', 'save_index', 'slug']


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


def load_index(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def save_index(path: Path, index: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
    os.replace(tmp, path)


def slug(name: str) -> str:
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


def extract(tar_path: Path, dest: Path, allowed: set[str]) -> None:
    with tarfile.open(tar_path, "r:gz") as tf:
        members = tf.getmembers()
        for m in members:
            _check_member(m, allowed)
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover - Python without PEP 706; members were vetted above
            tf.extractall(dest, members=members)  # noqa: S202


def content_hash(root: Path) -> tuple[str, int]:
    """sha256 over (relative path, sha256 of bytes) in sorted order: stable across tar runs."""
    h, n = hashlib.sha256(), 0
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(p.relative_to(root).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
        n += 1
    return h.hexdigest(), n




def install_dir(unpacked: Path, target: Path) -> None:
    """Move a finished snapshot into place; if an identical one already exists, keep it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        return
    try:
        os.replace(unpacked, target)
    except OSError:
        if not target.exists():  # lost a race to a concurrent snapshot otherwise
            raise
