"""The arguments an SGLang server actually runs with, and where each value came from.

Three witnesses, read without importing or running any SGLang code:

- the startup log line, `server_args=ServerArgs(...)` (sglang <= 0.5.18) or
  `server_args={...}` (0.5.19 and later): ``log.py``, values in ``values.py``;
- `/server_info`, whose per-rank `internal_states` hold values the scheduler changed
  after it loaded the model: ``server_info.py``;
- the launch command, read against the flag table of the SGLang source that serves it:
  ``command.py`` and ``flags.py``.

`defaults` (``defaults.py``) and `flag_table` read that source through kit._pysource;
`lineage` (``lineage.py``) says what a flag name of any release is in this one (a field, a
deprecated alias and the nested config it folds into, not yet there, removed), with
``kit/data/lineage.yaml`` for what one tree cannot tell.
Log values are parsed with a small tokenizer and `ast.literal_eval`/`ast.parse`; nothing
is ever passed to `eval`. `classify` (``compare.py``) puts the three together: a value
that differs from its default although no flag asked for it is `auto-changed`, which is
how the incident's `disable_piecewise_cuda_graph=True` shows up. ``server.py`` does the
same for a server found by kit.target.discover. ``decode_stats.py`` reads the scheduler's
periodic `Decode batch` lines (accept length, throughput, whether CUDA graphs ran).
``launch_text.py`` (with ``launch_sources.py``) reads launch evidence as people paste it, one
flag at a time with its origin; ``paste.py`` splits a whole issue body into its pieces;
``markdown.py`` takes Markdown off first; ``stated.py`` finds the sglang versions a text states
(check_env, pip, a docker image tag, prose); ``log.py`` also collects sglang's notices.
"""

from .command import parse_command, server_flags
from .compare import CLASSIFY_COLUMNS, classify, classify_rows, diff
from .decode_stats import DecodeStat, PrefillStat, decode_summary, parse_decode_stats, parse_prefill_stats
from .defaults import FieldDefault, FieldDefaults, defaults
from .flags import FlagSpec, FlagTable, cli_defaults, flag_table
from .launch_diff import LaunchDiff, LaunchSide, launch_diff
from .launch_text import LaunchFlag, LaunchProblem, LaunchRead, LaunchText, read_launch_text
from .lineage import SAME_VALUE, FlagLineage, Fold, folds, lineage, lineage_data
from .log import (
    LogNotice,
    log_capacity,
    log_notices,
    missing_fields,
    parse_log,
    parse_log_all,
    parse_log_file,
    parse_log_file_all,
)
from .markdown import strip_markdown, text_problem
from .paste import Paste, Piece, split_paste
from .server import classify_server, classify_server_rows, effective_args, explicit_args
from .server_info import from_server_info
from .snapshot import ServerArgsSnapshot
from .stated import VersionStatement, choose_version, stated_versions
from .values import NonLiteral, format_server_args

__all__ = [
    "SAME_VALUE",
    "DecodeStat",
    "FieldDefault",
    "FieldDefaults",
    "FlagLineage",
    "FlagSpec",
    "FlagTable",
    "Fold",
    "LaunchFlag",
    "LaunchProblem",
    "LaunchRead",
    "LaunchText",
    "LogNotice",
    "Paste",
    "Piece",
    "PrefillStat",
    "LaunchDiff",
    "LaunchSide",
    "NonLiteral",
    "ServerArgsSnapshot",
    "VersionStatement",
    "CLASSIFY_COLUMNS",
    "choose_version",
    "classify",
    "classify_rows",
    "classify_server",
    "classify_server_rows",
    "cli_defaults",
    "decode_summary",
    "defaults",
    "diff",
    "effective_args",
    "explicit_args",
    "flag_table",
    "folds",
    "format_server_args",
    "from_server_info",
    "launch_diff",
    "lineage",
    "lineage_data",
    "log_capacity",
    "log_notices",
    "missing_fields",
    "parse_command",
    "parse_decode_stats",
    "parse_prefill_stats",
    "parse_log",
    "parse_log_all",
    "parse_log_file",
    "parse_log_file_all",
    "read_launch_text",
    "server_flags",
    "split_paste",
    "stated_versions",
    "strip_markdown",
    "text_problem",
]
