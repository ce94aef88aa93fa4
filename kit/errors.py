"""One tree of errors for the whole kit.

Every message says what was tried, where, and what to do next, because the
person reading it is usually on a production box at night with no time to
read our source. Every error the kit raises on purpose is defined here, and
nowhere else (``tests/test_layers.py`` checks it)::

    KitError                      hint: what to do next
    ├── HostError                 host: where it happened
    │   ├── ConnectError
    │   │   ├── HostUnreachable
    │   │   ├── ConnectionRefused
    │   │   ├── AuthenticationFailed
    │   │   ├── UnknownHostKey
    │   │   └── HostKeyChanged
    │   ├── HostDisconnected
    │   ├── CommandFailed         result: the CommandResult
    │   ├── CommandTimeout        partial: what ran before the kill (on a host, or by kit/_proc.run)
    │   └── RemoteFileError
    ├── SourceError
    │   ├── PackageNotFound
    │   ├── SourceFileNotFound
    │   ├── LineRangeError
    │   ├── SymbolNotFound
    │   ├── AmbiguousSymbol
    │   └── SourceInputError      also a ValueError
    ├── ParseError                position: where parsing stopped
    ├── UnknownFlag               suggestions: names it may have meant
    ├── TargetError
    ├── ModelConfigError
    ├── UnknownGPU                also a ValueError
    ├── NotGiven                  also a ValueError
    ├── BenchError
    ├── DryRunError
    │   ├── UnsupportedVersion    also a ValueError
    │   ├── EnvironmentMissing
    │   └── SetupFailed           step, package: which step failed
    ├── LabError
    │   └── LabArgsError
    ├── MetricsError              url: the /metrics page or Prometheus asked
    │   ├── PrometheusUnreachable
    │   ├── PrometheusAuthRequired
    │   └── PrometheusQueryError
    ├── TraceError                path: the trace file
    ├── ReportError               notebooks unreadable, or the report unwritable
    ├── DataFileError             a data file of the kit itself is missing or malformed
    ├── UsageError                a bad, missing or conflicting argument or option
    ├── PracticeError             also a ValueError: no corpus, an unknown case or hypothesis
    └── CaseError                 a captured case unreadable: not a case, a newer format, an excerpt changed
"""

from __future__ import annotations

__all__ = [
    "AmbiguousSymbol",
    "AuthenticationFailed",
    "BenchError",
    "CaseError",
    "CommandFailed",
    "CommandTimeout",
    "ConnectError",
    "ConnectionRefused",
    "DataFileError",
    "DryRunError",
    "EnvironmentMissing",
    "HostDisconnected",
    "HostError",
    "HostKeyChanged",
    "HostUnreachable",
    "KitError",
    "LabArgsError",
    "LabError",
    "LineRangeError",
    "MetricsError",
    "ModelConfigError",
    "NotGiven",
    "PackageNotFound",
    "ParseError",
    "PracticeError",
    "PrometheusAuthRequired",
    "PrometheusQueryError",
    "PrometheusUnreachable",
    "RemoteFileError",
    "ReportError",
    "SetupFailed",
    "SourceError",
    "SourceFileNotFound",
    "SourceInputError",
    "SymbolNotFound",
    "TargetError",
    "TraceError",
    "UnknownFlag",
    "UnknownGPU",
    "UnknownHostKey",
    "UnsupportedVersion",
    "UsageError",
]


class KitError(Exception):
    """Base of every error the kit raises on purpose."""

    hint: str = ""
    # The same advice in the command line's words (`--trust-new-host` where `hint` says
    # `trust_new_host=True`); the CLI prints it instead of `hint` when it is set.
    cli_hint: str = ""

    def __init__(self, message: str, *, hint: str = "", cli_hint: str = "") -> None:
        self.message = message
        if hint:
            self.hint = hint
        if cli_hint:
            self.cli_hint = cli_hint
        super().__init__(self._full())

    def _full(self) -> str:
        return f"{self.message}\n  -> {self.hint}" if self.hint else self.message


class HostError(KitError):
    """Something went wrong reaching or using a host."""

    def __init__(self, message: str, *, host: str = "", hint: str = "", cli_hint: str = "") -> None:
        self.host = host
        super().__init__(message, hint=hint, cli_hint=cli_hint)


class ConnectError(HostError):
    """Could not open a connection to a host."""


class HostUnreachable(ConnectError):
    """No answer at all (dead host, firewall, wrong address, timeout)."""


class ConnectionRefused(ConnectError):
    """The host answered but nothing listens on the port."""


class AuthenticationFailed(ConnectError):
    """The SSH server rejected every key and method offered."""


class UnknownHostKey(ConnectError):
    """The host key is not in known_hosts; we never add it silently."""


class HostKeyChanged(ConnectError):
    """The host key differs from the one in known_hosts: possible MITM."""


class HostDisconnected(HostError):
    """The connection dropped and could not be re-established."""


class CommandFailed(HostError):
    """A command exited non-zero and the caller asked for check=True."""

    def __init__(self, result, *, hint: str = "") -> None:  # result: CommandResult
        self.result = result
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-5:]
        detail = ("\n    " + "\n    ".join(tail)) if tail else ""
        super().__init__(
            f"command failed on {result.host} (exit {result.exited}): {result.command}{detail}",
            host=result.host,
            hint=hint or "check the command and its output above; run it by hand with `sgl-kit run`",
        )


class CommandTimeout(HostError):
    """A command ran past its timeout; its process group was killed."""

    def __init__(self, command: str, timeout: float, *, host: str, partial=None, hint: str = "") -> None:
        self.command = command
        self.timeout = timeout
        self.partial = partial
        super().__init__(
            f"command timed out after {timeout:g}s on {host}: {command}",
            host=host,
            hint=f"its process group was killed; {hint}" if hint else
            "its process group was killed; raise timeout= if the command is expected to be slow",
            cli_hint=f"its process group was killed; {hint}" if hint else
            "its process group was killed; raise --timeout if the command is expected to be slow",
        )


class RemoteFileError(HostError):
    """A file could not be read or inspected on a host."""


class SourceError(KitError):
    """Base for problems with a package's source tree."""


class PackageNotFound(SourceError):
    """The package is not importable by the given interpreter."""


class SourceFileNotFound(SourceError):
    """The file does not exist inside the package."""


class LineRangeError(SourceError):
    """A requested line range is empty or past the end of the file."""


class SymbolNotFound(SourceError):
    """No function or class of that qualified name in the source."""


class AmbiguousSymbol(SourceError):
    """A qualified name matches definitions in more than one file."""


class SourceInputError(SourceError, ValueError):
    """A path, pattern or name given to a SourceTree is unusable (e.g. escapes the package root)."""


class ParseError(KitError):
    """Input could not be parsed; the message says where parsing stopped."""

    def __init__(self, message: str, *, position: int | None = None, hint: str = "") -> None:
        self.position = position
        super().__init__(message, hint=hint)


class UnknownFlag(KitError):
    """No field or flag of that name in this sglang version; `suggestions` are the closest names."""

    def __init__(self, message: str, *, hint: str = "", suggestions: list[str] | None = None) -> None:
        self.suggestions = list(suggestions or [])
        super().__init__(message, hint=hint)


class TargetError(KitError):
    """A target string could not be understood or is not available yet."""


class ModelConfigError(KitError):
    """A model's config.json could not be read or is not a JSON object."""


class UnknownGPU(KitError, ValueError):
    """The GPU named is not one of the profiles in kit/data/gpus.yaml."""


class NotGiven(KitError, ValueError):
    """A fact the kit needs (the GPU, the sglang version) is in no evidence at hand and was not given."""


class BenchError(KitError):
    """A benchmark could not run at all (bad options, unreachable target, unreadable run file)."""


class DryRunError(KitError):
    """Base of the dry-run's errors."""


class UnsupportedVersion(DryRunError, ValueError):
    """No dry-run environment can be built for this sglang version."""


class EnvironmentMissing(DryRunError):
    """The dry-run environment for this version has not been set up yet."""


class SetupFailed(DryRunError):
    """A setup step failed; `step` and `package` say which."""

    def __init__(self, message: str, *, step: str, package: str | None = None, hint: str = "",
                 cli_hint: str = "") -> None:
        self.step = step
        self.package = package
        super().__init__(message, hint=hint, cli_hint=cli_hint)


class LabError(KitError):
    """The lab could not be prepared, started or stopped."""


class LabArgsError(LabError):
    """The lab cannot resolve these flags without the dry-run."""


class MetricsError(KitError):
    """A server's /metrics page or a Prometheus server could not be read; `url` says which."""

    def __init__(self, message: str, *, url: str = "", hint: str = "", cli_hint: str = "") -> None:
        self.url = url
        super().__init__(message, hint=hint, cli_hint=cli_hint)


class PrometheusUnreachable(MetricsError):
    """Nothing answered at the Prometheus URL (refused, timed out, not an HTTP server)."""


class PrometheusAuthRequired(MetricsError):
    """Prometheus answered 401/403: credentials are missing or wrong."""


class PrometheusQueryError(MetricsError):
    """Prometheus refused the query, or answered something that is not its API."""


class TraceError(KitError):
    """A file is not a torch-profiler (Chrome) trace, or cannot be read; `path` says which."""

    def __init__(self, message: str, *, path: str = "", hint: str = "", cli_hint: str = "") -> None:
        self.path = path
        super().__init__(message, hint=hint, cli_hint=cli_hint)


class ReportError(KitError):
    """A report could not be made: an input is missing or not a Jupyter notebook, or the output cannot be written."""


class DataFileError(KitError):
    """One of the kit's own data files (kit/data/, a committed table) is missing or malformed, or could not be
    made again from its source: a broken install or a bad edit."""


class UsageError(KitError):
    """What was asked cannot work as given: an argument or option (in Python or on the command line) that is
    missing, out of range, unknown or in conflict with another, or a command run where it cannot run."""


class PracticeError(KitError, ValueError):
    """The practice library: no incident corpus where it was looked for, or an unknown case or hypothesis."""


class CaseError(KitError):
    """A case directory (``sgl-kit capture``) that cannot be read or written as one: not a case, a newer
    format than this kit reads, a source excerpt whose hash no longer matches."""
