"""What every ``sgl-kit`` command shares: the common options, the target's host, JSON output.

A command module registers its sub-commands with ``register(sub)`` and takes what it
needs from here; nothing else in ``kit/`` registers commands or prints JSON for the CLI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from kit._text import plain as jsonable
from kit.errors import UsageError

__all__ = ["Parser", "check_since", "common_options", "console", "emit_json", "host_for", "launch_options", "local_file",
           "plain", "prometheus_options", "ssh_options", "tree_for"]


class Parser(argparse.ArgumentParser):
    """argparse with no guessing and with suggestions: an abbreviated option (``--baselin``) is an error,
    not a silent expansion, and a mistyped command or option says what was probably meant."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D102 - argparse's own hook
        hint = self.suggestion(message)
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n" + (f"  -> {hint}\n" if hint else ""))

    def suggestion(self, message: str) -> str:
        """'did you mean ...?' for an invalid choice or an unrecognized option, else ''."""
        import difflib
        import re

        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            known = re.findall(r"'([^']*)'", choice[2])
            close = difflib.get_close_matches(choice[1], known, n=2, cutoff=0.6)
            return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if unknown:
            options = [o for o in self._option_string_actions if o.startswith("--")]
            found = []
            for token in unknown[1].split():
                name = token.split("=", 1)[0]
                if name.startswith("--"):
                    close = difflib.get_close_matches(name, options, n=1, cutoff=0.75)
                    if close:
                        found.append((name, close[0]))
            if len(found) == 1:
                return f"did you mean {found[0][1]}?"
            return ("did you mean " + ", ".join(f"{c} (for {n})" for n, c in found) + "?") if found else ""
        return ""


def common_options(parser: argparse.ArgumentParser, suppress: bool = True) -> argparse.ArgumentParser:
    """Options accepted before or after the sub-command (``suppress``: the top level owns the defaults)."""
    d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    g = parser.add_argument_group("common options")
    g.add_argument("--json", action="store_true", default=d(False), help="print JSON for scripts")
    g.add_argument("--python", metavar="PY", default=d("python3"),
                   help="interpreter on the target whose sglang to read (default: python3)")
    g.add_argument("--package-dir", metavar="DIR", default=d(None),
                   help="sglang package directory on the target (skips --python lookup)")
    g.add_argument("--trust-new-host", action="store_true", default=d(False),
                   help="accept and record an unknown SSH host key (check its fingerprint first)")
    g.add_argument("--identity", "-i", metavar="FILE", default=d(None), help="SSH private key file")
    g.add_argument("--known-hosts", metavar="FILE", default=d(None),
                   help="known_hosts file (default: ~/.ssh/known_hosts or UserKnownHostsFile)")
    g.add_argument("--ssh-config", metavar="FILE", default=d("~/.ssh/config"), help="ssh config file")
    g.add_argument("--timeout", type=float, metavar="SEC", default=d(60.0),
                   help="per-command timeout on the target (default: 60)")
    return parser


def launch_options(group) -> None:
    """--model, --gpu, --tp, --env: what a dry-run needs besides the flags (dryrun, upgrade-diff)."""
    group.add_argument("--model", metavar="DIR_OR_CONFIG_JSON",
                       help="the model's directory or config.json (default: --model-path among the flags)")
    group.add_argument("--gpu", default=None, metavar="GPU",
                       help="the target's GPU: a key of `sgl-kit dryrun gpus` (h100, a6000, ...) or the name "
                            "nvidia-smi prints; required for a dry-run")
    group.add_argument("--tp", type=int, metavar="N", help="tensor parallel size (adds --tp-size N)")
    group.add_argument("--env", metavar="KEY=VALUE", action="append", default=[],
                       help="an environment variable for the server, e.g. SGLANG_ENABLE_SPEC_V2=1 (repeatable)")


def prometheus_options(parser, since: str = "24h", what: str = "") -> None:
    """--prometheus URL, --prometheus-timeout, --since, --selector: a Prometheus that scrapes the server
    (timeline, doctor). Its credentials come from the environment only, never from argv."""
    g = parser.add_argument_group("Prometheus (credentials from $SGL_KIT_PROMETHEUS_TOKEN, or "
                                  "$SGL_KIT_PROMETHEUS_USER and $SGL_KIT_PROMETHEUS_PASSWORD)")
    g.add_argument("--prometheus", metavar="URL", help="a Prometheus server that scrapes the SGLang server" + what)
    g.add_argument("--since", default=since, help=f"how far back (default: {since}; 90s, 15m, 7d ...)")
    g.add_argument("--selector", default=None, metavar="'{label=\"v\"}'",
                   help="PromQL label set for the server's series (default: its port, with a TARGET's server)")
    g.add_argument("--prometheus-timeout", type=float, default=10.0, metavar="SEC",
                   help="timeout of each Prometheus call (default: 10)")


def check_since(args) -> None:
    """--since (and --step, when the command has it) as a positive duration, or a one-line error."""
    from kit.metrics import parse_duration

    for option, value in (("--since", getattr(args, "since", None)), ("--step", getattr(args, "step", None))):
        try:
            if value is not None and parse_duration(value) <= 0:
                raise ValueError(f"{option} must be positive, not {value!r}")
        except ValueError as err:
            raise UsageError(f"{option}: {err}", hint="write it as 90s, 15m, 24h, 7d or 1h30m") from None


def ssh_options(args) -> dict[str, Any]:
    """The SSH keywords of kit.target.connect, from the common options (empty for non-SSH targets)."""
    from kit.target import parse_target

    if parse_target(args.target)["kind"] != "ssh":
        return {}
    from kit.hosts.kept import persist_seconds

    # A command line keeps its SSH connection for the next one (kit.hosts.kept; SGL_KIT_SSH_PERSIST=0: never).
    return {"trust_new_host": args.trust_new_host, "key_filename": args.identity,
            "known_hosts": args.known_hosts, "config_file": args.ssh_config, "default_timeout": args.timeout,
            "persist": persist_seconds()}


def host_for(args):
    """The Host that ``args.target`` names."""
    from kit.target import connect

    return connect(args.target, **ssh_options(args))


def server_options(parser: argparse.ArgumentParser) -> None:
    """--pid / --port: which SGLang server on the target, when it runs several."""
    parser.add_argument("--pid", type=int, help="the SGLang server's process id, when the target runs several")
    parser.add_argument("--port", type=int, help="the SGLang server's HTTP port, when the target runs several")


def tree_for(host, args):
    """The sglang source the command reads: --package-dir, the lab's, --python's, or the server's.

    When --python is left at python3 and python3 there cannot import sglang, the source is
    that of the SGLang server discovered on the target (the interpreter it runs with).
    """
    from kit.errors import PackageNotFound
    from kit.source import SourceTree

    server = server_for(host, args)
    if args.package_dir:
        return SourceTree.at(host, args.package_dir)
    if server is not None and server.sglang_dir:
        return SourceTree.of_server(server)
    try:
        return SourceTree.locate(host, "sglang", python=args.python)
    except PackageNotFound as missing:
        if args.python != "python3":
            raise
        server = _the_one_server(host, missing)
        sys.stderr.write(f"sgl-kit: python3 on {host.name} cannot import sglang; reading the source of the "
                         f"SGLang server pid {server.pid} ({server.python})\n")
        args.server = server
        return SourceTree.of_server(server)


def _the_one_server(host, missing):
    from kit.errors import TargetError
    from kit.target import discover

    found = [s for s in discover(host) if s.sglang_dir]
    if not found:
        raise missing
    if len(found) > 1:
        listing = "; ".join(f"pid {s.pid} port {s.port} ({s.python})" for s in found)
        raise TargetError(f"python3 on {host.name} cannot import sglang, and {len(found)} SGLang servers run "
                          f"there: {listing}", hint="choose one with --pid PID or --port PORT, or pass --python PY")
    return found[0]


def server_for(host, args, required: bool = False, prefetch: bool | dict = False):
    """The SGLang server the command is about, found by discovery, or None.

    Target ``lab``, --pid or --port ask for one; ``required`` asks for one anyway (the only
    server there, or an error listing them). Found once per command (``args.server``).
    """
    from kit.target import parse_target

    if getattr(args, "server", None) is not None:
        return args.server
    pid, port = getattr(args, "pid", None), getattr(args, "port", None)
    lab = parse_target(args.target)["kind"] == "lab"
    if not (lab or pid or port or required):
        return None
    from kit.target import resolve_server

    args.server = resolve_server(host, args.target, pid=pid, port=port, prefetch=prefetch)  # kit.target.discover
    if args.server.notice:  # the target's one line about what it found (the lab's launch), on stderr
        sys.stderr.write(f"sgl-kit: {args.server.notice}\n")
    return args.server


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def emit_json(obj) -> None:
    """The one way a command prints JSON: indented, anything else as str; values kept under a secret-looking
    name (kit._secrets.mask_named) are masked."""
    from kit._secrets import mask_named

    safe = mask_named(json.loads(json.dumps(obj, default=str)))
    json.dump(safe, sys.stdout, indent=2)
    sys.stdout.write("\n")


class _MaskedStream:
    """A text stream that passes each whole line through the report's redactor before the real stream."""

    def __init__(self, inner, redactor) -> None:
        self.inner, self.redactor, self.pending = inner, redactor, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            whole, self.pending = self.pending.rsplit("\n", 1)
            self.inner.write(self._masked(whole + "\n"))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.inner.write(self._masked(self.pending))
            self.pending = ""
        self.inner.flush()

    def _masked(self, text: str) -> str:
        """The text redacted; the values the kit's data already holds masked (kit._secrets.MASK) are counted too."""
        from kit._secrets import MASK

        if MASK in text:
            self.redactor.counts["named_value"] += text.count(MASK)
        return self.redactor.text(text)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def masks_secrets(func):
    """For a command whose output is launches and server data (never sglang's source, whose code the redactor
    would misread): every line it prints has secret values masked by the report's redactor (flags such as
    ``--api-key``, ``HF_TOKEN=``, URL passwords), and stderr says how many."""
    import functools

    @functools.wraps(func)
    def run(args):
        from kit.report.redaction import Redactor, masked_note

        stream = _MaskedStream(sys.stdout, Redactor(hosts=False))
        real, sys.stdout = sys.stdout, stream
        try:
            return func(args)
        finally:
            sys.stdout = real
            stream.flush()
            if note := masked_note(stream.redactor.counts):
                sys.stderr.write(f"sgl-kit: {note} in this output (secret-named flags, variables, URL passwords)\n")

    return run


def plain(value):
    """A table cell as JSON-safe data: NA (and NaN) becomes None, objects their text (``kit._text.plain``)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    pd = sys.modules.get("pandas")  # a cell of a table: pandas' own NA, NaT; never imported for a plain value
    if pd is not None:
        try:
            if pd.isna(value):
                return None
        except (TypeError, ValueError):
            pass
    return jsonable(value, str)


def local_file(path: str) -> str:
    if os.path.isdir(path):
        inside = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))[:4]
        raise UsageError(f"{path} is a directory; this takes one file",
                         hint=(f"give one of its files, e.g. {os.path.join(path, inside[0])}" if inside
                               else "give the path of a file (a log, a /server_info JSON or a launch command)"))
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}", hint="give the path of a file on this machine")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path} is not readable by this user", hint="check its permissions")
    return path
