"""sglang-investigation-kit: find out why an SGLang server is slow, and prove the fix.

The public API is what ``__all__`` lists; modules whose names start with an
underscore are private and may change without notice.
"""

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
    PackageNotFound,
    ParseError,
    RemoteFileError,
    SourceError,
    SourceFileNotFound,
    SymbolNotFound,
    TargetError,
    UnknownHostKey,
)
from .hosts import CommandResult, CommandStream, FileStat, Host, LocalHost, SSHHost
from .source import GrepMatch, GrepResult, SourceSnippet, SourceTree
from .target import connect, parse_target

__version__ = "0.1.0"

__all__ = [
    "AuthenticationFailed",
    "CommandFailed",
    "CommandResult",
    "CommandStream",
    "CommandTimeout",
    "connect",
    "ConnectError",
    "ConnectionRefused",
    "FileStat",
    "GrepMatch",
    "GrepResult",
    "Host",
    "HostDisconnected",
    "HostError",
    "HostKeyChanged",
    "HostUnreachable",
    "KitError",
    "LineRangeError",
    "LocalHost",
    "PackageNotFound",
    "parse_target",
    "ParseError",
    "RemoteFileError",
    "SourceError",
    "SourceFileNotFound",
    "SourceSnippet",
    "SourceTree",
    "SSHHost",
    "SymbolNotFound",
    "TargetError",
    "UnknownHostKey",
]
