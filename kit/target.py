"""Targets: one string names what to investigate, and the SGLang servers running there.

- ``local``: this machine.
- ``ssh://user@host:port``: a GPU box over SSH.
- ``user@host``, ``host`` or an alias from ``~/.ssh/config``: the same.
- ``lab``: the built-in lab on this machine (``sgl-kit lab up``); as a host it is ``local``.

:func:`resolve_server` is the one way from a target string to a server. ``lab`` is a kind of
target declared as data (``targets`` in ``kit/data/launchers.json``): the server whose
``lab_dir`` label is this machine's lab directory, whichever engine (stand-in or real sglang)
runs it.

:func:`discover` finds the server processes on a host from ``/proc``: argv, environment,
log, interpreter, sglang install and URL. Which argv counts as a server is data
(``kit/data/launchers.json``): sglang's own launchers and the lab's stand-in are listed
there, so this module knows nothing of the lab's internals. Results are plain data.
"""

from __future__ import annotations

import base64
import html
import json
import re
import shlex
import socket
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ._remote import run_json, script
from ._secrets import SECRET_NAME_PATTERN, mask_argv, redact_env
from .errors import HostError, TargetError
from .hosts import Host, LocalHost

__all__ = ["ENV_PREFIXES", "PREFETCH", "HostInventory", "ServerProcess", "connect", "discover", "find_server",
           "get_server_info", "inventory", "launchers", "parse_target", "resolve_server", "target_kinds"]

_LAUNCHERS = Path(__file__).resolve().parent / "data" / "launchers.json"
# Environment variables discovery reads: they change how SGLang, NCCL and CUDA behave. A
# variable outside these prefixes is not read, so it is unknown, not unset.
ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "SGL_", "TORCH", "PYTORCH_", "NVIDIA_", "OMP_", "HF_", "VIRTUAL_ENV",
             "PYTHONPATH")

# What ``discover(host, prefetch=True)`` brings back with each server in the same round trip: what the
# doctor reads next (the head and tail of the log, /server_info) and the hardware probes' answers.
PREFETCH = {"head": 3000, "tail": 4000, "server_info": 10.0, "probes": True}

_HOST_PORT = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^@/:\[\]]+):(?P<port>\d+)$")
_HOSTNAME = re.compile(r"^(?:[A-Za-z0-9_.%+-]+@)?[A-Za-z0-9_.:\[\]-]+$")


def parse_target(target: str) -> dict:
    """Split a target string into its parts without connecting.

    Returns ``{"kind": "local"|"lab"|"ssh", "host": ..., "user": ..., "port": ...}``.
    """
    text = (target or "").strip()
    if text in ("", "local"):
        return {"kind": "local"}
    if text == "lab":
        return {"kind": "lab"}
    if text.startswith("ssh://"):
        return _parse_ssh_url(text)
    host_port = _HOST_PORT.match(text)
    if host_port:
        user = f"{host_port['user']}@" if host_port["user"] else ""
        raise TargetError(
            f"{target!r} is host:port, which is not how a target names an SSH port",
            hint=f"write ssh://{user}{host_port['host']}:{host_port['port']} (or, for `sgl-kit bench`, "
                 f"http://{host_port['host']}:{host_port['port']} to reach the server directly)",
        )
    if "://" in text:
        raise TargetError(
            f"unknown target scheme in {target!r}",
            hint="use `local`, `lab`, `ssh://user@host:port`, `user@host` or an ~/.ssh/config alias",
        )
    if not _HOSTNAME.match(text):
        raise TargetError(
            f"{target!r} is not a host name, user@host, or ssh:// URL",
            hint="use `local`, `lab`, `ssh://user@host:port`, `user@host` or an ~/.ssh/config alias",
        )
    user, _, host = text.rpartition("@")
    return {"kind": "ssh", "host": host, "user": user or None, "port": None}


def _parse_ssh_url(text: str) -> dict:
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        raise TargetError(f"bad port in {text!r}", hint="write it as ssh://user@host:2222") from None
    if not parts.hostname:
        raise TargetError(f"no host in {text!r}", hint="write it as ssh://user@host:port")
    if parts.path not in ("", "/"):
        raise TargetError(f"{text!r} has a path; targets name a host only", hint="drop the path")
    return {
        "kind": "ssh",
        "host": parts.hostname,
        "user": unquote(parts.username) if parts.username else None,
        "port": port,
    }


def connect(target: str = "local", **ssh_options) -> Host:
    """Return a Host for a target string.

    ``ssh_options`` go to :class:`kit.hosts.SSHHost` (``trust_new_host``,
    ``key_filename``, ``known_hosts``, ``config_file``, ...). The connection
    opens lazily, on the first command.
    """
    spec = parse_target(target)
    if spec["kind"] in ("local", "lab"):
        return LocalHost()
    options = dict(ssh_options)
    if spec["port"] is not None:
        options.setdefault("port", spec["port"])
    if spec["user"]:
        options.setdefault("user", spec["user"])

    def direct() -> Host:
        from .hosts import SSHHost  # paramiko: a tenth of a second to import, not needed through a keeper

        return SSHHost(spec["host"], **options)

    if options.get("persist"):  # a keeper of this connection answers: no SSH of our own (kit.hosts.kept)
        from .hosts.kept import kept_host

        found = kept_host(spec["host"], options, direct)
        if found is not None:
            return found
    return direct()


@dataclass
class ServerProcess:
    """A running SGLang server (or the lab's stand-in) as found on its host."""

    host_name: str
    pid: int
    kind: str
    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    env_readable: bool
    log_path: str | None
    log_note: str
    python: str | None
    sglang_dir: str | None
    sglang_version: str | None
    bind_host: str
    port: int
    url: str | None = None
    labels: dict[str, str | None] = field(default_factory=dict)
    started_at: float | None = None
    host: Host | None = field(default=None, repr=False, compare=False)
    children: list[dict] = field(default_factory=list)  # direct child processes: pid, name, argv
    notice: str = ""  # what the target that found it says about it (resolve_server: the lab's launch)
    # What discovery fetched with it (discover(prefetch=...)); each log read and /server_info answer
    # is used once, by the first question that asks for exactly it, then read afresh.
    prefetched: dict = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"<ServerProcess {self.kind} {self.sglang_version or '?'} pid {self.pid} on {self.host_name}: "
                f"{self.url or f'{self.bind_host}:{self.port}'}>")

    @property
    def command(self) -> str:
        """The command line as the kit shows it: a secret flag's value and URL passwords masked (kit/_secrets.py)."""
        return shlex.join(mask_argv(self.argv))

    def log_text(self) -> str:
        if not self.log_path:
            raise TargetError(f"pid {self.pid} on {self.host_name} does not write its log to a file "
                              f"({self.log_note})", hint="pass the log file with --log, or read journalctl")
        return self._host().read_text(self.log_path)

    def log_tail(self, lines: int = 20) -> list[str]:
        """The last ``lines`` lines of the log (``tail -n``)."""
        return self._log_lines("tail", lines)

    def log_head(self, lines: int = 20) -> list[str]:
        """The first ``lines`` lines of the log (``head -n``)."""
        return self._log_lines("head", lines)

    def _log_lines(self, command: str, lines: int) -> list[str]:
        if not self.log_path:
            return []
        found = self.prefetched.get(command)
        if found is not None and found[0] == int(lines):
            del self.prefetched[command]
            return _text(found[1]).splitlines()
        res = self._host().run([command, "-n", str(int(lines)), self.log_path], timeout=30)
        return res.stdout.splitlines()

    def server_info(self, timeout: float = 10.0) -> dict:
        """GET /server_info (:func:`get_server_info`), through the URL discovery chose (or the answer
        discovery brought)."""
        if not self.url:
            raise TargetError(f"no URL for pid {self.pid} on {self.host_name}")
        body = self.prefetched.pop("server_info", None)
        if body is not None:
            where = self.url.rstrip("/") + _SERVER_INFO_PATHS[0]
            try:
                raw = base64.b64decode(body)
            except ValueError as exc:
                raise _server_info_error(where, exc, self.host_name) from None
            return _server_info_answer(raw, where, self.host_name)
        return get_server_info(self.url, timeout=timeout, host_name=self.host_name)

    def _host(self) -> Host:
        if self.host is None:
            raise TargetError("this ServerProcess has no host attached", hint="get it from discover(host)")
        return self.host

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("host", "labels", "prefetched")}
        # Every label any launcher declares is a key, so the schema does not depend on what runs.
        out.update({name: None for name in _label_names()})
        out.update(self.labels)
        return out

    def to_text(self) -> str:
        rows = [("pid", self.pid), ("kind", _describe(self.kind)),
                ("sglang", f"{self.sglang_version or '?'} at {self.sglang_dir or '?'}"),
                ("python", self.python), ("url", self.url), ("log", self.log_path or f"none ({self.log_note})"),
                ("command", self.command)]
        rows += [("child", f"pid {c['pid']} {c['name']}") for c in self.children]
        rows += [(f"env {k}", v) for k, v in redact_env(self.env).items()]
        return "\n".join(f"{k:<12} {v}" for k, v in rows)

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td><code>"
                       f"{html.escape(str(v))}</code></td></tr>"
                       for k, v in (line.split(" ", 1) if " " in line else (line, "") for line in
                                    (ln.strip() for ln in self.to_text().splitlines())))
        return f"<div><b>{html.escape(repr(self))}</b><table>{body}</table></div>"


# /server_info from sglang 0.5.6; before it, /get_server_info only (deprecated since, with a warning in the log).
_SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def get_server_info(url: str, *, timeout: float = 10.0, host_name: str | None = None) -> dict:
    """The server's ``GET /server_info``: its arguments, scheduler info, per-rank ``internal_states`` and
    version, with every value under a secret-looking name masked (the kit never needs the server's keys,
    so they are not kept). The one reader of it; ``ServerProcess.server_info`` and the profiler call it.

    ``url`` is the server's base URL (``http://host:port``). A release before 0.5.6 answers 404 there and
    serves ``/get_server_info``, which is asked then. No answer within ``timeout`` seconds, an HTTP error
    or an answer that is not a JSON object is a :class:`kit.errors.HostError` naming the URL asked
    (``host_name``: the host the server runs on, for the error).
    """
    import urllib.error
    import urllib.request

    base = url.rstrip("/")
    for path in _SERVER_INFO_PATHS:
        where = base + path
        try:
            with urllib.request.urlopen(where, timeout=timeout) as resp:
                raw = resp.read()
            break
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and path != _SERVER_INFO_PATHS[-1]:
                continue
            raise _server_info_error(where, exc, host_name) from None
        except (OSError, ValueError) as exc:
            raise _server_info_error(where, exc, host_name) from None
    return _server_info_answer(raw, where, host_name)


def _server_info_answer(raw: bytes, where: str, host_name: str | None) -> dict:
    from kit._secrets import mask_named

    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _server_info_error(where, exc, host_name) from None
    if not isinstance(data, dict):
        raise _server_info_error(where, f"the answer is a JSON {type(data).__name__}, not an object", host_name)
    return mask_named(data)


def _server_info_error(where: str, why, host_name: str | None) -> HostError:
    return HostError(f"GET {where} failed: {why}", host=host_name or "",
                     hint="is the server up? `sgl-kit lab status` for the lab")


def discover(host: Host, timeout: float = 60.0, *, prefetch: bool | dict = False) -> list[ServerProcess]:
    """SGLang servers on a host: ``python -m sglang.launch_server``, ``sglang serve``, the lab's.

    Reads /proc on the host with its python3. Environment variables are those of
    NCCL/CUDA/SGLANG/torch kinds (secrets redacted) and only where /proc lets this user
    read them. The URL reaches the server from here: directly on this machine, and on an
    SSH host through a port forward when the server listens on loopback only (or when
    its port does not answer from here).

    ``prefetch`` (True for ``PREFETCH``, or a dict like it) brings, in the same round trip, what
    is read next about each server: the head and tail of its log, its /server_info answer, the
    host's answers to the hardware probes (kit.provenance.host_probes). The answers are the
    ones asking afterwards gives; each is used once (``ServerProcess.prefetched``).
    """
    request = {"launchers": launchers(), "keep": ENV_PREFIXES, "secret_pattern": SECRET_NAME_PATTERN, "locate": script("locate"),
               "package": "sglang"}
    if prefetch:
        request["prefetch"] = dict(PREFETCH) if prefetch is True else dict(prefetch)
    data = run_json(host, "processes", json.dumps(request), python=host.python, timeout=timeout,
                    what="list server processes", hint="discovery needs python3 and a readable /proc on the host")
    servers = [ServerProcess(host_name=host.name, host=host, **item) for item in data["servers"]]
    if isinstance(data.get("machine"), str):
        for server in servers:
            server.prefetched["machine"] = data["machine"]
    for server in servers:
        server.url = _url(host, server.bind_host, server.port)
    return servers


@cache
def target_kinds() -> dict[str, dict]:
    """Target strings that name a server by its labels (``lab``: the server of this machine's lab
    directory, whichever engine runs it), from kit/data/launchers.json."""
    return json.loads(_LAUNCHERS.read_text()).get("targets", {})


def resolve_server(host: Host, target: str | None = None, *, pid: int | None = None, port: int | None = None,
                   servers: list[ServerProcess] | None = None, prefetch: bool | dict = False) -> ServerProcess:
    """The server a target string means on ``host``: for a labelled kind (``lab``) the server whose
    labels match it (and ``pid``/``port``, when given), else the one chosen by pid or port, or the only one.

    The one way from a target string to a server: the CLI, the doctor, the investigation and the
    notebooks call it with their ``target``, so the same cell works on the lab and on a real box.
    The server found carries its kind's ``notice`` (``kit/data/launchers.json``) when there is one
    to say: for the lab, which launch it runs when that is not the incident's slow one.
    ``prefetch`` goes to discover().
    """
    kind = parse_target(target)["kind"] if target is not None else None
    spec = target_kinds().get(kind or "")
    if spec is None:
        return find_server(host, pid=pid, port=port, servers=servers, prefetch=prefetch)
    from . import _paths

    wanted = {label: getattr(_paths, path)() for label, path in spec.get("labels", {}).items()}
    servers = discover(host, prefetch=prefetch) if servers is None else servers
    labelled = [s for s in servers if all(s.labels.get(k) == v for k, v in wanted.items())]
    picked = [s for s in labelled if (pid is None or s.pid == pid) and (port is None or s.port == port)]
    if not picked and labelled:
        asked = " and ".join(f"{what} {value}" for what, value in (("pid", pid), ("port", port)) if value is not None)
        found = " and ".join(f"pid {s.pid} on port {s.port}" for s in labelled)
        raise TargetError(f"`{target}` is the server {found}; this asked for {asked}",
                          hint=f"leave out --pid/--port: `{target}` finds it wherever it runs")
    if not picked:
        raise TargetError(spec["missing"].format(**wanted), hint=spec.get("hint", ""),
                          cli_hint=spec.get("cli_hint", ""))
    server = picked[-1]
    server.notice = _notice(spec.get("notice"), server)
    return server


def _notice(spec: dict | None, server: ServerProcess) -> str:
    """The line a target kind says about the server found (launchers.json ``notice``), or ''."""
    if not spec:
        return ""
    value = server.labels.get(spec["label"])
    if not value or value in spec.get("quiet", ()):
        return ""
    return spec["text"].format(**{k: v for k, v in server.labels.items() if v is not None})


@cache
def launchers() -> list[dict]:
    """How a server process is recognised by its argv (kit/data/launchers.json), in order."""
    return json.loads(_LAUNCHERS.read_text())["launchers"]


def _label_names() -> list[str]:
    return sorted({name for launcher in launchers() for name in launcher.get("labels", {})})


def _describe(kind: str) -> str:
    for launcher in launchers():
        if launcher["kind"] == kind and launcher.get("describe"):
            return launcher["describe"]
    return kind


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _text(body: str) -> str:
    """Prefetched bytes (base64) as the host's command output reads them."""
    return base64.b64decode(body).decode("utf-8", errors="replace")


def _url(host: Host, bind: str, port: int) -> str:
    if isinstance(host, LocalHost):
        return f"http://{'127.0.0.1' if bind in ('0.0.0.0', '::', '') else bind}:{port}"
    remote = getattr(host, "hostname", None)
    if bind not in _LOOPBACK and remote and _answers(remote, port):
        return f"http://{remote}:{port}"
    target = "127.0.0.1" if bind in ("0.0.0.0", "::", "") + _LOOPBACK else bind
    return f"http://127.0.0.1:{host.forward(port, target)}"


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1.5):
            return True
    except OSError:
        return False


def find_server(host: Host, *, pid: int | None = None, port: int | None = None, kind: str | None = None,
                labels: dict[str, str] | None = None, servers: list[ServerProcess] | None = None,
                prefetch: bool | dict = False) -> ServerProcess:
    """The one server to investigate: by pid, port, kind or labels, or the only one there is.

    Raises TargetError listing what runs when none or several match. ``prefetch`` goes to discover().
    """
    servers = discover(host, prefetch=prefetch) if servers is None else servers
    picked = [s for s in servers if (pid is None or s.pid == pid) and (port is None or s.port == port)
              and (kind is None or s.kind == kind)
              and all(s.labels.get(k) == v for k, v in (labels or {}).items())]
    if len(picked) == 1:
        return picked[0]
    listing = "; ".join(f"pid {s.pid} port {s.port} ({s.kind})" for s in servers) or "none"
    if not picked:
        raise TargetError(f"no SGLang server on {host.name} matches (found: {listing})",
                          hint="check the pid or port, or start the server")
    raise TargetError(f"{len(picked)} SGLang servers run on {host.name}: {listing}",
                      hint="choose one with --pid PID or --port PORT")


# --------------------------------------------------------------------------- inventory


@dataclass
class HostInventory:
    """What a host has: OS, CPUs, memory and the NVIDIA GPUs nvidia-smi reports."""

    host_name: str
    hostname: str
    os: str
    kernel: str
    machine: str
    cpus: int | None
    memory_gb: float | None
    python3: str
    gpus: list[dict[str, str]]
    gpu_note: str

    def __repr__(self) -> str:
        gpus = f"{len(self.gpus)} GPU(s)" if self.gpus else "no GPU"
        return f"<HostInventory {self.host_name}: {self.cpus} CPUs, {self.memory_gb} GB, {gpus}>"

    def to_text(self) -> str:
        lines = [f"host     {self.hostname} ({self.host_name})", f"os       {self.os}, kernel {self.kernel}, "
                 f"{self.machine}", f"cpus     {self.cpus}", f"memory   {self.memory_gb} GB",
                 f"python3  {self.python3}"]
        lines += [f"gpu {g['index']}    {g['name']}, {g['memory_mib']} MiB, driver {g['driver']}, "
                  f"sm {g['compute_cap']}" for g in self.gpus]
        if not self.gpus:
            lines.append(f"gpus     none ({self.gpu_note})")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.to_text())}</pre>"


def inventory(host: Host, timeout: float = 60.0) -> HostInventory:
    """The host's OS, CPUs, memory and GPUs, in one round trip."""
    data = run_json(host, "inventory", python=host.python, timeout=timeout, what="read the inventory",
                    hint="it needs python3 on the host")
    return HostInventory(host_name=host.name, **data)
