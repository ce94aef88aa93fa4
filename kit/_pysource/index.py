"""The persistent index of the tree a Modules was read from (kit._index holds the store)."""

from __future__ import annotations

from kit._index import MISSING, SourceIndex, index_for

__all__ = ["MISSING", "SourceIndex", "index_of"]


def index_of(modules) -> SourceIndex | None:
    """The persistent index of the tree ``modules`` were read from (kit._pysource.modules_for), or None
    when it is turned off (``SGL_KIT_INDEX=0``) or the tree has no fingerprint."""
    scratch = modules.scratch
    if "persistent_index" not in scratch:
        scratch["persistent_index"] = index_for(modules.tree())
    return scratch["persistent_index"]
