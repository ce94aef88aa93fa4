"""SGLang's own source on a host: `sed -n 'A,Bp'`-style reads, grep, functions by name.

During an incident the question is rarely "what does line 1229 say" but "what does
the code that set this flag say, in the version that is actually installed on that
box". Line numbers move between releases, so everything here finds code by name
(`ast`) or by pattern (`grep` on the host) and reports the line numbers it found.

Every command sent to a host is an argv list (no shell), except the two snapshot
pipelines (find | tar, find | sha256sum), where the directory names pass through
`shlex.quote`.

- ``tree.py``: SourceTree: locate, read, grep, function, snapshot; ``source_for_server``: the source a
  server runs, copied once to this machine when it is remote;
- ``snippet.py``: SourceSnippet, what a read returns;
- ``search.py``: grep results, definitions by name, glob patterns;
- ``locate.py``: the locate script's answer (kit/_remote/locate.py);
- ``snapshot.py``: a remote tree copied once into the local cache.
"""

from __future__ import annotations

from kit._paths import cache_dir
from kit._wheels import install_package_source
from kit.errors import AmbiguousSymbol, SourceInputError

from .search import GrepMatch, GrepResult
from .snapshot import SnapshotInfo
from .snippet import SourceSnippet
from .tree import SourceTree, source_for_server

# cache_dir and install_package_source moved to kit._paths and kit._wheels; the errors live in
# kit.errors. They stay importable from here for one release.
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
    "source_for_server",
]
