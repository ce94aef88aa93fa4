"""``sgl-kit lab up/down/status/restart``: a lab directory shaped like the incident's box.

The lab directory holds::

    ml-env/bin/python                                  the host's python3, as a venv (pyvenv.cfg)
    ml-env/lib/python3.X/site-packages/sglang          real sglang 0.5.11 source (unzipped wheel)
    ml-env/lib/python3.X/site-packages/kit             the kit (remote hosts: from a wheel built here)
    models/Qwen3.6-27B/config.json                     a plausible config for the incident's model
    logs/server.log                                    the server's stdout and stderr
    run/server.json, run/server.pid                    what the lab started, to stop only that

Every step runs through the lab agent (``_agent.py``) on the lab's host, the same way for
this machine and for an SSH host, which needs nothing but ``python3``.
"""

from __future__ import annotations

import html
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit._argv import option_value
from kit._paths import lab_dir
from kit._remote import parse_result
from kit._remote import run as run_script
from kit.errors import LabError
from kit.hosts import Host, LocalHost

from . import packaging
from .launches import DRYRUN_ENV, RESOLVED_ENV, ResolvedLaunch, load_launches

__all__ = ["Lab", "LabError", "LabStatus", "variants"]

SGLANG_VERSION = "0.5.11"
MODEL_DIR = "Qwen3.6-27B"
DEFAULT_PORT = 30000
_DATA = Path(__file__).resolve().parent.parent / "data"
# Passed on to the server so a lab started by a test or a benchmark sees the same data.
_PASSED_ENV = (RESOLVED_ENV, DRYRUN_ENV)



def variants(version: str = SGLANG_VERSION, scenario: str | None = None) -> dict[str, ResolvedLaunch]:
    """The launches the lab can start without the dry-run, by name (new, old, fixed), for a scenario."""
    return {launch.variant: launch for launch in load_launches(version, scenario=scenario)}


@dataclass
class LabStatus:
    """Whether the lab runs, where, with which command."""

    host: str
    lab_dir: str
    running: bool
    pid: int | None = None
    url: str | None = None
    port: int | None = None
    argv: list[str] = field(default_factory=list)
    label: str | None = None
    healthy: bool | None = None
    started_at: float | None = None
    log: str | None = None
    note: str = ""
    address: str | None = None  # where the server listens, on the lab's own host
    reach: str = ""  # how to reach it from here when `url` is a forward that dies with this process
    scenario: str | None = None  # the throughput scenario it runs (kit/data/scenarios), kept across restarts

    def __repr__(self) -> str:
        if not self.running:
            return f"<LabStatus {self.host}:{self.lab_dir}: not running{'; ' + self.note if self.note else ''}>"
        return (f"<LabStatus {self.host}: {self.label or 'custom'} running, pid {self.pid}, {self.url}"
                f"{'' if self.healthy else ' (not healthy)'}>")

    def to_text(self) -> str:
        if not self.running:
            if self.note:  # what was just done comes first: "stopped pid 123", then the state it left
                return f"lab: {self.note}; now not running on {self.host} ({self.lab_dir})"
            return f"lab: not running on {self.host} ({self.lab_dir})"
        up = time.time() - self.started_at if self.started_at else 0
        where = ([f"  url:     {self.url}"] if not self.reach else
                 [f"  address: {self.address} on {self.host}", f"  reach:   {self.reach}"])
        return "\n".join([
            f"lab: running on {self.host}, pid {self.pid}, up {up:.0f} s, "
            f"{'healthy' if self.healthy else 'NOT healthy'}",
            *where,
            f"  launch:  {self.label or 'custom flags'}",
            f"  command: {' '.join(self.argv)}",
            f"  log:     {self.log}",
            f"  dir:     {self.lab_dir}",
        ] + ([f"  {self.note}"] if self.note else []))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.to_text())}</pre>"


class Lab:
    """The lab on one host: prepare its directory, start, stop and inspect its server."""

    def __init__(self, host: Host | None = None, directory: str | None = None, python: str = "python3") -> None:
        self.host = host or LocalHost()
        self.local = isinstance(self.host, LocalHost)
        self.python = sys.executable if self.local and python == "python3" else python
        self._info: dict | None = None
        self._dir = directory

    def __repr__(self) -> str:
        return f"<Lab {self.host.name}:{self.directory}>"

    # -- the agent ------------------------------------------------------------
    def _agent(self, op: str, args: dict | None = None, stdin: bytes | None = None, timeout: float = 120) -> dict:
        res = run_script(self.host, "lab_agent", op, json.dumps(args or {}), python=self.python, stdin=stdin,
                         timeout=timeout)
        data = parse_result(res.stdout)
        if data is None:
            data = {"error": (res.stderr or res.stdout).strip()[-800:] or f"exit {res.exited}, no output"}
        if not res.ok or "error" in data:
            raise LabError(f"the lab agent failed on {self.host.name} ({op}): {data.get('error') or res.stderr.strip()}",
                           hint=f"check that `{self.python}` runs on {self.host.name} and can write {self.directory}")
        return data

    @property
    def info(self) -> dict:
        if self._info is None:
            self._info = self._agent("info", {"lab_dir": self._dir or (lab_dir() if self.local else None)})
            if tuple(self._info["version_info"]) < (3, 10):
                raise LabError(f"{self.host.name} has python {self._info['python']}; the lab needs 3.10 or newer",
                               hint="install a newer python3 there, or pass its path with --python")
        return self._info

    @property
    def directory(self) -> str:
        return self._dir if self._dir and self._dir.startswith("/") else self.info["lab_dir"]

    # -- prepare ----------------------------------------------------------------
    def prepare(self) -> dict:
        """Make the lab directory: ml-env with sglang's source and the kit, the model's config."""
        info = self.info
        pyver = "{}.{}".format(*info["version_info"])
        wheels = [self._ship(w) for w in self._wheels(info)]
        config = (_DATA / "lab" / MODEL_DIR / "config.json").read_text()
        args = {"lab_dir": self.directory, "python": self._interpreter(info), "pyver": pyver, "wheels": wheels,
                "files": {f"models/{MODEL_DIR}/config.json": config}}
        if self.local:
            args["pth"] = packaging.local_pth()
        return self._agent("prepare", args, timeout=600)

    def _interpreter(self, info: dict) -> str:
        if self.local:
            return os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        return info["executable"]

    # The real engine's host also builds its environment with the kit (kit/lab/real_remote.py).
    _builds_env = False

    def _wheels(self, info: dict) -> list[Path]:
        wheels = [packaging.sglang_wheel(SGLANG_VERSION)]
        if not self.local:
            wheels.append(packaging.kit_wheel(build=self._builds_env))
            wheels += packaging.runtime_wheels(info, build=self._builds_env)
        return wheels

    def _ship(self, wheel: Path) -> str:
        """The wheel's path on the lab's host, copying it there when it is not already."""
        if self.local:
            return str(wheel)
        remote = f"{self.directory}/wheels/{wheel.name}"
        digest = packaging.sha256(wheel)
        if self._agent("have", {"paths": [remote]})["have"].get(remote) != digest:
            self._agent("put", {"path": remote}, stdin=wheel.read_bytes(), timeout=600)
        return remote

    # -- start and stop -----------------------------------------------------------
    def up(self, variant: str | None = None, flags: list[str] | None = None, port: int | None = None,
           host: str = "127.0.0.1", scenario: str = "incident", timeout: float = 60,
           machine: tuple[str, ...] = ()) -> LabStatus:
        """Start the lab's server (``variant`` new, old or fixed; default new), unless it already runs.

        ``flags`` replace the variant's; ``port`` defaults to 30000. When the lab already runs the
        launch asked for, its status comes back with a note; when it runs another one, or on another
        port than the one asked for, LabError says so, since starting nothing would leave a different
        server than the one asked for.
        """
        current = self.status()
        if current.running:
            self._check_same(current, variant, flags)
            if port is not None and current.port != port:
                raise LabError(
                    f"the lab on {self.host.name} already runs on port {current.port} (pid {current.pid}); "
                    f"this asked for port {port}",
                    hint=f"Lab.restart(port={port}) moves it there",
                    cli_hint=f"`sgl-kit lab restart --port {port}` moves it there (one lab per lab directory; "
                             "--dir DIR for a second one)")
            current.note = "already running; `sgl-kit lab restart` to change its flags"
            return current
        port = DEFAULT_PORT if port is None else port
        self.prepare()
        argv, label = self._command(variant or "new", flags, port, host, scenario)
        port = int(option_value(argv, "--port") or port)
        host = option_value(argv, "--host") or host
        env = {"SGL_KIT_LAB_SCENARIO": scenario, "CUDA_VISIBLE_DEVICES": "0,1"}
        if machine:  # the scenario's stand-in for a change to the machine (kit/lab/throughput.py, MACHINE_ENV)
            env["SGL_KIT_LAB_MACHINE"] = ",".join(machine)
        env.update({k: os.environ[k] for k in _PASSED_ENV if k in os.environ})
        args = {"lab_dir": self.directory, "argv": argv, "env": env, "host": host, "port": port,
                "timeout": timeout, "label": label}
        result = self._agent("start", args, timeout=timeout + 30)
        return self._started(result, port)

    def _command(self, variant: str | None, flags: list[str] | None, port: int, host: str,
                 scenario: str | None = None) -> tuple[list, str]:
        python = f"{self.directory}/ml-env/bin/python"
        model = f"{self.directory}/models/{MODEL_DIR}"
        if flags:
            return [python, "-m", "kit.lab.launch_server", *_with_defaults(flags, model, host, port)], "custom flags"
        known = variants(scenario=scenario)
        if variant not in known:
            raise LabError(f"unknown lab variant {variant!r}",
                           hint=f"use one of {', '.join(known) or '(none: kit/data/resolved/ is empty)'}, "
                                f"or give sglang flags after --")
        return ([python, "-m", "kit.lab.launch_server",
                 *_with_defaults(_rewrite(known[variant].flags(), model, host, port), model, host, port)],
                f"variant {variant}")

    def _started(self, result: dict, port: int) -> LabStatus:
        outcome = result.get("outcome")
        if outcome == "port-in-use":
            holder = result.get("holder") or {}
            who = f" by pid {holder['pid']} ({' '.join(holder.get('argv', [])[:6])})" if holder else ""
            raise LabError(f"port {port} on {self.host.name} is already in use{who}",
                           hint="pick another with --port, or stop what listens there")
        if outcome in ("exited", "timeout"):
            tail = "\n    ".join(_what_failed(result.get("log_tail") or ["(empty log)"]))
            what = (f"exited with status {result.get('exit_code')}" if outcome == "exited"
                    else f"did not answer /health within {result.get('timeout')} s and was stopped")
            raise LabError(f"the lab server on {self.host.name} {what}; the end of its log:\n    {tail}",
                           hint="fix the flags it names, or run `sgl-kit lab up` without flags for the "
                                "incident's new launch")
        status = self._status(result)
        if outcome == "already-running":
            status.note = "already running; `sgl-kit lab restart` to change its flags"
        return status

    def down(self, timeout: float = 15) -> LabStatus:
        """Stop the server this lab started (by its recorded PID, after checking it is ours)."""
        result = self._agent("stop", {"lab_dir": self.directory, "timeout": timeout}, timeout=timeout + 30)
        notes = {"not-running": "nothing to stop", "stale": f"pid {result.get('pid')} was no longer the lab's; "
                 "left it alone", "stopped": f"stopped pid {result.get('pid')}",
                 "killed": f"pid {result.get('pid')} ignored SIGTERM and was killed"}
        return LabStatus(self.host.name, self.directory, False, note=notes.get(result["outcome"], ""))

    def status(self) -> LabStatus:
        return self._status(self._agent("status", {"lab_dir": self.directory}))

    def restart(self, flags: list[str] | None = None, variant: str | None = None, **options) -> LabStatus:
        """Stop and start again: with new flags, another variant, or the same command and port."""
        previous = self.status()
        self.down()
        if previous.running:
            options.setdefault("port", previous.port)
            if previous.scenario:
                options.setdefault("scenario", previous.scenario)
            if not flags and not variant:
                flags = _flags_of(previous.argv)
        try:
            return self.up(variant=variant or "new", flags=flags, **options)
        except LabError as exc:
            if not previous.running:
                raise
            old = _flags_of(previous.argv)
            raise LabError(
                f"{exc.message}\nThe lab's previous server ({previous.label or 'custom flags'}, pid {previous.pid}) "
                f"was stopped first, so none runs now.",
                hint=f"bring it back with Lab.up(flags={old!r})",
                cli_hint=f"bring it back with `sgl-kit lab up --port {previous.port} -- {shlex.join(old)}`",
            ) from None

    def _check_same(self, current: LabStatus, variant: str | None, flags: list[str] | None) -> None:
        if flags:
            wanted_label = "custom flags"
            same = _comparable(_flags_of(current.argv)) == _comparable(list(flags))
        elif variant:
            wanted_label = f"variant {variant}"
            same = current.label == wanted_label
        else:
            return  # nothing in particular asked for: whatever runs will do
        if not same:
            what = f"--variant {variant}" if not flags else "-- " + shlex.join(flags)
            raise LabError(
                f"the lab on {self.host.name} already runs {current.label or 'custom flags'} (pid {current.pid}); "
                f"this asked for {wanted_label}",
                hint=f"Lab.restart(variant={variant!r}, flags={flags!r}) stops it and starts the one asked for",
                cli_hint=f"`sgl-kit lab restart {what}` stops it and starts the one asked for",
            )

    def _status(self, result: dict) -> LabStatus:
        state = result.get("state") or {}
        if not result.get("running"):
            return LabStatus(self.host.name, self.directory, False)
        host = state.get("host", "127.0.0.1")
        port = int(state["port"])
        url_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        local_port = self.host.forward(port, url_host)
        reach = "" if self.local else f"sgl-kit forward ssh://{self.host.name} --port {port}"
        return LabStatus(self.host.name, self.directory, True, pid=state.get("pid"),
                         url=f"http://127.0.0.1:{local_port}" if not self.local else f"http://{url_host}:{port}",
                         port=port, argv=state.get("argv", []), label=state.get("label"),
                         healthy=result.get("healthy"), started_at=state.get("started_at"), log=result.get("log"),
                         address=f"{host}:{port}", reach=reach, scenario=state.get("scenario"))


def _what_failed(lines: list[str]) -> list[str]:
    """The end of a log from its last error or traceback (argparse prints a long usage first)."""
    marks = [i for i, line in enumerate(lines) if ": error:" in line or line.startswith("Traceback")]
    return lines[marks[-1]:] if marks else lines[-12:]




def _comparable(flags: list[str]) -> list[str]:
    """A launch's flags without where it listens and which model directory it reads."""
    out, i = [], 0
    while i < len(flags):
        head = flags[i].split("=", 1)[0]
        if head in _VALUE_FLAGS:
            i += 1 if "=" in flags[i] else 2
            continue
        out.append(flags[i])
        i += 1
    return out


def _flags_of(argv: list[str]) -> list[str]:
    for i, tok in enumerate(argv):
        if tok.endswith("launch_server"):
            return argv[i + 1:]
    return argv


_VALUE_FLAGS = {"--model-path": "model", "--model": "model", "--host": "host", "--port": "port"}


def _rewrite(flags: list[str], model: str, host: str, port: int) -> list[str]:
    """A recorded command's flags, with this lab's model directory, host and port."""
    values = {"model": model, "host": host, "port": str(port)}
    out, i = [], 0
    while i < len(flags):
        tok = flags[i]
        head = tok.split("=", 1)[0]
        if head in _VALUE_FLAGS:
            out += [head, values[_VALUE_FLAGS[head]]]
            i += 1 if "=" in tok else 2
            continue
        out.append(tok)
        i += 1
    return out


def _with_defaults(flags: list[str], model: str, host: str, port: int) -> list[str]:
    """Add the model path, host and port when the flags do not give them."""
    given = {f.split("=", 1)[0] for f in flags}
    extra = []
    if not given & {"--model-path", "--model"}:
        extra += ["--model-path", model]
    if "--host" not in given:
        extra += ["--host", host]
    if "--port" not in given:
        extra += ["--port", str(port)]
    return extra + list(flags)
