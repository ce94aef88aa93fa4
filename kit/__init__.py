"""sglang-investigation-kit: find out why an SGLang server is slow, and prove the fix.

The public API is what ``__all__`` lists; modules whose names start with an
underscore are private and may change without notice.
"""

from .bench import BenchConfig, BenchError, BenchRun, Comparison, RequestResult, compare
from .dryrun import DryRunResult, GpuProfile
from .errors import (
    AuthenticationFailed,
    CommandFailed,
    CommandTimeout,
    ConnectError,
    ConnectionRefused,
    HostDisconnected,
    HostError,
    HostKeyChanged,
    HostUnreachable,
    KitError,
    LineRangeError,
    ModelConfigError,
    PackageNotFound,
    ParseError,
    RemoteFileError,
    SourceError,
    SourceFileNotFound,
    SymbolNotFound,
    TargetError,
    UnknownHostKey,
)
from .hosts import CommandResult, CommandStream, FileStat, Host, LocalHost
from .provenance import AssignmentSite, FlagExplanation, Guard, explain
from .server_args import (
    ServerArgsSnapshot,
    classify,
    defaults,
    diff,
    flag_table,
    from_server_info,
    parse_command,
    parse_log,
    parse_log_file,
)
from .source import GrepMatch, GrepResult, SourceSnippet, SourceTree
from .target import HostInventory, ServerProcess, connect, discover, find_server, inventory, parse_target

__version__ = "0.1.0"


def __getattr__(name: str):
    # SSHHost pulls in paramiko; load it only when someone asks for it.
    if name == "SSHHost":
        from .hosts import SSHHost

        return SSHHost
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "AssignmentSite",
    "AuthenticationFailed",
    "BenchConfig",
    "BenchError",
    "BenchRun",
    "classify",
    "CommandFailed",
    "CommandResult",
    "CommandStream",
    "CommandTimeout",
    "compare",
    "Comparison",
    "connect",
    "ConnectError",
    "ConnectionRefused",
    "defaults",
    "diff",
    "discover",
    "DryRunResult",
    "explain",
    "FileStat",
    "find_server",
    "flag_table",
    "FlagExplanation",
    "from_server_info",
    "GpuProfile",
    "GrepMatch",
    "GrepResult",
    "Guard",
    "Host",
    "HostDisconnected",
    "HostError",
    "HostInventory",
    "HostKeyChanged",
    "HostUnreachable",
    "inventory",
    "KitError",
    "LineRangeError",
    "LocalHost",
    "ModelConfigError",
    "PackageNotFound",
    "parse_command",
    "parse_log",
    "parse_log_file",
    "parse_target",
    "ParseError",
    "RemoteFileError",
    "RequestResult",
    "ServerArgsSnapshot",
    "ServerProcess",
    "SourceError",
    "SourceFileNotFound",
    "SourceSnippet",
    "SourceTree",
    "SSHHost",
    "SymbolNotFound",
    "TargetError",
    "UnknownHostKey",
]
