"""A source tree held in memory, for tests of the static readers on small made-up sources."""

from __future__ import annotations

import textwrap

from kit.errors import SourceFileNotFound


class DictTree:
    """A source tree held in memory: read_text/files/version, nothing else; ``reads`` counts reads."""

    def __init__(self, files: dict[str, str], version: str | None = "0.0.test") -> None:
        self._files = {k: textwrap.dedent(v) for k, v in files.items()}
        self.version = version
        self.package = "sglang"
        self.reads = 0

    def read_text(self, path: str) -> str:
        self.reads += 1
        try:
            return self._files[path]
        except KeyError:
            raise SourceFileNotFound(f"{path} is not in the tree") from None

    def files(self, pattern: str = "**/*.py") -> list[str]:
        return sorted(self._files)
