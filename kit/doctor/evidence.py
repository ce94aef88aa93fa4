"""Everything the rules read, gathered once: from a live server, or from files a colleague sent.

An ``Evidence`` holds plain data plus the sglang source tree of the server's version. Each
piece says where it came from (``sources``), and every piece that could not be read leaves
a sentence in ``problems`` (what was tried, why it failed, what to do) while the rest is
still gathered: a log without a ``server_args`` line does not stop the hardware checks.
Launch text is read by kit.server_args.read_launch_text, one flag at a time; a whole issue body
(``paste=``, or any file option holding several pieces) is split by kit.server_args.split_paste.
Fields the evidence does not tell are in ``unknown`` (never filled with defaults).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit._secrets import redact_env
from kit.errors import KitError, ParseError

from .partial import fill_cut, infer_version, prose_evidence, prose_hardware, unknown_gpu

__all__ = ["Evidence", "from_files", "from_server", "lab_stand_in"]

# The environment a server's speed depends on.
ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "SGL_", "TORCH_", "PYTORCH_")


@dataclass
class Evidence:
    target: str
    version: str | None = None
    args: dict[str, Any] = field(default_factory=dict)  # what the server runs with
    explicit: dict[str, Any] | None = None  # what its launch command set (None: not known)
    command: list[str] | None = None
    environ: dict[str, str] | None = None
    model_config: dict | None = None
    hardware: Any = None  # kit.hardware.Hardware
    tree: Any = None  # kit.source.SourceTree of the server's sglang
    decode: dict | None = None  # kit.server_args.decode_summary of its log
    bench: dict | None = None  # measured: {"tok_s": ..., "accept_length": ..., "source": ...}
    baseline: Any = None  # kit.server_args.LaunchSide
    notices: list[str] = field(default_factory=list)  # what sglang said it changed, from its log
    problems: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    # Fields whose value the evidence does not tell (a cut-off server_args line, a flag whose value
    # is `${PORT}`): field -> why. They are unknown, never the version's defaults.
    unknown: dict[str, str] = field(default_factory=dict)
    asked_unknown: list[str] = field(default_factory=list)  # fields the launch sets, to values it does not tell
    messages: list = field(default_factory=list)  # kit.server_args.LogNotice: sglang's words with their line
    launch: Any = None  # kit.server_args.LaunchText: the launch command, flag by flag, each with its origin
    capacity: dict | None = None  # sglang's ready line: max_total_num_tokens, max_running_requests, context_len
    prefill: list | None = None  # kit.server_args.PrefillStat of the log's Prefill batch lines
    pastes: list = field(default_factory=list)  # (file, kit.server_args.Paste): what was found where
    bench_serving: dict | None = None  # a pasted `bench_serving` result, key -> number
    probes: dict | None = None  # kit.provenance.host_probes of the server's host (platform.machine, ...)
    runtime: dict | None = None  # what the server did: kit.metrics.runtime_facts / page_facts (rules_metrics.add_runtime)
    trace: dict | None = None  # torch-profiler summaries and their collectives (rules_trace.add_trace)
    startup: list[str] = field(default_factory=list)  # log lines about graph capture and all-reduce setup
    unusable: list[str] = field(default_factory=list)  # files given that hold no text at all (empty, binary): why
    resolution: Any = None  # kit.doctor.resolve.Resolution: the launch as its release's code resolves it
    # How the version is known: given (--sglang, a source tree), reported (the server: its log, /server_info,
    # its installed package), stated (the text: check_env, sglang==X, an image tag), inferred (from the flags,
    # fields or dates: kit.doctor.infer) or assumed (nothing told it). version_range: the releases that fit.
    version_basis: str | None = None
    version_range: str | None = None
    version_guess: Any = None  # kit.doctor.infer.VersionGuess, when inferred or assumed

    def problem(self, what: str, err: Exception | str) -> None:
        text = getattr(err, "message", None) or str(err)
        hint = getattr(err, "hint", "")
        self.problems.append(f"{what}: {text}" + (f" ({hint})" if hint else ""))


# --------------------------------------------------------------------------- from files


def from_files(
    *, log: str | None = None, server_info: str | None = None, command: str | None = None,
    nvidia_smi: str | None = None, topo: str | list[str] | None = None, model_config: str | None = None,
    sglang: str | None = None, package_dir: str | None = None, baseline: str | None = None,
    bench: str | None = None, gpu: str | None = None, environ: str | None = None,
    progress: Callable[[str], None] | None = None, tree=None, paste: str | list[str] | None = None,
    download: bool = True, resolve_launch: bool = True,
) -> Evidence:
    """Evidence from files on this machine. The sglang source is ``package_dir``, or release
    ``sglang``, or the release the log names (downloaded once with ``pip download --no-deps``);
    ``tree`` is a kit.source.SourceTree already at hand (a notebook reuses its parsed source).
    ``paste`` is a whole issue body, chat message or runbook dump (kit.server_args.split_paste);
    any other file option holding several kinds of evidence is read the same way. With ``download=False``
    nothing is fetched: a release whose source is not cached here is read without its source, and said.
    ``resolve_launch=False`` reads the server's values as they are, as the live doctor does (a captured case
    replayed, kit.case.replay), without resolving the launch with sglang's code."""
    from kit.server_args import from_server_info

    ev = Evidence("files")
    say = progress or (lambda text: None)
    given = [p for p in [log, server_info, command, nvidia_smi, model_config, environ, baseline, bench,
                         *([topo] if isinstance(topo, str) else topo or []),
                         *([paste] if isinstance(paste, str) else paste or [])] if p]
    pastes = _pastes(ev, paste, {"--log": log, "--command": command, "--environ": environ,
                                 "--nvidia-smi": nvidia_smi})
    taken = {where for where, _ in pastes}
    log = None if log in taken else log
    command = None if command in taken else command
    environ = None if environ in taken else environ
    nvidia_smi = None if nvidia_smi in taken else nvidia_smi
    cut = None
    log_text = _read(ev, "--log", log)
    if log_text is not None:
        cut = _log_from(ev, log_text, log, "--log") or cut
    pending: list = []
    for where, found in pastes:
        cut = _paste_log(ev, where, found, pending) or cut
    info_text = _read(ev, "--server-info", server_info)
    if info_text is not None:
        try:
            snap = from_server_info(info_text.encode())
            ev.args.update(snap.fields)
            if snap.version and not ev.version:
                ev.version, ev.sources["version"] = snap.version, f"/server_info in {server_info}"
                ev.version_basis = "reported"
            ev.sources["args"] = f"/server_info in {server_info}" + (" and " + ev.sources["args"]
                                                                      if "args" in ev.sources else "")
        except KitError as err:
            ev.problem(f"--server-info {server_info}", err)
    command_text = _read(ev, "--command", command)
    _version(ev, sglang, package_dir, tree, pastes, (command, command_text))
    if not ev.version and tree is None and not package_dir:
        infer_version(ev, [command_text, *(p.text for _, f in pastes for p in f.of("launch"))],
               [log_text, *(f.text for _, f in pastes)], whole_line=cut is None)
    if tree is not None:
        ev.tree, ev.version = tree, tree.version or ev.version
        ev.sources["source"] = str(tree.root)
        ev.version_basis = ev.version_basis or "given"
    elif package_dir or ev.version:
        say(f"reading the sglang {ev.version or ''} source".replace("  ", " "))
        try:
            from kit.launch_file import source_tree

            ev.tree = source_tree(package_dir, None if package_dir else ev.version, download=download)
            ev.version = ev.tree.version or ev.version
            ev.version_basis = ev.version_basis or "given"
            ev.sources["source"] = str(ev.tree.root)
        except KitError as err:
            ev.problem(f"sglang {ev.version or package_dir} source", err)
    if cut is not None:
        _cut_fields(ev, *cut)
    if command_text is not None:
        _command_from(ev, command_text, command)
    env_text = _read(ev, "--environ", environ)
    if env_text is not None:
        ev.environ = _environ(env_text)
        ev.sources["environ"] = environ
        if not ev.environ:
            found = _yaml_env(env_text)
            if found:
                ev.environ = found
                ev.sources["environ"] = f"the env blocks of the YAML in {environ}"
            else:
                ev.problems.append(f"--environ {environ}: no {'/'.join(ENV_PREFIXES)} variable in it (KEY=VALUE "
                                   "lines, /proc/PID/environ, or Kubernetes/compose env blocks)")
    for where, found in pastes:
        _paste_rest(ev, where, found)
    _unread_launch(ev)
    _decode_alone(ev, pending)
    _hardware_from_files(ev, nvidia_smi, topo, gpu)
    _model_config(ev, model_config)
    if resolve_launch:
        _resolve_launch(ev)
    _baseline(ev, baseline)
    _bench(ev, bench)
    ev.notices = list(dict.fromkeys(ev.notices))
    if ev.version and ev.version_basis:
        ev.sources["version_basis"] = ev.version_basis
    if given and len(ev.unusable) >= len(set(given)):
        raise ParseError("; ".join(ev.unusable), position=0)
    if not ev.args and not ev.explicit and ev.launch is None:
        ev.problems.append("no server arguments: give --log (a server_args line), --server-info or --command")
    return ev


# What a file given as evidence should hold, by option (said when it holds none of it).
_SHOULD_HOLD = {
    "--paste": "a paste is the text of an issue, chat message or runbook: a launch command, server log lines "
               "(server_args, Decode batch), nvidia-smi or topo output, check_env, config.json",
    "--log": "a server log is text: sglang's server_args line, Decode/Prefill batch lines",
    "--command": "a launch command is text: a script, docker run, compose or Kubernetes YAML, a systemd unit",
    "--server-info": "a saved /server_info is JSON text (curl HOST:PORT/server_info)",
    "--environ": "the environment is text: `env` output or a copy of /proc/PID/environ",
    "--nvidia-smi": "nvidia-smi output is text: the table, or --query-gpu ... --format=csv",
    "--topo": "`nvidia-smi topo -m` or `topo -p2p r` output is text",
}


def _version(ev: Evidence, sglang, package_dir, tree, pastes, command) -> None:
    """Which sglang release to read the evidence with, and where that came from: ``--sglang``, then
    the version the server itself reported (its log, /server_info), then the versions the text
    states (check_env output, an install line or image tag, prose). Disagreements are said."""
    from kit.server_args import choose_version, stated_versions

    where, text = command
    stated = [(w, s) for w, found in pastes for s in found.versions]
    if text is not None:
        stated += [(where, s) for s in stated_versions(text)]
    if sglang:
        if ev.version and ev.version != sglang:
            ev.problems.append(f"{ev.sources.get('version', 'the log')} says sglang {ev.version}; read with "
                               f"--sglang {sglang} as given")
        ev.version, ev.sources["version"], ev.version_basis = sglang, "--sglang", "given"
    elif tree is not None or package_dir:
        return
    chosen, conflict = choose_version([s for _, s in stated])
    if ev.version:
        differ = sorted({s.version for _, s in stated if s.version != ev.version})
        if differ:
            first = {s.version: f"{w} {s.where}" for w, s in reversed(stated)}
            ev.problems.append(f"the text states sglang {', '.join(f'{v} ({first[v]})' for v in differ)}; read with "
                               f"{ev.version}, from {ev.sources.get('version', 'the log')}")
        return
    if chosen is None:
        return
    place = next(w for w, s in stated if s is chosen)
    ev.version, ev.version_basis = chosen.version, "stated"
    also = [f"line {s.line}" for w, s in stated if s is not chosen and s.version == chosen.version]
    ev.sources["version"] = f"stated in {place} {chosen.where}" + (f", also {', '.join(also[:3])}" if also else "")
    if conflict:
        ev.problems.append(f"{place}: {conflict}")


def _unread_launch(ev: Evidence) -> None:
    """A launch found but not typed for want of a flag table: one line, with what to pass. Its flags are
    still read by their shape (``launch_word``)."""
    if ev.launch is None or ev.explicit is not None or ev.tree is not None:
        return
    origin = ev.launch.primary.origin if ev.launch.primary is not None else "the text"
    if ev.version:
        ev.problems.append(f"the launch command at {origin} is read by the shape of its flags only: they are typed "
                           f"with sglang {ev.version}'s flag table, and that source could not be had (above); add "
                           "--package-dir DIR (an unpacked sglang of that release)")
        return
    ev.problems.append(f"the launch command at {origin} is read by the shape of its flags only: no sglang version "
                       "anywhere in the evidence, and no release's source here or from the package index to type "
                       "them with; add --sglang VERSION (the release the server runs) or --package-dir DIR")


def _environ(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (``env``, ``docker inspect``) or a NUL-separated ``/proc/PID/environ``."""
    out = {}
    for item in re.split(r"[\0\n]", text):
        key, sep, value = item.strip().removeprefix("export ").partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) and key.startswith(ENV_PREFIXES):
            out[key] = value.strip().strip("'\"")
    return redact_env(out)


def _yaml_env(text: str) -> dict[str, str]:
    """The env of Kubernetes (``env: [{name, value}]``) or compose (``environment:``) YAML."""
    from kit.server_args import read_launch_text

    found = read_launch_text(text)
    env = {k: v for launch in found.launches for k, v in launch.env.items()}
    if not env:
        import yaml

        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError:
            return {}
        env = dict(_env_blocks(docs))
    return _environ("\n".join(f"{k}={v}" for k, v in env.items()))


def _env_blocks(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("env", "environment") and isinstance(value, list):
                for item in value:
                    if isinstance(item, dict) and "name" in item and "value" in item:
                        yield str(item["name"]), str(item["value"])
                    elif isinstance(item, str) and "=" in item:
                        yield tuple(item.split("=", 1))
            elif key == "environment" and isinstance(value, dict):
                yield from ((str(k), "" if v is None else str(v)) for k, v in value.items())
            else:
                yield from _env_blocks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _env_blocks(item)


def _read(ev: Evidence, option: str, path: str | None) -> str | None:
    """The text of an evidence file, or None with the reason kept (a problem; for a file that is no
    text at all, also ``ev.unusable``)."""
    if path is None:
        return None
    from kit.server_args import text_problem

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        ev.problems.append(f"{option} {path}: cannot read it ({err.strerror}); give a file on this machine")
        return None
    why = text_problem(data)
    if why is not None:
        line = f"{option} {path}: {why}; {_SHOULD_HOLD.get(option, 'evidence is text')}"
        ev.problems.append(line)
        ev.unusable.append(line)
        return None
    return data.decode("utf-8", "replace")


def _decode_from(ev: Evidence, text: str, where: str, parse, summary) -> None:
    from kit.server_args import log_capacity, log_notices, parse_prefill_stats

    found = log_notices(text)  # the one reader of sglang's notices (kit.server_args.log)
    for notice in found:
        notice.source = where
    ev.messages += found
    ev.notices += [n.text for n in found if n.kind != "warning"]
    ev.capacity = log_capacity(text) or ev.capacity
    stats = parse(text)
    if stats:
        ev.decode = summary(stats)
        ev.sources["decode"] = f"{ev.decode['lines']} Decode batch lines of {where}"
    prefill = parse_prefill_stats(text)
    if prefill:
        ev.prefill = prefill
        ev.sources["prefill"] = f"{len(prefill)} Prefill batch lines of {where}"


LAST_RUN = " (its last run: from the last server_args line on)"


def _log_from(ev: Evidence, text: str, where: str, option: str, launch: list | None = None):
    """A log's server_args line, Decode/Prefill batch lines and sglang's notices. Returns
    (snapshot, where) when the server_args line is cut off, for _cut_fields once the source is known.
    ``launch``: the same paste holds a launch command; Decode batch lines without a server_args line
    are noted there, for _decode_alone. A log several runs wrote (a relaunch appends) is read from its
    last run's server_args line on, as the live doctor reads the running process' log."""
    from kit.server_args import decode_summary, parse_decode_stats, parse_log_all

    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "server_args=" in line]
    if len(starts) > 1:
        text, where = "\n".join(lines[starts[-1]:]) + "\n", where + LAST_RUN

    cut = None
    try:
        snap = parse_log_all(text)[-1]
        ev.args.update(snap.fields)
        if snap.version:
            ev.version, ev.sources["version"] = snap.version, f"the log {where}"
            ev.version_basis = "reported"
        ev.sources["args"] = f"the server_args line of {where}" + (f" (line {snap.line})" if snap.line else "")
        cut = (snap, where) if snap.truncated else None
    except KitError as err:
        if parse_decode_stats(text) and launch is not None:
            launch.append((option, where))  # worded once it is known whether the launch was read
        elif parse_decode_stats(text):
            ev.problems.append(f"{option} {where}: no server_args line; its Decode batch lines are read alone "
                               "(the server's arguments are unknown: give the log from the server's start, "
                               "or its /server_info)")
        else:
            ev.problem(f"{option} {where}", err)
    _decode_from(ev, text, where, parse_decode_stats, decode_summary)
    ev.startup += startup_lines(text)
    return cut


_STARTUP = re.compile(r"(?i)cuda graph|piecewise|all-?reduce|allreduce|torch\.compile|Capture .*(begin|end)")


def startup_lines(text: str, limit: int = 200) -> list[str]:
    """The log's lines about fast paths at startup (graph capture, what disabled a graph, all-reduce),
    for kit.provenance.gates to decide the setup checks that log a message."""
    out = [line.strip() for line in text.splitlines()[:20000] if _STARTUP.search(line) and "server_args=" not in line]
    return out[:limit]


def _cut_fields(ev: Evidence, snap, where: str) -> None:
    """A cut-off server_args line: the fields after the cut are unknown, never defaults."""
    from kit.server_args import defaults, missing_fields

    last = next(reversed(snap.fields), None)
    names = None
    if ev.tree is not None:
        try:
            names = list(defaults(ev.tree))
        except KitError:
            names = None
    why = f"the server_args line of {where} is cut off after `{last}`"
    if names is None:
        ev.problems.append(f"{why}: the fields after it are unknown (no sglang source to name them: add --sglang "
                           "VERSION)")
        return
    missing = missing_fields(snap, names)
    for name in missing:
        ev.unknown.setdefault(name, why)
    shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
    ev.problems.append(f"{why}: {len(missing)} fields are unknown, not defaults ({shown})")


def _pastes(ev: Evidence, paste, options: dict) -> list:
    """(file, Paste) for --paste files and for any evidence file that holds several kinds of evidence."""
    from kit.server_args import split_paste, text_problem

    out = []
    for path in [paste] if isinstance(paste, str) else (paste or []):
        text = _read(ev, "--paste", path)
        if text is not None:
            out.append((path, split_paste(text)))
    for option, path in options.items():
        if not path or any(path == p for p, _ in out):
            continue
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if text_problem(data) is not None:
            continue  # said once, where the option's own reader reads it
        found = split_paste(data.decode("utf-8", "replace"))
        if found.several():
            ev.sources[f"paste {path}"] = f"{option} {path} holds several pieces; read as a paste"
            out.append((path, found))
    for path, found in out:
        ev.pastes.append((path, found))
        ev.sources[f"paste {path}"] = "; ".join(found.summary()[:20]) or "nothing recognised"
        if not found.pieces:  # text, so its questions are still asked (a file that is no text stops the doctor)
            ev.problems.append(f"--paste {path}: no evidence recognised in its {len(found.text.splitlines())} "
                               f"line(s) of text; {_SHOULD_HOLD['--paste']}")
        for a, b, first in found.not_understood:
            lines = f"line {a}" if a == b else f"lines {a}-{b}"
            ev.problems.append(f"{path} {lines}: not understood ({first[:60]!r})")
    return out


def _decode_alone(ev: Evidence, pending: list) -> None:
    """Decode batch lines without a server_args line, in a paste that holds a launch command."""
    for option, where in pending:
        if ev.explicit is not None:
            ev.problems.append(f"{option} {where}: no server_args line; the arguments are the launch command's "
                               "flags over sglang's defaults, not what sglang resolved from them (the log from "
                               "the server's start, or its /server_info, would tell)")
        else:
            ev.problems.append(f"{option} {where}: no server_args line; its Decode batch lines are read alone")


def _paste_log(ev: Evidence, where: str, found, pending: list):
    """The log lines of a paste (needed before the source: its server_args line may name the version;
    the versions the paste states, check_env's among them, are weighed in _version)."""
    if not any(p.kind in ("server_args", "decode", "prefill", "notice", "log") for p in found.pieces):
        return None
    return _log_from(ev, found.log_text(), where, "--paste", launch=pending if found.of("launch") else None)


def _paste_rest(ev: Evidence, where: str, found) -> None:
    """The other pieces of a paste: launch commands, environment, hardware, config.json, /server_info,
    bench_serving results."""
    from kit.server_args import from_server_info

    for piece in found.of("launch"):
        _command_from(ev, piece.text, where, first_line=piece.start)
    prose_evidence(ev, where, found)
    env_pieces = found.of("environ")
    if env_pieces:
        ev.environ = {**(ev.environ or {}), **_environ("\n".join(p.text for p in env_pieces))}
        ev.sources["environ"] = f"{where} " + ", ".join(p.where for p in env_pieces)
    for kind in ("nvidia_smi", "nvidia_smi_csv", "topo", "p2p"):
        for piece in found.of(kind):
            _hardware_text(ev, kind, piece.text, f"{where} {piece.where}")
    for piece in found.of("check_env"):
        _check_env_gpus(ev, piece.text, f"{where} {piece.where}")
    for piece in found.of("config_json"):
        ev.model_config = json.loads(piece.text)
        ev.sources["model_config"] = f"{where} {piece.where}"
    for piece in found.of("server_info"):
        try:
            snap = from_server_info(piece.text.encode())
            ev.args.update(snap.fields)
            ev.sources["args"] = f"/server_info in {where} {piece.where}"
        except KitError as err:
            ev.problem(f"{where} {piece.where}", err)
    for piece in found.of("bench_serving"):
        ev.bench_serving = {k.strip(): float(v) for k, v in re.findall(r"^\s*([^:\n]+):\s*([\d.]+)\s*$",
                                                                        piece.text, re.M)}
        ev.sources["bench_serving"] = f"{where} {piece.where}"


def _hardware_text(ev: Evidence, kind: str, text: str, where: str) -> None:
    from kit.hardware import Hardware, parse_p2p, parse_query_csv, parse_smi, parse_topo

    try:
        if kind == "nvidia_smi":
            hw = parse_smi(text)
            hw.host = where
            ev.hardware = _merge_hw(ev.hardware, hw)
            ev.sources["hardware"] = where
        elif kind == "nvidia_smi_csv":
            ev.hardware = _merge_hw(ev.hardware, Hardware(where, parse_query_csv(text)))
            ev.sources["hardware"] = where
        else:
            ev.hardware = ev.hardware or Hardware(where)
            if kind == "p2p":
                ev.hardware.p2p = parse_p2p(text)
            else:
                ev.hardware.topology = parse_topo(text)
            ev.sources["p2p" if kind == "p2p" else "topology"] = where
    except KitError as err:
        ev.problem(f"{kind} in {where}", err)


def _check_env_gpus(ev: Evidence, text: str, where: str) -> None:
    """``python -m sglang.check_env`` names the GPUs ("GPU 0,1,2,3: NVIDIA H100 80GB HBM3"): read them when no
    nvidia-smi output gave them (names and count only: no memory, no topology)."""
    from kit.hardware import GPU, Hardware

    if getattr(ev.hardware, "gpus", None):
        return
    gpus = [GPU(int(i), name.strip()) for ids, name in re.findall(r"^\s*GPU ([\d,\s]+):\s*(\S.*?)\s*$", text, re.M)
            for i in ids.split(",") if i.strip().isdigit()]
    if gpus:
        hw = Hardware(where, sorted(gpus, key=lambda g: g.index), note=f"GPUs named by check_env output in {where}, "
                      "not read from nvidia-smi")
        ev.hardware = _merge_hw(ev.hardware, hw) if ev.hardware is not None else hw
        ev.sources["hardware"] = f"check_env output in {where} (names and count; no memory or links)"


def _merge_hw(old, new):
    if old is not None:
        new.topology = new.topology or getattr(old, "topology", None)
        new.p2p = new.p2p or getattr(old, "p2p", None)
    return new


def _command_from(ev: Evidence, text: str, where: str, first_line: int = 1) -> None:
    """A launch command read flag by flag (kit.server_args.read_launch_text): each unreadable value
    is a problem naming the flag, the rest is kept; a flag set to an unreadable value is unknown."""
    from kit.server_args import cli_defaults, flag_table, read_launch_text

    if ev.tree is None:  # read by shape only; _unread_launch says why, once
        ev.launch = ev.launch or read_launch_text(text, where=where, first_line=first_line)
        return
    try:
        table = flag_table(ev.tree)
    except KitError as err:
        ev.problem(f"--command {where}", err)
        return
    found = read_launch_text(text, table, where=where, first_line=first_line)
    for problem in found.all_problems():
        ev.problems.append(f"--command {where}: {problem}")
    launch = found.primary
    if launch is None:
        return
    if ev.launch is not None and ev.explicit:
        ev.problems.append(f"--command {where}: a second launch; the first one read is kept")
        return
    ev.launch = found
    ev.command = launch.command
    ev.explicit = launch.explicit
    if launch.env:
        ev.environ = {**_environ("\n".join(f"{k}={v}" for k, v in launch.env.items())), **(ev.environ or {})}
        ev.sources.setdefault("environ", f"the environment the launch in {where} sets")
    ev.sources["explicit"] = f"the launch command in {where}" + (
        f" ({len(found.launches)} launches; the one with most flags, at {launch.origin})"
        if len(found.launches) > 1 else "")
    unreadable = {name: f"{where}: the launch sets it to a value the text does not tell" for name in launch.unreadable}
    ev.asked_unknown = list(launch.unreadable)
    fill_cut(ev, where)
    if not ev.args:  # no log: what the command asks, over this version's defaults
        ev.args = {name: fd.value for name, fd in cli_defaults(ev.tree).items() if fd.known}
        ev.args.update(ev.explicit)
        for name in unreadable:
            ev.args.pop(name, None)
        ev.unknown.update(unreadable)
        ev.sources["args"] = f"the flags of {where} over sglang {ev.tree.version}'s defaults (not resolved)"


def _resolve_launch(ev: Evidence) -> None:
    """The launch as its release resolves it (kit.doctor.resolve): decided changes go into ``ev.args``
    (``ev.explicit`` stays what was asked); values the server reported are kept."""
    from .resolve import apply, resolve

    ev.resolution = resolve(ev)
    if ev.resolution is None or ev.resolution.how == "read":
        return
    apply(ev, ev.resolution)
    how = "a dry-run of its own code" if ev.resolution.how == "dry-run" else "its own code, read statically"
    if ev.sources.get("args", "").startswith("the flags of"):
        ev.sources["args"] = ev.sources["args"].replace("(not resolved)", f"resolved by {how}")
    ev.sources["resolution"] = (f"sglang {ev.resolution.version} resolved the launch by {how}: "
                                f"{len(ev.resolution.decided)} changes, {len(ev.resolution.undecided)} undecided")


def _hardware_from_files(ev: Evidence, nvidia_smi: str | None, topo: str | None, gpu: str | None) -> None:
    from kit.hardware import Hardware, parse_p2p, parse_query_csv, parse_smi, parse_topo

    hw = None
    text = _read(ev, "--nvidia-smi", nvidia_smi)
    if text is not None:
        try:
            hw = parse_smi(text) if "NVIDIA-SMI" in text else Hardware(nvidia_smi, parse_query_csv(text))
            hw.host = nvidia_smi
            ev.sources["hardware"] = nvidia_smi
        except KitError as err:
            ev.problem(f"--nvidia-smi {nvidia_smi}", err)
    for path in [topo] if isinstance(topo, str) else (topo or []):
        text = _read(ev, "--topo", path)
        if text is None:
            continue
        hw = hw or Hardware(path)
        p2p = re.search(r"^\s*GPU0\b.*\b(OK|CNS|GNS|TNS|NS)\b", text, re.M) and "NV" not in text.split()
        try:
            if p2p:
                hw.p2p = parse_p2p(text)
                ev.sources["p2p"] = path
            else:
                hw.topology = parse_topo(text)
                ev.sources["topology"] = path
        except KitError as err:
            ev.problem(f"--topo {path}", err)
    hw = _merge_hw(ev.hardware, hw) if hw is not None else ev.hardware  # a paste's pieces stay
    if (hw is None or not getattr(hw, "gpus", None)) and gpu:
        hw = _merge_hw(hw, _stand_in(gpu, ev.args.get("tp_size") or 1, f"--gpu {gpu}"))
    ev.hardware = hw
    named = prose_hardware(ev)
    if named is not None:
        profile, count, said, how = named
        ev.hardware = _merge_hw(ev.hardware, _stand_in(profile.key, count, said))
        ev.sources["hardware"] = f"{profile.name} named in {said}; count {how}; not read from nvidia-smi"
    unknown_gpu(ev, gpu)
    _p2p_from_model(ev)


def _p2p_from_model(ev: Evidence) -> None:
    """Peer access not read, but decided by the GPU model (kit.hardware_caps): said as the model's."""
    from kit.hardware_caps import p2p_from_model

    derived = p2p_from_model(ev.hardware)
    if derived is not None:
        ev.hardware.p2p = derived
        ev.sources["p2p"] = derived.basis


def _stand_in(gpu: str, count: int, why: str):
    """Hardware named, not seen: ``count`` GPUs of a profile in kit/data/gpus.yaml."""
    from kit.dryrun import gpu_profile
    from kit.errors import UnknownGPU
    from kit.hardware import GPU, Hardware

    try:
        profile = gpu_profile(gpu)
    except UnknownGPU:  # named, not known: the GPUs stand in by name alone (_unknown_gpu says what that loses)
        gpus = [GPU(i, str(gpu)) for i in range(int(count))]
        return Hardware(why, gpus, note=f"GPUs named by {why}, not read from nvidia-smi, and not in the kit's table")
    gpus = [GPU(i, profile.name, profile.memory_mib) for i in range(int(count))]
    return Hardware(why, gpus, note=f"GPUs named by {why}, not read from nvidia-smi")


def _model_config(ev: Evidence, path: str | None, host=None) -> None:
    from kit.model_config import catalog_miss, config_for, load_model_config, model_config_beside

    try:
        if path:
            ev.model_config = load_model_config(path)
            ev.sources["model_config"] = path
        elif ev.args.get("model_path"):
            found = model_config_beside(host, ev.args["model_path"]) if host is not None else (
                load_model_config(ev.args["model_path"]) if os.path.exists(str(ev.args["model_path"])) else None)
            if found is not None:
                ev.model_config = found
                ev.sources["model_config"] = f"{ev.args['model_path']}/config.json"
    except KitError as err:
        ev.problem("the model's config.json", err)
    named = ev.args.get("model_path") or launch_word(ev, "--model-path", "--model")
    if ev.model_config is None and named and (hit := config_for(str(named))) is not None:
        ev.model_config, ev.sources["model_config"] = hit
    if ev.model_config is None:
        ev.problems.append(_no_model_config(ev) + (f"; {catalog_miss(named)}" if named else ""))


def launch_word(ev: Evidence, *options: str) -> str | None:
    """The value a flag of the launch command has as written (the last of ``options`` given), for
    when no flag table reads it: ``launch_word(ev, "--tp", "--tp-size")``."""
    launch = ev.launch.primary if ev.launch is not None else None
    for flag in reversed(launch.flags if launch is not None else []):
        if flag.option in options and flag.text:
            return str(flag.text)
    return None


def _no_model_config(ev: Evidence) -> str:
    """One line: what needs the model's config.json, where to get it, the flag that gives it."""
    spec = (ev.args.get("speculative_algorithm") if ev.args else
            launch_word(ev, "--speculative-algorithm", "--speculative-algo")) not in (None, "", "NONE")
    needs = ("the roofline, the model rules and the speculative-steps check (sglang's own choice of steps for "
             "the model is read from its architecture) need it" if spec else
             "the roofline and the model rules need it")
    path = ev.args.get("model_path") or launch_word(ev, "--model-path", "--model")
    if isinstance(path, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", path) and not path.startswith("."):
        where = (f"the config.json of {path} on the Hugging Face hub (https://huggingface.co/{path}/blob/main/"
                 "config.json), or the one the server's cache holds")
    elif isinstance(path, str) and path:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        where = (f"the config.json beside the weights ({path.rstrip('/')}/config.json on the server), or the one "
                 f"on the model's page on the Hugging Face hub ({name}: Files and versions)")
    else:
        where = "the config.json beside the weights, or the one on the model's page on the Hugging Face hub"
    return f"no model config.json: {needs}; pass --model-config FILE with {where}"


def _baseline(ev: Evidence, path: str | None) -> None:
    if not path:
        return
    from kit.launch_file import LaunchOptions, read_launch

    try:
        ev.baseline = read_launch(path, ev.tree, LaunchOptions(dryrun=False))
        ev.sources["baseline"] = f"{path} ({ev.baseline.method})"
        ev.problems += [f"--baseline {path}: {p}" for p in getattr(ev.baseline, "problems", [])]
    except KitError as err:
        ev.problem(f"--baseline {path}", err)


def _bench(ev: Evidence, path: str | None) -> None:
    """A saved benchmark (``sgl-kit bench --save FILE``): the measured rate and accept length."""
    if not path:
        return
    from kit.bench import BenchRun

    try:
        run = BenchRun.load(path)
    except (KitError, OSError, ValueError, json.JSONDecodeError) as err:
        ev.problem(f"--bench {path}", err)
        return
    totals = run.totals
    rate = run.summary().loc["decode_tok_s", "median"]
    ttft = run.summary().loc["ttft_ms", "median"] if "ttft_ms" in run.summary().index else None
    ok = [r for r in run.results if r.ok]
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    chunks = [r.tokens_per_chunk for r in ok if r.tokens_per_chunk]
    ev.bench = {"tok_s": None if rate != rate else float(rate), "accept_length": totals.get("accept_length"),
                "ttft_ms": None if ttft is None or ttft != ttft else float(ttft),
                "concurrency": getattr(run.config, "concurrency", None), "source": path,
                "requests": len(ok), "rate": getattr(run.config, "rate", None),
                "prompt_tokens_mean": sum(prompts) / len(prompts) if prompts else None,
                "prompt_tokens_max": max(prompts) if prompts else None,
                "tokens_per_chunk_mean": sum(chunks) / len(chunks) if chunks else None,
                "output_tok_s": totals.get("output_tok_s"),
                "prefix_reuse": getattr(run, "prefix_reuse", None),  # the prompts' shared prefixes, when kept
                "pages": list(getattr(run, "server_pages", None) or []), "url": getattr(run, "url", None),
                "pages_problem": getattr(run, "server_metrics_problem", None)}
    ev.sources["bench"] = path


# --------------------------------------------------------------------------- a live server


def from_server(host, server, *, tree=None, progress: Callable[[str], None] | None = None,
                baseline: str | None = None, bench: str | None = None) -> Evidence:
    """Evidence from a server found by kit.target.discover: its args (/server_info or log), its
    launch command, environment and log, the GPUs of its host, and its own sglang source."""
    from kit.hardware import read_hardware
    from kit.server_args import decode_summary, effective_args, explicit_args, log_notices, parse_decode_stats
    from kit.source import source_for_server

    say = progress or (lambda text: None)
    ev = Evidence(host.name, version=server.sglang_version, command=list(server.argv))
    ev.version_basis = "reported" if ev.version else None  # the server's own installed package
    say(f"reading pid {server.pid}'s arguments")
    try:
        snap = effective_args(server)
        ev.args = dict(snap.fields)
        ev.sources["args"] = "/server_info" if snap.source == "server_info" else f"the log {server.log_path}"
    except KitError as err:
        ev.problem(f"the arguments of pid {server.pid}", err)
    if server.env_readable:
        ev.environ = redact_env({k: v for k, v in server.env.items() if k.startswith(ENV_PREFIXES)})
        ev.sources["environ"] = f"/proc/{server.pid}/environ"
    else:
        ev.problems.append(f"the environment of pid {server.pid} is not readable by this user; NCCL_/CUDA_ "
                           "variables are not checked (run as the server's user or root)")
    try:
        ev.tree = source_for_server(server, tree=tree, progress=say)
        ev.version = ev.tree.version or ev.version
        ev.sources["source"] = f"{server.sglang_dir} on {host.name}"
        ev.explicit = explicit_args(server, ev.tree)
        ev.sources["explicit"] = f"the argv of pid {server.pid}"
    except KitError as err:
        ev.problem("the server's sglang source", err)
    if server.log_path:
        head, tail = server.log_head(3000), server.log_tail(4000)
        # A log several runs wrote (a relaunch appends, a rotated or journald log holds them all): the running
        # process' run begins at the last `server_args=` line; what an earlier run said is not this server's.
        starts = [i for i, line in enumerate(tail) if "server_args=" in line]
        where = f"the log {server.log_path}"
        if len(starts) > 1 or (starts and sum("server_args=" in line for line in head) > 1):
            tail = tail[starts[-1]:]
            head = tail[:3000]
            where += LAST_RUN
        text = "\n".join(head)
        ev.notices += [n.text for n in log_notices(text) if n.kind != "warning"]
        ev.startup += startup_lines(text)
        _decode_from(ev, "\n".join(tail), where, parse_decode_stats, decode_summary)
    from kit.provenance.host_probes import host_probes

    ev.probes = host_probes(server) or None
    say("reading the GPUs (nvidia-smi)")
    try:
        ev.hardware = read_hardware(host, server)
        ev.sources["hardware"] = f"nvidia-smi on {host.name}"
    except KitError as err:
        ev.problem(f"nvidia-smi on {host.name}", err)
    if server.kind == "lab" and (ev.hardware is None or not ev.hardware.gpus):
        ev.hardware = lab_stand_in(ev, server.env or {})
    _model_config(ev, None, host)
    _baseline(ev, baseline)
    _bench(ev, bench)
    ev.notices = list(dict.fromkeys(ev.notices))
    if ev.version and ev.version_basis:
        ev.sources["version_basis"] = ev.version_basis
    return ev


def lab_stand_in(ev: Evidence, env: dict):
    """The lab's stand-in GPUs: its scenario's GPU profile, tp_size of them; ``env`` is the lab server's
    environment (its scenario and machine fixes), live or as a captured case keeps it."""
    from kit.lab.throughput import load_scenario

    scenario = load_scenario(env.get("SGL_KIT_LAB_SCENARIO"))
    hw = _stand_in(scenario.params["gpu"], ev.args.get("tp_size") or 1, f"the lab's scenario {scenario.name}")
    hw.note = (f"the lab stands in for {len(hw.gpus)}x {hw.gpus[0].name} (scenario {scenario.name}); "
               "no GPU is read")
    ev.sources["hardware"] = f"the lab's scenario {scenario.name} (a stand-in; this machine has no GPU)"
    _lab_machine(env, scenario, hw, ev)
    return hw


def _lab_machine(env: dict, scenario, hw, ev: Evidence) -> None:
    """What the lab's stand-in `nvidia-smi topo -m` and `topo -p2p` print, when its scenario says
    (``machine``), after the machine fixes the lab server runs with; read like a real box's."""
    from kit.errors import ParseError
    from kit.hardware import parse_p2p, parse_topo
    from kit.lab.throughput import MACHINE_ENV, machine_fixes

    machine = scenario.params.get("machine") or {}
    applied = env.get(MACHINE_ENV, "")
    p2p = machine.get("p2p")
    for fix in machine_fixes(scenario, applied):
        p2p = fix.get("p2p", p2p)
    where = f"the lab's scenario {scenario.name}" + (f", machine fix {applied}" if applied else "")
    try:
        if machine.get("topo"):
            hw.topology = parse_topo(machine["topo"])
            ev.sources["topology"] = f"{where} (stand-in nvidia-smi topo -m)"
        if p2p:
            hw.p2p = parse_p2p(p2p)
            ev.sources["p2p"] = f"{where} (stand-in nvidia-smi topo -p2p)"
    except ParseError as err:
        ev.problem(f"the lab's machine ({scenario.path})", err)
