"""A launch from a file a colleague sent: a log, a ``/server_info`` JSON, or a launch command.

``read_launch(path)`` tells the three apart by their content and returns a
kit.server_args.LaunchSide: what the launch asked (a command says; a log or /server_info
does not), what the server ran with, and how that was obtained. A launch command is read
with the flag table of a real sglang source and resolved with the dry-run when its
environment is set up, else filled with that version's defaults.

``source_tree(package_dir=..., sglang=...)`` is the sglang source such a file is read with:
a directory on this machine, or a release downloaded once (``pip download --no-deps``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .errors import NotGiven, UsageError

__all__ = ["LaunchOptions", "read_launch", "source_tree"]


@dataclass
class LaunchOptions:
    """How to resolve a launch command: with the dry-run (unless ``dryrun`` is False), for the model
    at ``model`` (default: its --model-path, when that is on this machine) and the GPU ``gpu`` (a key
    of kit/data/gpus.yaml or the name nvidia-smi prints). A file does not say which GPU it ran on, so
    without ``gpu`` the command is not resolved: its flags are read over the version's defaults."""

    dryrun: bool = True
    model: str | None = None
    gpu: str | None = None
    progress: Callable[[str], None] | None = None


_LOCAL = None  # kit.hosts.LocalHost shared by the trees source_tree opens


def source_tree(package_dir: str | None = None, sglang: str | None = None, *, required: bool = False,
                why: str = "a launch command needs sglang's flag table to be read", download: bool = True):
    """The sglang source on this machine: ``package_dir``, or release ``sglang`` (downloaded once; with
    ``download=False`` only from the cache, else PackageNotFound)."""
    from ._paths import tree_dir
    from ._wheels import install_package_source
    from .hosts import LocalHost
    from .source import SourceTree

    global _LOCAL
    if _LOCAL is None:  # one host (one helper process and its reader thread) for every tree read here, not one each
        _LOCAL = LocalHost()
    if package_dir:
        return SourceTree.at(_LOCAL, package_dir)
    if sglang:
        prefix = tree_dir("sglang", sglang)
        return SourceTree.at(_LOCAL, install_package_source("sglang", sglang, prefix=str(prefix),
                                                                    download=download))
    if not required:
        return None
    raise NotGiven(why, hint="add --sglang VERSION (the release it was written for) or --package-dir DIR")


def read_launch(path: str, tree=None, options: LaunchOptions | None = None, *, tree_source=None):
    """The LaunchSide that the file at ``path`` (on this machine) describes.

    ``tree`` reads a launch command's flags; when it is None and the file is a command,
    ``tree_source()`` is called for one (so a log never makes the kit download sglang).
    """
    from .server_args import LaunchSide, cli_defaults, from_server_info, parse_log_file_all

    options = options or LaunchOptions()
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}", hint="give the path of a log, a /server_info JSON or a file "
                                                      "holding a launch command, on this machine")
    with open(path, "rb") as fh:
        head = fh.read(4096).decode("utf-8", "replace")
    defaults = cli_defaults(tree) if tree is not None else None
    if head.lstrip().startswith("{"):
        with open(path, "rb") as fh:
            snap = from_server_info(fh.read())
        return LaunchSide(path, "server_info", snap.fields, "/server_info", defaults=defaults)
    if "server_args=" in head or _mentions(path, b"server_args="):
        snap = parse_log_file_all(path)[-1]
        cut = f"; cut off after `{next(reversed(snap.fields), None)}`, the fields after it unknown" \
            if snap.truncated else ""
        return LaunchSide(path, "log", snap.fields, "the server_args line of its log" + cut, defaults=defaults,
                          partial=snap.truncated, decode=_decode_of(path))
    if _mentions(path, b"Decode batch"):
        decode = _decode_of(path)
        return LaunchSide(path, "log", {}, f"{decode['all_lines']} Decode batch lines, no server_args line: "
                          "its arguments are unknown", defaults=defaults, partial=True, decode=decode)
    if tree is None:
        tree = tree_source() if tree_source is not None else source_tree(required=True)
    with open(path, errors="replace") as fh:
        return _command_side(path, fh.read(), options, tree)


def _command_side(path: str, command: str, options: LaunchOptions, tree):
    """A launch command (any text kit.server_args.read_launch_text reads: a script, YAML, a unit,
    docker run, ...): what it asked, and what sglang resolves from it (the dry-run, when it can run).
    Flags whose value cannot be read are unknown on this side, never defaults."""
    from .errors import ParseError
    from .server_args import LaunchSide, cli_defaults, flag_table, parse_log, read_launch_text

    found = read_launch_text(command, flag_table(tree), where=path)
    launch = found.primary
    problems = [str(p) for p in found.all_problems()]
    if launch is None:
        raise ParseError(f"{path}: {problems[0] if problems else 'no sglang launch in it'}", position=0,
                         hint="give a log, a /server_info JSON, or a file with the launch command (a script, "
                              "docker run, Kubernetes/compose YAML, a systemd unit or sgl.Engine(...))")
    explicit = launch.explicit
    defaults = cli_defaults(tree)
    requested = {name: fd.value for name, fd in defaults.items() if fd.known}
    requested.update(explicit)
    for name in launch.unreadable:
        requested.pop(name, None)
    result, why_not = _dry_run(path, launch.readable_argv, explicit, options, tree)
    if result is None:
        method = f"its flags over the defaults of sglang {tree.version}; not resolved: {why_not}"
        return LaunchSide(path, "command", requested, method, explicit=explicit, defaults=defaults,
                          unknown=tuple(launch.unreadable), problems=problems)
    changed = {c.field: c.where for c in result.changes}
    return LaunchSide(path, "command", parse_log(result.server_args_line).fields,
                      f"resolved by the dry-run of sglang {tree.version}", explicit=explicit, defaults=defaults,
                      changed=changed, unknown=tuple(launch.unreadable), problems=problems)


def _decode_of(path: str) -> dict | None:
    """decode_summary of a log's Decode batch lines (None without any)."""
    from .server_args import decode_summary, parse_decode_stats

    with open(path, "rb") as fh:
        stats = parse_decode_stats(fh.read().decode("utf-8", "replace"))
    return decode_summary(stats) if stats else None


def _dry_run(path: str, command: str, explicit: dict, options: LaunchOptions, tree):
    """(DryRunResult, None), or (None, why it could not run)."""
    from .dryrun import dry_run, environment, supported_versions
    from .server_args import server_flags

    version = tree.version
    if not options.dryrun:
        return None, "--no-dryrun"
    if version not in supported_versions() or not environment(version).ready:
        return None, f"no dry-run environment for sglang {version} (sgl-kit dryrun setup --sglang {version})"
    if not options.gpu:
        return None, ("no GPU given, and the file does not say which it ran on (--gpu KEY, e.g. --gpu h100; "
                      "`sgl-kit dryrun gpus` lists them)")
    model = options.model or explicit.get("model_path")
    if not model or not os.path.exists(os.path.expanduser(str(model))):
        return None, f"the model's config.json is not on this machine ({model}); pass --model DIR_OR_CONFIG_JSON"
    say = options.progress or (lambda text: sys.stderr.write(text + "\n"))
    say(f"resolving {path} with the dry-run of sglang {version} (about 10 s)")
    result = dry_run(list(command) if isinstance(command, list) else server_flags(command), model=options.model, sglang=version, gpu=options.gpu)
    if not result.ok:
        return None, f"sglang {version} would not start with these flags: {result.error.headline}"
    return result, None


def _mentions(path: str, needle: bytes) -> bool:
    """Whether a (possibly huge) file contains ``needle``, read in blocks."""
    with open(path, "rb") as fh:
        tail = b""
        for block in iter(lambda: fh.read(1 << 20), b""):
            if needle in tail + block:
                return True
            tail = block[-len(needle):]
    return False
