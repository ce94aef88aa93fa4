"""Targets: one string names what to investigate, and the SGLang servers running there.

- ``local``: this machine.
- ``ssh://user@host:port``: a GPU box over SSH.
- ``user@host``, ``host`` or an alias from ``~/.ssh/config``: the same.
- ``lab``: the built-in lab on this machine (``sgl-kit lab up``).

:func:`discover` finds the SGLang server processes on a host, real sglang's and the
lab's, from ``/proc``: argv, environment, log, interpreter, sglang install and URL.
"""

from __future__ import annotations

import html
import inspect
import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import HostError, TargetError
from .hosts import Host, LocalHost

__all__ = ["HostInventory", "ServerProcess", "connect", "default_lab_dir", "discover", "find_server",
           "inventory", "parse_target"]

LAB_DIR_ENV = "SGL_KIT_LAB_DIR"

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
    from .hosts import SSHHost

    return SSHHost(spec["host"], **options)


def default_lab_dir() -> str:
    """Where the ``lab`` target's lab lives: ``$SGL_KIT_LAB_DIR``, else ``<kit cache>/lab``."""
    from .source import cache_dir

    return os.environ.get(LAB_DIR_ENV) or str(cache_dir() / "lab")


# --------------------------------------------------------------------------- discovery


def _probe(lab_env: str) -> dict:
    """Runs ON the host (its source is sent to python3 there): SGLang servers in /proc.

    Standard library only, and self-contained, because only this function's text travels.
    """
    import json as _json
    import os as _os
    import subprocess as _sp

    keep = ("NCCL_", "CUDA_", "SGLANG_", "SGL_", "TORCH", "PYTORCH_", "NVIDIA_", "OMP_", "HF_", "VIRTUAL_ENV",
            "PYTHONPATH")
    secret = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")

    def read(path, mode="rb"):
        try:
            with open(path, mode) as fh:
                return fh.read()
        except OSError:
            return None

    def kind_of(argv):
        for i, arg in enumerate(argv):
            nxt = argv[i + 1:i + 3]
            base = _os.path.basename(arg)
            if arg == "-m" and nxt[:1] == ["kit.lab.launch_server"]:
                return "lab", i + 2
            if arg == "-m" and nxt[:1] and nxt[0].endswith("sglang.launch_server"):
                return "sglang", i + 2
            if arg == "-m" and nxt[:1] in (["sglang"], ["sglang.cli.main"]) and nxt[1:] == ["serve"]:
                return "sglang", i + 3
            if base == "sglang" and nxt[:1] == ["serve"]:
                return "sglang", i + 2
            if base == "launch_server.py" and i <= 1:
                return "sglang", i + 1
        return None, 0

    def option(flags, name, default):
        value = default
        for i, tok in enumerate(flags):
            if tok == name and i + 1 < len(flags):
                value = flags[i + 1]
            elif tok.startswith(name + "="):
                value = tok.split("=", 1)[1]
        return value

    def interpreter(pid, argv, env, cwd):
        first = argv[0] if argv else ""
        if first.startswith("/"):
            return first
        if "/" in first and cwd:
            return _os.path.normpath(_os.path.join(cwd, first))
        for d in (env or {}).get("PATH", "").split(":"):
            if d and first and _os.access(_os.path.join(d, first), _os.X_OK):
                return _os.path.join(d, first)
        try:
            return _os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return None

    def sglang_of(python, env, cwd):
        if not python:
            return None, None
        code = ("import importlib.util,json;s=importlib.util.find_spec('sglang');"
                "print(json.dumps(list(s.submodule_search_locations)[0] if s else None))")
        run_env = {k: v for k, v in (env or {}).items() if k in ("PATH", "PYTHONPATH", "HOME", "VIRTUAL_ENV")}
        try:
            res = _sp.run([python, "-c", code], capture_output=True, text=True, timeout=20, env=run_env or None,
                          cwd=cwd if cwd and _os.path.isdir(cwd) else None)
            root = _json.loads(res.stdout.strip() or "null")
        except (OSError, ValueError, _sp.SubprocessError):
            return None, None
        if not root:
            return None, None
        parent = _os.path.dirname(root)
        for entry in sorted(_os.listdir(parent)):
            if entry.startswith("sglang-") and entry.endswith(".dist-info"):
                return root, entry[len("sglang-"):-len(".dist-info")]
        return root, None

    def log_of(pid):
        notes = []
        for fd in (1, 2):
            try:
                target = _os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                notes.append(f"fd {fd} unreadable")
                continue
            deleted = target.endswith(" (deleted)")
            if target.startswith("/") and not target.startswith(("/dev/pts", "/dev/tty", "/dev/null")):
                return target[:-10] if deleted else target, "deleted since" if deleted else ""
            notes.append(f"fd {fd} is {target.split(':')[0]}")
        return None, "; ".join(notes)

    ticks = _os.sysconf("SC_CLK_TCK") if hasattr(_os, "sysconf") else 100
    boot = 0.0
    for line in (read("/proc/stat", "r") or "").splitlines():
        if line.startswith("btime "):
            boot = float(line.split()[1])
    found, pids = [], {}
    for name in _os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        raw = read(f"/proc/{pid}/cmdline")
        if not raw:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        kind, at = kind_of(argv)
        if kind:
            pids[pid] = (kind, at, argv)
    for pid, (kind, at, argv) in sorted(pids.items()):
        stat = (read(f"/proc/{pid}/stat", "r") or ") 0 0").rsplit(")", 1)[1].split()
        if int(stat[1]) in pids:
            continue  # a forked child of a server we already list
        raw_env = read(f"/proc/{pid}/environ")
        env = None
        if raw_env is not None:
            env = dict(p.decode("utf-8", "replace").partition("=")[::2] for p in raw_env.split(b"\0") if p)
        try:
            cwd = _os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = None
        python = interpreter(pid, argv, env, cwd)
        root, version = sglang_of(python, env, cwd)
        log, note = log_of(pid)
        shown = {}
        for k, v in sorted((env or {}).items()):
            if k.startswith(keep):
                shown[k] = "<redacted>" if any(w in k.upper() for w in secret) else v
        flags = argv[at:]
        found.append({
            "pid": pid, "kind": kind, "argv": argv, "cwd": cwd, "env": shown, "env_readable": env is not None,
            "log_path": log, "log_note": note, "python": python, "sglang_dir": root, "sglang_version": version,
            "bind_host": option(flags, "--host", "127.0.0.1"), "port": int(option(flags, "--port", "30000")),
            "lab_dir": (env or {}).get(lab_env), "started_at": boot + int(stat[19]) / ticks if len(stat) > 19 else None,
        })
    return {"servers": found}


_PROBE_SOURCE = inspect.getsource(_probe)


def _probe_python(host: Host) -> str:
    return sys.executable if isinstance(host, LocalHost) else getattr(host, "helper_python", "python3")


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
    lab_dir: str | None = None
    started_at: float | None = None
    host: Host | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        what = "lab" if self.kind == "lab" else "sglang"
        return (f"<ServerProcess {what} {self.sglang_version or '?'} pid {self.pid} on {self.host_name}: "
                f"{self.url or f'{self.bind_host}:{self.port}'}>")

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def source_tree(self):
        """The sglang source this server's interpreter imports (a kit.source.SourceTree)."""
        from .source import SourceTree

        if not self.sglang_dir:
            raise TargetError(f"no sglang install found for pid {self.pid} on {self.host_name}",
                              hint=f"its interpreter {self.python} cannot import sglang; pass --package-dir")
        return SourceTree.at(self._host(), self.sglang_dir)

    def log_text(self) -> str:
        if not self.log_path:
            raise TargetError(f"pid {self.pid} on {self.host_name} does not write its log to a file "
                              f"({self.log_note})", hint="pass the log file with --log, or read journalctl")
        return self._host().read_text(self.log_path)

    def log_tail(self, lines: int = 20) -> list[str]:
        if not self.log_path:
            return []
        res = self._host().run(["tail", "-n", str(int(lines)), self.log_path], timeout=30)
        return res.stdout.splitlines()

    def server_info(self, timeout: float = 10.0) -> dict:
        """GET /server_info, through the URL discovery chose."""
        import urllib.request

        if not self.url:
            raise TargetError(f"no URL for pid {self.pid} on {self.host_name}")
        try:
            with urllib.request.urlopen(self.url + "/server_info", timeout=timeout) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError) as exc:
            raise HostError(f"GET {self.url}/server_info failed: {exc}", host=self.host_name,
                            hint="is the server up? `sgl-kit lab status` for the lab") from None

    def effective_args(self):
        """The arguments the server runs with: /server_info when it answers, else its log."""
        from .server_args import from_server_info, parse_log

        try:
            return from_server_info(self.server_info())
        except (HostError, TargetError):
            return parse_log(self.log_text())

    def explicit_args(self, tree=None) -> dict[str, Any]:
        """The flags its argv sets, read with the flag table of its own sglang source."""
        from .server_args import flag_table, parse_command

        tree = tree or self.source_tree()
        return parse_command(self.argv, flag_table(tree), cwd=self.cwd)

    def classify(self, tree=None):
        """classify() of effective, explicit and default args: what SGLang changed on its own."""
        from .server_args import classify, defaults

        tree = tree or self.source_tree()
        return classify(self.effective_args(), self.explicit_args(tree), defaults(tree))

    def model_config(self, snapshot=None) -> dict | None:
        """The config.json under the server's model_path, when it is a directory on the host."""
        snapshot = snapshot if snapshot is not None else self.effective_args()
        model = snapshot.get("model_path")
        if not isinstance(model, str) or not model.startswith("/"):
            return None
        path = model.rstrip("/") + "/config.json"
        host = self._host()
        return json.loads(host.read_text(path)) if host.exists(path) else None

    def _host(self) -> Host:
        if self.host is None:
            raise TargetError("this ServerProcess has no host attached", hint="get it from discover(host)")
        return self.host

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "host"}

    def to_text(self) -> str:
        rows = [("pid", self.pid), ("kind", "lab (stand-in)" if self.kind == "lab" else "sglang"),
                ("sglang", f"{self.sglang_version or '?'} at {self.sglang_dir or '?'}"),
                ("python", self.python), ("url", self.url), ("log", self.log_path or f"none ({self.log_note})"),
                ("command", self.command)]
        rows += [(f"env {k}", v) for k, v in self.env.items()]
        return "\n".join(f"{k:<12} {v}" for k, v in rows)

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td><code>"
                       f"{html.escape(str(v))}</code></td></tr>"
                       for k, v in (line.split(" ", 1) if " " in line else (line, "") for line in
                                    (ln.strip() for ln in self.to_text().splitlines())))
        return f"<div><b>{html.escape(repr(self))}</b><table>{body}</table></div>"


def discover(host: Host, timeout: float = 60.0) -> list[ServerProcess]:
    """SGLang servers on a host: ``python -m sglang.launch_server``, ``sglang serve``, the lab's.

    Reads /proc on the host with its python3. Environment variables are those of
    NCCL/CUDA/SGLANG/torch kinds (secrets redacted) and only where /proc lets this user
    read them. The URL reaches the server from here: directly on this machine, and on an
    SSH host through a port forward when the server listens on loopback only (or when
    its port does not answer from here).
    """
    code = _PROBE_SOURCE + f"\nimport json\nprint(json.dumps(_probe({LAB_DIR_ENV!r})))\n"
    res = host.run([_probe_python(host), "-c", code], timeout=timeout)
    try:
        data = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise HostError(f"could not list processes on {host.name}: {(res.stderr or res.stdout).strip()[-400:]}",
                        host=host.name, hint="discovery needs python3 and a readable /proc on the host") from None
    servers = [ServerProcess(host_name=host.name, host=host, **item) for item in data["servers"]]
    for server in servers:
        server.url = _url(host, server.bind_host, server.port)
    return servers


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


def find_server(host: Host, target: str | None = None, *, pid: int | None = None, port: int | None = None,
                servers: list[ServerProcess] | None = None) -> ServerProcess:
    """The one server to investigate: by pid or port, the lab's for target ``lab``, or the only one."""
    servers = discover(host) if servers is None else servers
    picked = [s for s in servers if (pid is None or s.pid == pid) and (port is None or s.port == port)]
    if target == "lab" and pid is None and port is None:
        lab_dir = default_lab_dir()
        picked = [s for s in picked if s.kind == "lab" and s.lab_dir == lab_dir]
        if not picked:
            raise TargetError(f"the lab is not running on this machine (looked for a lab server of {lab_dir})",
                              hint="start it with `sgl-kit lab up` (or kit.lab.up() in a notebook)")
    if len(picked) == 1:
        return picked[0]
    listing = "; ".join(f"pid {s.pid} port {s.port} ({s.kind})" for s in servers) or "none"
    if not picked:
        raise TargetError(f"no SGLang server on {host.name} matches (found: {listing})",
                          hint="check the pid or port, or start the server")
    raise TargetError(f"{len(picked)} SGLang servers run on {host.name}: {listing}",
                      hint="choose one with --pid PID or --port PORT")


# --------------------------------------------------------------------------- inventory


def _inventory_probe() -> dict:
    """Runs ON the host: what hardware and software it has (stdlib only, self-contained)."""
    import os as _os
    import platform as _platform
    import shutil as _shutil
    import subprocess as _sp

    info = {"hostname": _platform.node(), "kernel": _platform.release(), "machine": _platform.machine(),
            "cpus": _os.cpu_count(), "python3": _platform.python_version(), "os": "", "memory_gb": None,
            "gpus": [], "gpu_note": ""}
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    smi = _shutil.which("nvidia-smi")
    if not smi:
        info["gpu_note"] = "nvidia-smi not found: no NVIDIA GPU visible on this host"
        return info
    query = ["--query-gpu=index,name,memory.total,driver_version,compute_cap", "--format=csv,noheader,nounits"]
    try:
        res = _sp.run([smi] + query, capture_output=True, text=True, timeout=30)
    except (OSError, _sp.SubprocessError) as exc:
        info["gpu_note"] = f"nvidia-smi failed: {exc}"
        return info
    for line in res.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            info["gpus"].append({"index": parts[0], "name": parts[1], "memory_mib": parts[2], "driver": parts[3],
                                 "compute_cap": parts[4] if len(parts) > 4 else ""})
    if res.returncode != 0:
        info["gpu_note"] = res.stderr.strip()[-300:]
    return info


_INVENTORY_SOURCE = inspect.getsource(_inventory_probe)


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
    code = _INVENTORY_SOURCE + "\nimport json\nprint(json.dumps(_inventory_probe()))\n"
    res = host.run([_probe_python(host), "-c", code], timeout=timeout)
    try:
        data: Mapping[str, Any] = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise HostError(f"could not read the inventory of {host.name}: {(res.stderr or res.stdout).strip()[-300:]}",
                        host=host.name, hint="it needs python3 on the host") from None
    return HostInventory(host_name=host.name, **data)
