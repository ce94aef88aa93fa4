"""A small fleet on this machine: K network namespaces, each a "host" with its own address, sshd and lab server.

Each host is one namespace ``kit-fleet-<tag>-<i>`` joined to this machine by a veth pair (this side
``10.<b>.<i>.1/24``, the host's side ``10.<b>.<i>.2/24``; ``b`` is a free second octet from 200-254, ``tag``
random, so two test sessions do not clash). Inside it runs, as in a real fleet:

- its own PID, mount and UTS namespaces (``unshare --pid --mount-proc --uts``): the kit's discovery reads
  /proc, which on a shared PID namespace would show every host's server on the same port;
- a lab stand-in server (``sgl-kit lab up``) on port 30000 of every host, listening on 0.0.0.0, its lab
  directory at the same path on every host (a private directory bind-mounted there), so the launch and the
  environment differ only where a host is launched differently (its ``variant``);
- ``sshd`` on the host's address, port 22, the conftest's sshd_config, host key and authorized user key.

``known_hosts`` holds each host key the way OpenSSH and paramiko look up port 22: ``10.<b>.<i>.2 <key>``.
Everything (processes, veths, namespaces) is removed at the end, also when starting failed. This needs root
and ``ip``; without them it fails, saying so (never a skip).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import SSHD, _current_user, _sshd_config, make_sshd_factory

SERVER_PORT = 30000
SSH_PORT = 22
START_TIMEOUT = 90.0
SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"


@dataclass(frozen=True)
class HostSpec:
    """One host of the fleet: the lab ``variant`` it runs (None: no server), whether its sshd runs."""

    variant: str | None = "new"
    sshd: bool = True


@dataclass
class NetnsHost:
    index: int
    netns: str
    address: str  # the host's address, in its namespace
    gateway: str  # this machine's end of the veth
    veth: str  # this machine's end of the veth (deleting it deletes the pair)
    spec: HostSpec
    directory: Path
    host_key_pub: str | None = None
    proc: subprocess.Popen | None = None
    lab: dict | None = None  # `sgl-kit --json lab up`'s status; its pid is the host's own (its PID namespace)
    user: str = "root"

    @property
    def target(self) -> str:
        return f"ssh://{self.user}@{self.address}:{SSH_PORT}"

    @property
    def member(self) -> str:
        """The replica's name as `sgl-kit fleet ... --port 30000` names it."""
        return f"{self.target}:{SERVER_PORT}"

    @property
    def known_hosts_line(self) -> str:
        return f"{self.address} {self.host_key_pub}"

    def log(self) -> str:
        path = self.directory / "host.log"
        return path.read_text(errors="replace") if path.exists() else "(no log)"


@dataclass
class NetnsFleet:
    root: Path
    hosts: list[NetnsHost]
    key: Path  # the user's private key, authorized on every host
    known_hosts: Path  # every host's key
    ssh_config: Path  # empty: no ~/.ssh/config of this machine's user gets in
    user: str
    prefix: str  # the first two octets, e.g. "10.231"
    names: list[str] = field(default_factory=list)

    def known_hosts_without(self, *indexes: int) -> Path:
        """A known_hosts file without the keys of these hosts (by their index, 1..K)."""
        path = self.root / ("known_hosts_without_" + "_".join(map(str, indexes)))
        path.write_text("".join(h.known_hosts_line + "\n" for h in self.hosts
                                if h.host_key_pub and h.index not in indexes))
        return path

    def host(self, index: int) -> NetnsHost:
        return next(h for h in self.hosts if h.index == index)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _require_root_and_ip() -> None:
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (network namespaces need CAP_SYS_ADMIN)")
    for tool in ("ip", "unshare", "mount"):
        if not shutil.which(tool):
            problems.append(f"`{tool}` is not installed")
    if not os.access(SSHD, os.X_OK):
        problems.append(f"{SSHD} is missing (openssh-server)")
    if not os.access(SGL_KIT, os.X_OK):
        problems.append(f"{SGL_KIT} is missing (the kit is not installed in this environment)")
    if problems:
        pytest.fail("the fleet's network namespaces cannot be made here: " + "; ".join(problems), pytrace=False)


def _free_prefix() -> str:
    """``10.<b>`` with b in 200..254 that no address or route of this machine uses."""
    used = _ip("-4", "-o", "addr").stdout + _ip("-4", "route", "show", "table", "all").stdout
    taken = {int(m) for m in re.findall(r"\b10\.(\d{1,3})\.", used)}
    choices = [b for b in range(200, 255) if b not in taken]
    if not choices:
        raise RuntimeError("every 10.200-254.x.x network is in use on this machine")
    return f"10.{secrets.choice(choices)}"  # not `random`: pytest-randomly seeds it alike in every run


def _boot_script(host: NetnsHost, shared_lab: Path, private_lab: Path, config: Path | None) -> str:
    """The host's first process (PID 1 of its PID namespace): name the host, give the lab its path, start the
    lab server, then become sshd (or wait), so that stopping it ends every process of the host."""
    q = shlex.quote
    lines = ["set -e", f"hostname {q(host.netns)}", f"mount --bind {q(str(private_lab))} {q(str(shared_lab))}"]
    if host.spec.variant:
        lines.append(f"SGL_KIT_LAB_DRYRUN=0 {q(SGL_KIT)} --json lab up --dir {q(str(shared_lab))} "
                     f"--port {SERVER_PORT} --host 0.0.0.0 --variant {q(host.spec.variant)} --wait 60 "
                     f"> {q(str(host.directory / 'lab.json'))}")
    lines.append(f"exec {SSHD} -D -e -f {q(str(config))}" if config else "exec sleep infinity")
    return "\n".join(lines) + "\n"


def _greets(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1) as sock:
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _wait_started(host: NetnsHost, deadline: float) -> None:
    lab_file = host.directory / "lab.json"
    while time.monotonic() < deadline:
        if host.proc.poll() is not None:
            raise RuntimeError(f"host {host.index} ({host.netns}) stopped while starting (exit "
                               f"{host.proc.returncode}); its log:\n{host.log()}")
        lab_ready = not host.spec.variant or (lab_file.exists() and lab_file.stat().st_size
                                              and lab_file.read_text().rstrip().endswith("}"))
        if lab_ready and (not host.spec.sshd or _greets(host.address, SSH_PORT)):
            if host.spec.variant:
                host.lab = json.loads(lab_file.read_text())
            return
        time.sleep(0.1)
    raise RuntimeError(f"host {host.index} ({host.netns}) did not start within {START_TIMEOUT:g} s; its log:\n"
                       + host.log())


def _stop(host: NetnsHost) -> None:
    proc = host.proc
    if proc is not None and proc.poll() is None:
        # The group: `unshare` (ip netns exec became it) and the host's first process (sshd); the lab
        # server is in a session of its own, but ends with its PID namespace when that process does.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=5)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


def _namespace_pids(netns: str) -> list[int]:
    found = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in found.stdout.split() if p.isdigit()] if found.returncode == 0 else []


def _remove(host: NetnsHost, problems: list[str]) -> None:
    _stop(host)
    deadline = time.monotonic() + 10
    while (left := _namespace_pids(host.netns)) and time.monotonic() < deadline:
        for pid in left:  # only processes in a namespace this helper made
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    if left := _namespace_pids(host.netns):
        problems.append(f"{host.netns}: processes {left} still there")
    if _ip("link", "show", host.veth, check=False).returncode == 0:
        res = _ip("link", "del", host.veth, check=False)
        if res.returncode != 0:
            problems.append(f"ip link del {host.veth}: {res.stderr.strip()}")
    res = _ip("netns", "del", host.netns, check=False)
    if res.returncode != 0 and "No such file" not in res.stderr:
        problems.append(f"ip netns del {host.netns}: {res.stderr.strip()}")


def _make_namespace(host: NetnsHost) -> None:
    try:
        _ip("netns", "add", host.netns)
    except RuntimeError as exc:
        pytest.fail(f"cannot create the network namespace {host.netns}: {exc}. The fleet tests need root and a "
                    "kernel that allows network namespaces (in a container: --privileged or CAP_SYS_ADMIN)",
                    pytrace=False)
    inner = host.veth[:-len(str(host.index)) - 1] + "n" + str(host.index)
    _ip("link", "add", host.veth, "type", "veth", "peer", "name", inner)
    _ip("link", "set", inner, "netns", host.netns)
    _ip("addr", "add", f"{host.gateway}/24", "dev", host.veth)
    _ip("link", "set", host.veth, "up")
    _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", inner)
    _ip("-n", host.netns, "link", "set", inner, "up")
    _ip("-n", host.netns, "link", "set", "lo", "up")


@contextmanager
def netns_fleet(root: Path, specs: Sequence[HostSpec]) -> Iterator[NetnsFleet]:
    """Start a host per spec (indexes 1..K) in ``root``; yield the fleet; remove all of it at the end."""
    _require_root_and_ip()
    tag = secrets.token_hex(3)
    prefix = _free_prefix()
    user = _current_user()
    factory = make_sshd_factory(root)  # the user key, authorized_keys, and the conftest's extra sshd lines
    shared_lab = root / "lab"  # every host's lab directory, at the same path (a bind mount in each host)
    shared_lab.mkdir()
    ssh_config = root / "ssh_config"
    ssh_config.write_text("")
    hosts = [NetnsHost(index=i, netns=f"kit-fleet-{tag}-{i}", address=f"{prefix}.{i}.2", gateway=f"{prefix}.{i}.1",
                       veth=f"kf{tag}h{i}", spec=spec, directory=root / f"host{i}", user=user)
             for i, spec in enumerate(specs, start=1)]
    fleet = NetnsFleet(root, hosts, factory.user_key.path, root / "known_hosts", ssh_config, user, prefix)
    made: list[NetnsHost] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    try:
        for host in hosts:
            host.directory.mkdir()
            private_lab = host.directory / "lab"
            private_lab.mkdir()
            made.append(host)
            _make_namespace(host)
            config = None
            if host.spec.sshd:
                key, host.host_key_pub = factory.new_host_key(f"ns{host.index}")
                config = _sshd_config(host.directory, SSH_PORT, key, factory.user_key.authorized_keys,
                                      [*factory.extra_config, f"ListenAddress {host.address}"])
            if not host.spec.sshd and not host.spec.variant:
                continue  # an address where nothing listens
            script = host.directory / "boot.sh"
            script.write_text(_boot_script(host, shared_lab, private_lab, config))
            with (host.directory / "host.log").open("wb") as log:
                host.proc = subprocess.Popen(
                    ["ip", "netns", "exec", host.netns, "unshare", "--pid", "--fork", "--kill-child",
                     "--mount-proc", "--uts", "--", "/bin/sh", str(script)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    env=env)
        deadline = time.monotonic() + START_TIMEOUT
        for host in hosts:
            if host.proc is not None:
                _wait_started(host, deadline)
        fleet.known_hosts.write_text("".join(h.known_hosts_line + "\n" for h in hosts if h.host_key_pub))
        fleet.names = [h.netns for h in hosts]
        yield fleet
    finally:
        problems: list[str] = []
        for host in made:
            _remove(host, problems)
        if problems:
            raise RuntimeError("the fleet's namespaces were not all removed: " + "; ".join(problems))
