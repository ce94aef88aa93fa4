"""From sglang flags to the arguments a real sglang 0.5.11 server would run with.

The lab never guesses what SGLang resolves. Flags are checked with an argparse parser
built from the flag table of the real sglang source installed next to the lab, so a bad
flag fails the way sglang fails. The effective arguments then come from:

1. the dry-run (``kit.dryrun``, real ``ServerArgs.__post_init__`` in its own environment),
   when that environment exists on this machine;
2. otherwise, committed snapshots of real resolved arguments for the scenario's launch
   variants (``kit/data/resolved/``), each made by the dry-run from a recorded command.
   Flags that only name where the server listens or what it logs may differ from the
   recorded command; anything else must match one of the variants.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit._remote.locate import locate
from kit.errors import LabArgsError, LabError, ParseError
from kit.server_args import FlagSpec, FlagTable, cli_defaults, flag_table, parse_command, parse_log

__all__ = [
    "FREE_FIELDS",
    "LabArgsError",
    "LocalSource",
    "LaunchArgs",
    "ResolvedLaunch",
    "build_argparser",
    "load_launches",
    "effective_args_for",
    "sglang_source",
]

RESOLVED_ENV = "SGL_KIT_LAB_RESOLVED"
DRYRUN_ENV = "SGL_KIT_LAB_DRYRUN"
_RESOLVED = Path(__file__).resolve().parent.parent / "data" / "resolved"

# Fields that say where the server listens, what it is called and what it logs. SGLang's
# resolution does not read them to decide anything else, so a snapshot made with other
# values still holds; the lab sets them from the flags given.
FREE_FIELDS = frozenset({
    "model_path", "tokenizer_path", "served_model_name", "host", "port", "trust_remote_code",
    "enable_metrics", "log_level", "log_level_http", "log_requests", "log_requests_level",
    "decode_log_interval", "enable_cache_report", "stream_response_default_include_usage",
    "incremental_streaming_output", "api_key", "admin_api_key", "random_seed", "weight_version",
    "skip_server_warmup", "watchdog_timeout", "download_dir", "show_time_cost", "crash_dump_folder",
})



# --------------------------------------------------------------------------- the source


@dataclass
class LocalSource:
    """A package directory on this machine, read directly (the server's own sglang)."""

    root: str
    version: str | None = None
    package: str = "sglang"

    def read_text(self, path: str) -> str:
        rel = path[len(self.package) + 1:] if path.startswith(self.package + "/") else path
        return (Path(self.root) / rel).read_text(encoding="utf-8", errors="replace")

    def files(self, pattern: str = "**/*.py") -> list[str]:
        root = Path(self.root)
        found = root.rglob(pattern) if "/" not in pattern else root.glob(pattern)
        return sorted(p.relative_to(root).as_posix() for p in found if p.is_file())


def sglang_source() -> LocalSource:
    """The sglang package this interpreter would import, found (without importing it) by the
    same locate script the kit runs on every target."""
    found = locate("sglang")
    if not found.get("found"):
        raise LabError(
            "the lab needs the sglang source next to it, and this interpreter has none",
            hint="start it with `sgl-kit lab up`, which installs sglang 0.5.11's source into the lab's "
                 "ml-env, or run it with that ml-env's python",
        )
    return LocalSource(found["package_dir"], found.get("version"))


# --------------------------------------------------------------------------- argparse


_TYPES = {"int": int, "float": float, "str": str}


def build_argparser(flags: FlagTable, prog: str = "launch_server.py") -> argparse.ArgumentParser:
    """An argparse parser with sglang's flags, so bad input fails in sglang's own words."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", help="read flags from a YAML file, as sglang does")
    for spec in flags:
        try:
            parser.add_argument(*spec.option_strings, **_argparse_kwargs(spec))
        except (argparse.ArgumentError, ValueError, TypeError):
            continue  # an option string argparse already has (aliases across flags)
    return parser


def _argparse_kwargs(spec: FlagSpec) -> dict[str, Any]:
    dest = "flag_" + re.sub(r"\W", "_", spec.dest)
    kind = spec.kind
    if kind in ("store_true", "store_false", "count"):
        return {"action": kind, "dest": dest}
    if kind == "boolean_optional":
        return {"action": argparse.BooleanOptionalAction, "dest": dest}
    if kind == "store_const" or (kind == "ignore" and spec.arity == (0, 0)):
        return {"action": "store_const", "const": spec.const, "dest": dest}
    kwargs: dict[str, Any] = {"dest": dest, "required": spec.required, "metavar": spec.dest.upper(),
                              "type": _TYPES.get(spec.type or "", str)}
    if kind in ("append", "extend"):
        kwargs["action"] = kind
    if spec.nargs is not None:
        kwargs["nargs"] = spec.nargs
    if spec.choices and all(isinstance(c, (str, int, float)) for c in spec.choices):
        kwargs["choices"] = list(spec.choices)
        del kwargs["metavar"]  # argparse shows {a,b,c}, as sglang's usage does
    return kwargs


# --------------------------------------------------------------------------- launches


@dataclass(frozen=True)
class ResolvedLaunch:
    """One launch variant: its command and the arguments sglang resolved for it."""

    variant: str
    command: tuple[str, ...]
    fields: Mapping[str, Any] = field(repr=False)
    model_path: str
    sglang_version: str
    source: str
    scenario: str = ""  # the lab scenario it was resolved for ("" : any)

    def flags(self) -> list[str]:
        """The launch's sglang flags."""
        return list(self.command)


def load_launches(version: str, directory: str | os.PathLike | None = None,
                  scenario: str | None = None) -> list[ResolvedLaunch]:
    """The committed snapshots for one sglang version and lab scenario (``$SGL_KIT_LAB_SCENARIO``,
    else ``incident``; a file named ``<scenario>-<variant>-<version>.json`` belongs to it), in variant
    order (new, old, fixed, ...)."""
    base = Path(directory or os.environ.get(RESOLVED_ENV) or _RESOLVED)
    scenario = scenario or os.environ.get("SGL_KIT_LAB_SCENARIO") or "incident"
    if scenario.endswith((".yaml", ".yml", ".json")):  # a scenario file: its own name says whose launches
        from .throughput import load_scenario

        scenario = load_scenario(scenario).name
    found = [_read_launch(p) for p in sorted(base.glob("*.json"))]
    launches = [x for x in found if x is not None and x.sglang_version == version
                and x.scenario in ("", scenario)]
    order = {"new": 0, "old": 1, "fixed": 2, "nospec": 3, "nospec_fixed": 4}
    return sorted(launches, key=lambda x: (order.get(x.variant, 9), x.variant))


_NAME = re.compile(r"^(?:(?P<scenario>[a-z0-9-]+?)-)?(?P<variant>[a-z0-9_]+)-(?P<version>\d[\w.]*)$")


def _read_launch(path: Path) -> ResolvedLaunch | None:
    """One snapshot written by ``sgl-kit dryrun ... --save`` (kit/dryrun)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    line = data.get("server_args_line") if isinstance(data, dict) else None
    if not line or not data.get("made_by"):
        return None
    match = _NAME.match(path.stem)
    return ResolvedLaunch(
        variant=str(data.get("variant") or (match["variant"] if match else path.stem)),
        command=tuple(_user_flags(data)),
        fields=dict(parse_log(line).fields),
        model_path=str(data.get("model") or ""),
        sglang_version=str(data.get("sglang") or ""),
        source=str(path),
        scenario=str(match["scenario"] or "") if match else "",
    )


def _user_flags(data: Mapping[str, Any]) -> list[str]:
    """The flags a person typed: those after ``--`` in the recorded dry-run command, plus its --tp.

    The dry-run also passes ``--device cuda`` (there is no GPU to detect); a real launch
    leaves the device to sglang, so it is not part of the launch.
    """
    made_by = str(data["made_by"])
    flags = shlex.split(made_by.split(" -- ", 1)[1]) if " -- " in made_by else []
    tp = data.get("tp")
    if tp and not any(f.split("=", 1)[0] in ("--tp", "--tp-size", "--tensor-parallel-size") for f in flags):
        flags += ["--tp-size", str(tp)]
    return flags


# --------------------------------------------------------------------------- resolution


@dataclass
class LaunchArgs:
    """The effective arguments for a set of flags, and how they were obtained."""

    fields: dict[str, Any]
    explicit: dict[str, Any]
    method: str                 # "dry-run" or "snapshot"
    variant: str | None = None
    source: str = ""

    def __repr__(self) -> str:
        how = f"snapshot {self.variant}" if self.method == "snapshot" else self.method
        return f"<LaunchArgs {len(self.fields)} fields from {how}>"


def effective_args_for(argv: Sequence[str], tree: LocalSource | None = None) -> LaunchArgs:
    """Effective arguments for sglang flags: the dry-run if available, else a matching snapshot.

    Raises SystemExit(2) with argparse's message for flags sglang itself would reject,
    and LabArgsError for valid flags the lab has no resolution for.
    """
    tree = tree or sglang_source()
    flags = flag_table(tree)
    build_argparser(flags).parse_args(list(argv))
    try:
        explicit = parse_command(list(argv), flags)
    except ParseError as err:
        raise LabArgsError(err.message, hint=err.hint) from None
    fields = _dryrun(argv, explicit, tree)
    if fields is not None:
        return LaunchArgs(fields, explicit, "dry-run")
    return _from_snapshots(explicit, flags, tree)


def _dryrun(argv: Sequence[str], explicit: Mapping[str, Any], tree: LocalSource) -> dict | None:
    """Fields resolved by the dry-run, or None when its environment is not set up here.

    ``$SGL_KIT_LAB_DRYRUN=0`` skips it (faster starts); ``=1`` requires it.
    """
    wanted = os.environ.get(DRYRUN_ENV, "auto").lower()
    if wanted in ("0", "no", "off", "false"):
        return None
    try:
        from kit import dryrun
    except ImportError:
        dryrun = None
    version = tree.version or "?"
    ready = dryrun is not None and version in dryrun.supported_versions() and dryrun.environment(version).ready
    if not ready:
        if wanted in ("1", "yes", "on", "true"):
            raise LabArgsError(f"{DRYRUN_ENV}=1 but the dry-run for sglang {version} is not set up here",
                               hint=f"run `sgl-kit dryrun setup --sglang {version}`, or unset {DRYRUN_ENV}")
        return None
    result = dryrun.dry_run(list(argv), model=explicit.get("model_path"), gpu=_gpu(), sglang=version)
    if not result.ok:
        raise LabArgsError(f"sglang {version} would not start with these flags: {result.error}",
                           hint="this is sglang's own startup error, found by the dry-run")
    return dict(parse_log(result.server_args_line).fields)


def _gpu() -> str:
    from .throughput import load_scenario

    scenario = load_scenario()
    gpu = scenario.params.get("gpu")
    if not gpu:
        raise LabArgsError(f"the lab scenario {scenario.name!r} ({scenario.path}) names no `gpu:`, so the dry-run "
                           "cannot tell which GPU to resolve its flags for",
                           hint="add `gpu: <profile>` (a name from kit/data/gpus.yaml) to the scenario file")
    return str(gpu)


def _from_snapshots(explicit: Mapping[str, Any], flags: FlagTable, tree: LocalSource) -> LaunchArgs:
    version = tree.version or "?"
    launches = load_launches(version)
    if not launches:
        raise LabArgsError(
            f"the lab has no resolved arguments for sglang {version} and the dry-run is not set up",
            hint=_dryrun_hint(version),
        )
    field_defaults = {k: v.value for k, v in cli_defaults(tree).items() if v.known}
    for launch in launches:
        theirs = parse_command(list(launch.command), flags, strict=False)
        if _same_launch(explicit, theirs, field_defaults):
            return LaunchArgs(_adapt(launch, explicit), dict(explicit), "snapshot", launch.variant,
                              launch.source)
    raise LabArgsError(_unsupported(explicit, launches, flags, field_defaults), hint=_dryrun_hint(version))


def _same_launch(mine: Mapping[str, Any], theirs: Mapping[str, Any], field_defaults: Mapping) -> bool:
    return not _differences(mine, theirs, field_defaults)


def _differences(mine: Mapping[str, Any], theirs: Mapping[str, Any], field_defaults: Mapping) -> list[str]:
    # Restating a default is the same launch: __post_init__ sees the same value either way.
    names = (set(mine) | set(theirs)) - FREE_FIELDS
    missing = object()
    return sorted(
        n for n in names
        if mine.get(n, field_defaults.get(n, missing)) != theirs.get(n, field_defaults.get(n, missing))
    )


def _adapt(launch: ResolvedLaunch, explicit: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot's fields with this server's model path and free flags."""
    model_path = explicit.get("model_path")
    fields = {}
    for name, value in launch.fields.items():
        if model_path and launch.model_path and value == launch.model_path:
            value = model_path
        fields[name] = value
    for name in FREE_FIELDS & set(explicit):
        fields[name] = explicit[name]
    return fields


def _unsupported(explicit: Mapping, launches: list[ResolvedLaunch], flags: FlagTable, field_defaults) -> str:
    lines = ["without the dry-run the lab can resolve only these launches (host, port, model path "
             "and logging flags may differ):"]
    for launch in launches:
        theirs = parse_command(list(launch.command), flags, strict=False)
        diff = _differences(explicit, theirs, field_defaults)
        lines.append(f"  {launch.variant}: {' '.join(_without_free(launch.flags(), flags))}")
        lines.append(f"      differs from yours in: {', '.join(diff)}")
    return "\n".join(lines)


def _without_free(tokens: list[str], flags: FlagTable) -> list[str]:
    out, i = [], 0
    while i < len(tokens):
        tok = tokens[i]
        spec = flags.get(tok.split("=", 1)[0]) if tok.startswith("-") else None
        if spec is not None and spec.field in FREE_FIELDS:
            i += 1 if "=" in tok or spec.arity[1] == 0 else 2
            continue
        out.append(tok)
        i += 1
    return out


def _dryrun_hint(version: str) -> str:
    return (f"use `sgl-kit lab up --variant new|old|fixed`, or set up the dry-run "
            f"(`sgl-kit dryrun setup --sglang {version}`) so the lab resolves any flags with real sglang")
