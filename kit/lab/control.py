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
from kit._secrets import mask_argv
from kit.errors import LabError
from kit.hosts import Host, LocalHost

from . import packaging
from .launches import DRYRUN_ENV, RESOLVED_ENV, ResolvedLaunch, load_launches

__all__ = ["Lab", "LabError", "LabStatus", "variants"]

SGLANG_VERSION = "0.5.11"
MODEL_DIR = "Qwen3.6-27B"
DEFAULT_PORT = 30000
PORT_ENV = "SGL_KIT_LAB_PORT"  # the port the lab tries first (default 30000); a test sets its own
LAUNCH_ENV = "SGL_KIT_LAB_LAUNCH"  # which launch the server runs, for discovery (kit/data/launchers.json)
_DATA = Path(__file__).resolve().parent.parent / "data"
# Passed on to the server so a lab started by a test or a benchmark sees the same data.
_PASSED_ENV = (RESOLVED_ENV, DRYRUN_ENV)



def default_port() -> int:
    """The port the lab tries first when none is asked for: ``$SGL_KIT_LAB_PORT``, else 30000."""
    text = os.environ.get(PORT_ENV, "").strip()
    if not text:
        return DEFAULT_PORT
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise LabError(f"${PORT_ENV} is {text!r}, not a port", hint=f"set it to 1..65535, or unset it for {DEFAULT_PORT}")
    return int(text)


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
            f"  command: {' '.join(mask_argv(self.argv))}",
            f"  log:     {self.log}",
            f"  dir:     {self.lab_dir}",
        ] + ([f"  {self.note}"] if self.note else []))

    def to_dict(self) -> dict[str, Any]:
        """The status as data; a secret flag's value in the command masked (kit/_secrets.py)."""
        return {**self.__dict__, "argv": mask_argv(self.argv)}

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

    def _repr_html_(self) -> str:
        """The lab's place and, when it is on this machine, whether it runs (one look at its pid file)."""
        return self.status()._repr_html_()

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
        """Start the lab's server, unless it already runs.

        The launch: ``variant`` (new, old or fixed) with ``flags`` added to it (a flag the variant
        has takes the value given here); ``flags`` alone are the whole launch; neither is the
        variant new, the incident's slow launch. ``port`` None: ``$SGL_KIT_LAB_PORT`` or 30000
        when free, else the next free port, and the status's note says so. When the lab already
        runs the launch asked for, its status comes back with a note; when it runs another one,
        or on another port than the one asked for, LabError says so, since starting nothing would
        leave a different server than the one asked for.
        """
        current = self.status()
        if current.running:
            self._check_same(current, variant, flags, scenario)
            if port is not None and current.port != port:
                raise LabError(
                    f"the lab on {self.host.name} already runs on port {current.port} (pid {current.pid}); "
                    f"this asked for port {port}",
                    hint=f"Lab.restart(port={port}) moves it there",
                    cli_hint=f"`sgl-kit lab restart --port {port}` moves it there (one lab per lab directory; "
                             "--dir DIR for a second one)")
            current.note = "already running; `sgl-kit lab restart` to change its flags"
            return current
        self.prepare()
        port, moved = self._port(port, host, flags)
        argv, label, launch = self._command(variant, flags, port, host, scenario)
        port = int(option_value(argv, "--port") or port)
        host = option_value(argv, "--host") or host
        env = {"SGL_KIT_LAB_SCENARIO": scenario, "CUDA_VISIBLE_DEVICES": "0,1", LAUNCH_ENV: launch}
        if machine:  # the scenario's stand-in for a change to the machine (kit/lab/throughput.py, MACHINE_ENV)
            env["SGL_KIT_LAB_MACHINE"] = ",".join(machine)
        env.update({k: os.environ[k] for k in _PASSED_ENV if k in os.environ})
        args = {"lab_dir": self.directory, "argv": argv, "env": env, "host": host, "port": port,
                "timeout": timeout, "label": label}
        result = self._agent("start", args, timeout=timeout + 30)
        status = self._started(result, port)
        if moved and result.get("outcome") == "started":
            status.note = moved
        return status

    def _port(self, port: int | None, host: str, flags: list[str] | None) -> tuple[int, str]:
        """The port to start on, and a note when the default was taken and another one chosen.

        A port asked for (``port``, or ``--port`` among the flags) is used as it is: when it is
        taken, starting fails and says by whom."""
        if port is not None or option_value(list(flags or []), "--port"):
            return (port if port is not None else default_port()), ""
        wanted = default_port()
        found = self._agent("pick_port", {"host": host, "port": wanted})
        if int(found["port"]) == wanted:
            return wanted, ""
        return int(found["port"]), (f"port {wanted} is in use{_holder_text(found.get('holder'))}, so the lab "
                                    f"listens on {found['port']} (--port N to choose one)")

    def _command(self, variant: str | None, flags: list[str] | None, port: int, host: str,
                 scenario: str | None = None) -> tuple[list, str, str]:
        """(argv, label, launch): the server's command, what `lab status` calls it, and the launch's
        name for discovery (``new``, ``fixed + --enable-metrics``, ``custom``)."""
        python = f"{self.directory}/ml-env/bin/python"
        model = f"{self.directory}/models/{MODEL_DIR}"
        head = [python, "-m", "kit.lab.launch_server"]
        known = variants(scenario=scenario)
        if flags and not variant:  # the flags are the whole launch; named after the variant they are, if any
            name = _variant_named(flags, known)
            return ([*head, *_with_defaults(flags, model, host, port)],
                    f"variant {name}" if name else "custom flags", name or "custom")
        variant = variant or "new"
        if variant not in known:
            raise LabError(f"unknown lab variant {variant!r}",
                           hint=f"use one of {', '.join(known) or '(none: kit/data/resolved/ is empty)'}, "
                                f"or give sglang flags after --")
        merged = _added(_rewrite(known[variant].flags(), model, host, port), list(flags or []))
        name = variant + (f" + {shlex.join(mask_argv(flags))}" if flags else "")  # a label: no secret in it
        return [*head, *_with_defaults(merged, model, host, port)], f"variant {name}", name

    def _started(self, result: dict, port: int) -> LabStatus:
        outcome = result.get("outcome")
        if outcome == "port-in-use":
            raise LabError(f"port {port} on {self.host.name} is already in use{_holder_text(result.get('holder'))}",
                           hint="pick another with --port, or leave --port out and the lab picks a free one, or "
                                "stop what listens there")
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
        """Stop and start again: with new flags, another variant (and flags added to it, as in
        :meth:`up`), or, given neither, the same launch; on the same port unless ``port`` says."""
        previous = self.status()
        self.down()
        if previous.running:
            options.setdefault("port", previous.port)
            if previous.address:
                options.setdefault("host", previous.address.rsplit(":", 1)[0])
            if previous.scenario:
                options.setdefault("scenario", previous.scenario)
            if not flags and not variant:
                flags = _without_place(_flags_of(previous.argv))
        try:
            return self.up(variant=variant, flags=flags, **options)
        except LabError as exc:
            if not previous.running:
                raise
            old = mask_argv(_without_place(_flags_of(previous.argv)))
            raise LabError(
                f"{exc.message}\nThe lab's previous server ({previous.label or 'custom flags'}, pid {previous.pid}) "
                f"was stopped first, so none runs now.",
                hint=f"bring it back with Lab.up(flags={old!r}, port={previous.port})",
                cli_hint=f"bring it back with `sgl-kit lab up --port {previous.port} -- {shlex.join(old)}`",
            ) from None

    def _check_same(self, current: LabStatus, variant: str | None, flags: list[str] | None,
                    scenario: str | None = None) -> None:
        if not flags and not variant:
            return  # nothing in particular asked for: whatever runs will do
        if flags and not variant:
            name = _variant_named(flags, variants(scenario=scenario))
            wanted_label = f"variant {name}" if name else "custom flags"
            same = _options(_flags_of(current.argv)) == _options(list(flags))
        else:
            wanted_label = f"variant {variant}" + (f" + {shlex.join(mask_argv(flags))}" if flags else "")
            same = current.label == wanted_label
        if not same:
            what = (f"--variant {variant}" if variant else "") + (" -- " + shlex.join(mask_argv(flags)) if flags else "")
            raise LabError(
                f"the lab on {self.host.name} already runs {current.label or 'custom flags'} (pid {current.pid}); "
                f"this asked for {wanted_label}",
                hint=f"Lab.restart(variant={variant!r}, flags={(mask_argv(flags) if flags else flags)!r}) stops it and starts the one asked for",
                cli_hint=f"`sgl-kit lab restart {what.strip()}` stops it and starts the one asked for",
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




def _options(flags: list[str]) -> dict[str, str | None]:
    """A launch's options by name (the last value wins, None for a switch), without where it listens and
    which model directory it reads: two launches with the same options are the same launch."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(flags):
        tok = flags[i]
        name, eq, value = tok.partition("=")
        if not eq and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value, i = flags[i + 1], i + 1
        elif not eq:
            value = None
        if name.startswith("--") and name not in _VALUE_FLAGS:
            out[name] = value
        i += 1
    return out


def _variant_named(flags: list[str], known: dict[str, ResolvedLaunch]) -> str | None:
    """The variant whose launch these flags are (its options, whatever their order), or None."""
    mine = _options(list(flags))
    return next((name for name, launch in known.items() if _options(launch.flags()) == mine), None)


def _added(base: list[str], extra: list[str]) -> list[str]:
    """``base`` with ``extra`` added at the end; an option both have is left out of ``base``, so it has
    ``extra``'s value (also for a reader that takes the first value rather than the last)."""
    given = _options(extra)
    out, i = [], 0
    while i < len(base):
        tok = base[i]
        name, eq, _ = tok.partition("=")
        takes = not eq and i + 1 < len(base) and not base[i + 1].startswith("--")
        if name in given:
            i += 2 if takes else 1
            continue
        out += base[i:i + (2 if takes else 1)]
        i += 2 if takes else 1
    return out + list(extra)


def _holder_text(holder: dict | None) -> str:
    """`` by pid 123 (python -m ...)`` for the process that holds a port, on one line."""
    if not holder:
        return ""
    command = " ".join(" ".join(holder.get("argv") or []).split())
    return f" by pid {holder['pid']}" + (f" ({command[:100]}{'...' if len(command) > 100 else ''})" if command else "")


def _flags_of(argv: list[str]) -> list[str]:
    for i, tok in enumerate(argv):
        if tok.endswith("launch_server"):
            return argv[i + 1:]
    return argv


def _without_place(flags: list[str]) -> list[str]:
    """Flags without --model-path/--host/--port, which the lab adds for its own directory and port."""
    out, i = [], 0
    while i < len(flags):
        head = flags[i].split("=", 1)[0]
        if head in _VALUE_FLAGS:
            i += 1 if "=" in flags[i] else 2
            continue
        out.append(flags[i])
        i += 1
    return out


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
