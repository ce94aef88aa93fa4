"""sglang-investigation-kit: find out why an SGLang server is slow, and prove the fix.

The public API is what ``__all__`` lists. ``import kit`` loads almost nothing: each
name is imported from its module on first use, so a notebook that only connects does
not pay for pandas, aiohttp or paramiko. Modules whose names start with an underscore
are private and may change without notice. The map of the package is
``docs/architecture.md``.
"""

from __future__ import annotations

from importlib import import_module as _import_module

from ._version import __version__ as __version__

# name -> module that defines it (imported on first use)
_EXPORTS = {
    "AssignmentSite": "kit.provenance",
    "AuthenticationFailed": "kit.errors",
    "BenchConfig": "kit.bench",
    "BenchError": "kit.errors",
    "BenchRun": "kit.bench",
    "classify": "kit.server_args",
    "CommandFailed": "kit.errors",
    "CommandResult": "kit.hosts",
    "CommandStream": "kit.hosts",
    "CommandTimeout": "kit.errors",
    "compare": "kit.bench",
    "Comparison": "kit.bench",
    "connect": "kit.target",
    "ConnectError": "kit.errors",
    "ConnectionRefused": "kit.errors",
    "defaults": "kit.server_args",
    "diff": "kit.server_args",
    "discover": "kit.target",
    "DryRunResult": "kit.dryrun",
    "explain": "kit.provenance",
    "FileStat": "kit.hosts",
    "flag_table": "kit.server_args",
    "FlagExplanation": "kit.provenance",
    "from_server_info": "kit.server_args",
    "GpuProfile": "kit.dryrun",
    "GrepMatch": "kit.source",
    "GrepResult": "kit.source",
    "Guard": "kit.provenance",
    "Host": "kit.hosts",
    "HostDisconnected": "kit.errors",
    "HostError": "kit.errors",
    "HostInventory": "kit.target",
    "HostKeyChanged": "kit.errors",
    "HostUnreachable": "kit.errors",
    "inventory": "kit.target",
    "KitError": "kit.errors",
    "LineRangeError": "kit.errors",
    "LocalHost": "kit.hosts",
    "ModelConfigError": "kit.errors",
    "PackageNotFound": "kit.errors",
    "parse_command": "kit.server_args",
    "parse_log": "kit.server_args",
    "parse_log_file": "kit.server_args",
    "parse_target": "kit.target",
    "resolve_server": "kit.target",
    "ParseError": "kit.errors",
    "RemoteFileError": "kit.errors",
    "RequestResult": "kit.bench",
    "ServerArgsSnapshot": "kit.server_args",
    "ServerProcess": "kit.target",
    "SourceError": "kit.errors",
    "SourceFileNotFound": "kit.errors",
    "SourceSnippet": "kit.source",
    "SourceTree": "kit.source",
    "SSHHost": "kit.hosts",
    "SymbolNotFound": "kit.errors",
    "TargetError": "kit.errors",
    "UnknownHostKey": "kit.errors",
}
# Kept for one release: the name's old meaning now lives under another name.
_RENAMED = {
    # find_server(host, "lab") found the lab's server; kit.target.find_server no longer knows the lab.
    "find_server": ("kit.target", "resolve_server"),
}

__all__ = sorted([*_EXPORTS, *_RENAMED], key=str.lower)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(_import_module(_EXPORTS[name]), name)
    elif name in _RENAMED:
        module, real = _RENAMED[name]
        value = getattr(_import_module(module), real)
    else:
        raise AttributeError(f"module 'kit' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
