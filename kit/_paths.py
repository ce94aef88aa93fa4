"""Where the kit keeps what it downloads and builds on this machine.

Everything lives under one cache directory, so ``rm -r`` of it forgets all of it:
``wheels/`` (downloaded wheels), ``trees/`` (unpacked sglang sources), ``dryrun/``
(per-version virtualenvs), ``snapshots/`` (copies of remote trees), ``lab/`` (the lab's
directory), ``lab-wheels/`` (what a remote lab host needs), ``index/`` (the persistent index of
each sglang tree read, ``kit/_index.py``) and ``runs/`` (this user's run files: benchmark
JSONL, baseline launch scripts; private to the user).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["CACHE_ENV", "LAB_DIR_ENV", "RUNTIME_ENV", "cache_dir", "lab_dir", "runs_dir", "runtime_dir", "tree_dir",
           "wheels_dir", "write_json"]

CACHE_ENV = "SGL_KIT_CACHE"
LAB_DIR_ENV = "SGL_KIT_LAB_DIR"
RUNTIME_ENV = "SGL_KIT_RUNTIME_DIR"


def cache_dir() -> Path:
    """The kit's cache: `$SGL_KIT_CACHE`, else `~/.cache/sglang-investigation-kit`."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sglang-investigation-kit"


def wheels_dir() -> Path:
    """Wheels fetched with ``pip download --no-deps``, kept so later runs work offline."""
    return cache_dir() / "wheels"


def tree_dir(package: str, version: str) -> Path:
    """The prefix under which one version's source is unpacked for reading (``trees/sglang-X``)."""
    return cache_dir() / "trees" / f"{package}-{version}"


def lab_dir() -> str:
    """The lab's directory on this machine: ``$SGL_KIT_LAB_DIR``, else ``<cache>/lab``."""
    return os.environ.get(LAB_DIR_ENV) or str(cache_dir() / "lab")


def runs_dir() -> Path:
    """This user's run files (``<cache>/runs``, mode 0700): never a shared name in the system temp dir."""
    path = cache_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def runtime_dir() -> Path | None:
    """A directory only this user can open, for the sockets of kept SSH connections (kit.hosts.kept):
    ``$SGL_KIT_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/sgl-kit``, else ``/tmp/sgl-kit-<uid>``. None when it
    cannot be made private: another user owns it, or others may open it."""
    chosen = os.environ.get(RUNTIME_ENV)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if chosen:
        path = Path(chosen).expanduser()
    elif xdg and os.path.isdir(xdg):
        path = Path(xdg) / "sgl-kit"
    else:
        path = Path(tempfile.gettempdir()) / f"sgl-kit-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=bool(chosen), exist_ok=True)
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def write_json(path: str | os.PathLike, data: object) -> Path:
    """``data`` as indented JSON at ``path`` (its directory made), for a result's ``save``."""
    import json

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return out
