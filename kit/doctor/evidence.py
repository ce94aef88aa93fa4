"""Everything the rules read, gathered once: from a live server, or from files a colleague sent.

An ``Evidence`` holds plain data plus the sglang source tree of the server's version. Each
piece says where it came from (``sources``), and every piece that could not be read leaves
a sentence in ``problems`` (what was tried, why it failed, what to do) while the rest is
still gathered: a log without a ``server_args`` line does not stop the hardware checks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.errors import KitError
from kit.hardware import redact_env

__all__ = ["Evidence", "from_files", "from_server"]

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
    progress: Callable[[str], None] | None = None, tree=None,
) -> Evidence:
    """Evidence from files on this machine. The sglang source is ``package_dir``, or release
    ``sglang``, or the release the log names (downloaded once with ``pip download --no-deps``);
    ``tree`` is a kit.source.SourceTree already at hand (a notebook reuses its parsed source)."""
    from kit.server_args import decode_summary, from_server_info, parse_decode_stats, parse_log_all

    ev = Evidence("files")
    say = progress or (lambda text: None)
    log_text = _read(ev, "--log", log)
    if log_text is not None:
        ev.sources["args"] = f"the server_args line of {log}"
        try:
            snap = parse_log_all(log_text)[-1]
            ev.args = dict(snap.fields)
            ev.version = snap.version
        except KitError as err:
            ev.problem(f"--log {log}", err)
            ev.sources.pop("args")
        _decode_from(ev, log_text, log, parse_decode_stats, decode_summary)
    info_text = _read(ev, "--server-info", server_info)
    if info_text is not None:
        try:
            snap = from_server_info(info_text.encode())
            ev.args.update(snap.fields)
            ev.version = ev.version or snap.version
            ev.sources["args"] = f"/server_info in {server_info}" + (" and " + ev.sources["args"]
                                                                      if "args" in ev.sources else "")
        except KitError as err:
            ev.problem(f"--server-info {server_info}", err)
    ev.version = sglang or ev.version
    if tree is not None:
        ev.tree, ev.version = tree, tree.version or ev.version
        ev.sources["source"] = str(tree.root)
    elif package_dir or ev.version:
        say(f"reading the sglang {ev.version or ''} source".replace("  ", " "))
        try:
            from kit.witness import source_tree

            ev.tree = source_tree(package_dir, None if package_dir else ev.version)
            ev.version = ev.tree.version or ev.version
            ev.sources["source"] = str(ev.tree.root)
        except KitError as err:
            ev.problem(f"sglang {ev.version or package_dir} source", err)
    command_text = _read(ev, "--command", command)
    if command_text is not None:
        _command_from(ev, command_text, command)
    env_text = _read(ev, "--environ", environ)
    if env_text is not None:
        ev.environ = _environ(env_text)
        ev.sources["environ"] = environ
    _hardware_from_files(ev, nvidia_smi, topo, gpu)
    _model_config(ev, model_config)
    _baseline(ev, baseline)
    _bench(ev, bench)
    ev.notices = list(dict.fromkeys(ev.notices))
    if not ev.args and not ev.explicit:
        ev.problems.append("no server arguments: give --log (a server_args line), --server-info or --command")
    return ev


def _environ(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (``env``, ``docker inspect``) or a NUL-separated ``/proc/PID/environ``."""
    out = {}
    for item in re.split(r"[\0\n]", text):
        key, sep, value = item.strip().removeprefix("export ").partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) and key.startswith(ENV_PREFIXES):
            out[key] = value.strip().strip("'\"")
    return redact_env(out)


def _read(ev: Evidence, option: str, path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError as err:
        ev.problems.append(f"{option} {path}: cannot read it ({err.strerror}); give a file on this machine")
        return None


# sglang's own words when it changes a setting at startup (its logger.info/warning messages).
_NOTICE = re.compile(r"Automatically (?:turn off|set|reduce|disable)|Disabling |is disabled because|Falling back|"
                     r"Overlap scheduler is disabled|auto-disabl", re.I)


def _decode_from(ev: Evidence, text: str, where: str, parse, summary) -> None:
    ev.notices += [line for line in text.splitlines() if _NOTICE.search(line)][:200]
    stats = parse(text)
    if stats:
        ev.decode = summary(stats)
        ev.sources["decode"] = f"{ev.decode['lines']} Decode batch lines of {where}"


def _command_from(ev: Evidence, text: str, where: str) -> None:
    from kit.server_args import cli_defaults, flag_table, parse_command

    try:
        ev.command = shlex.split(text, comments=True)
    except ValueError as err:
        ev.problems.append(f"--command {where}: not a shell command line ({err})")
        return
    if ev.tree is None:
        ev.problems.append(f"--command {where}: reading a launch command needs sglang's flag table; add "
                           "--sglang VERSION or --package-dir DIR")
        return
    try:
        ev.explicit = parse_command(ev.command, flag_table(ev.tree))
    except KitError as err:
        ev.problem(f"--command {where}", err)
        return
    ev.sources["explicit"] = f"the launch command in {where}"
    if not ev.args:  # no log: what the command asks, over this version's defaults
        ev.args = {name: fd.value for name, fd in cli_defaults(ev.tree).items() if fd.known}
        ev.args.update(ev.explicit)
        ev.sources["args"] = f"the flags of {where} over sglang {ev.tree.version}'s defaults (not resolved)"


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
    if hw is None and gpu:
        hw = _stand_in(gpu, ev.args.get("tp_size") or 1, f"--gpu {gpu}")
    ev.hardware = hw


def _stand_in(gpu: str, count: int, why: str):
    """Hardware named, not seen: ``count`` GPUs of a profile in kit/data/gpus.yaml."""
    from kit.dryrun import gpu_profile
    from kit.hardware import GPU, Hardware

    profile = gpu_profile(gpu)
    gpus = [GPU(i, profile.name, profile.memory_mib) for i in range(int(count))]
    return Hardware(why, gpus, note=f"GPUs named by {why}, not read from nvidia-smi")


def _model_config(ev: Evidence, path: str | None, host=None) -> None:
    from kit.model_config import load_model_config, model_config_beside

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
    if ev.model_config is None:
        ev.problems.append("no model config.json: the roofline and the model rules need it (--model-config FILE)")


def _baseline(ev: Evidence, path: str | None) -> None:
    if not path:
        return
    from kit.witness import LaunchOptions, read_launch

    try:
        ev.baseline = read_launch(path, ev.tree, LaunchOptions(dryrun=False))
        ev.sources["baseline"] = f"{path} ({ev.baseline.method})"
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
    ev.bench = {"tok_s": None if rate != rate else float(rate), "accept_length": totals.get("accept_length"),
                "source": path}
    ev.sources["bench"] = path


# --------------------------------------------------------------------------- a live server


def from_server(host, server, *, tree=None, progress: Callable[[str], None] | None = None,
                baseline: str | None = None, bench: str | None = None) -> Evidence:
    """Evidence from a server found by kit.target.discover: its args (/server_info or log), its
    launch command, environment and log, the GPUs of its host, and its own sglang source."""
    from kit.hardware import read_hardware
    from kit.server_args import decode_summary, effective_args, explicit_args, parse_decode_stats
    from kit.source import SourceTree

    say = progress or (lambda text: None)
    ev = Evidence(host.name, version=server.sglang_version, command=list(server.argv))
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
        ev.tree = tree if tree is not None else SourceTree.of_server(server)
        if host.name != "local":
            say("copying the server's sglang source to the local cache (once per version)")
            ev.tree = ev.tree.snapshot()
        ev.version = ev.tree.version or ev.version
        ev.sources["source"] = f"{server.sglang_dir} on {host.name}"
        ev.explicit = explicit_args(server, ev.tree)
        ev.sources["explicit"] = f"the argv of pid {server.pid}"
    except KitError as err:
        ev.problem("the server's sglang source", err)
    if server.log_path:
        head = host.run(["head", "-n", "3000", server.log_path], timeout=30).stdout
        ev.notices += [line for line in head.splitlines() if _NOTICE.search(line)][:200]
        tail = server.log_tail(4000)
        _decode_from(ev, "\n".join(tail), f"the log {server.log_path}", parse_decode_stats, decode_summary)
    say("reading the GPUs (nvidia-smi)")
    try:
        ev.hardware = read_hardware(host, server)
        ev.sources["hardware"] = f"nvidia-smi on {host.name}"
    except KitError as err:
        ev.problem(f"nvidia-smi on {host.name}", err)
    if server.kind == "lab" and (ev.hardware is None or not ev.hardware.gpus):
        ev.hardware = _lab_gpus(server, ev)
    _model_config(ev, None, host)
    _baseline(ev, baseline)
    _bench(ev, bench)
    ev.notices = list(dict.fromkeys(ev.notices))
    return ev


def _lab_gpus(server, ev: Evidence):
    """The lab's stand-in GPUs: its scenario's GPU profile, tp_size of them."""
    from kit.lab.throughput import load_scenario

    scenario = load_scenario((server.env or {}).get("SGL_KIT_LAB_SCENARIO"))
    hw = _stand_in(scenario.params["gpu"], ev.args.get("tp_size") or 1, f"the lab's scenario {scenario.name}")
    hw.note = (f"the lab stands in for {len(hw.gpus)}x {hw.gpus[0].name} (scenario {scenario.name}); "
               "no GPU is read")
    ev.sources["hardware"] = f"the lab's scenario {scenario.name} (a stand-in; this machine has no GPU)"
    return hw
