"""A fleet of lab stand-ins on this machine, with sglang's router (``smg``) in front when it is installed.

``fleet_up(replicas=3, drifted=(2,))`` starts ``replicas`` lab servers (:class:`kit.lab.control.Lab`), each
in its own lab directory under one fleet directory and on its own free port, every one with
``--enable-metrics`` so ``/metrics`` is served; the replicas named in ``drifted`` run ``drift_variant``, the
others ``variant``. Then ``smg launch --worker-urls ... --policy POLICY`` (its log in ``router.log``), waited
for until ``GET /workers`` lists every replica healthy. A start that fails half-way stops what it started.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kit._paths import cache_dir
from kit._proc import kill_group
from kit.errors import LabError

from .control import Lab, LabStatus, variants

__all__ = ["LabFleet", "find_smg", "fleet_up"]

METRICS_FLAG = "--enable-metrics"  # sglang's switch for /metrics; the lab serves it only with it (kit/lab/api.py)


@dataclass
class LabFleet:
    """The replicas (their labs and statuses), the router in front of them, the directory holding all."""

    directory: str
    labs: list[Lab]
    statuses: list[LabStatus]
    launches: list[str]
    router_url: str | None = None
    router_log: str | None = None
    policy: str | None = None
    notes: list[str] = field(default_factory=list)
    _router: subprocess.Popen | None = field(default=None, repr=False)
    stopped: bool = False

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.statuses if s.url]

    def down(self) -> LabFleet:
        """Stop the router and every replica (each by its lab's recorded pid); safe to call twice."""
        if self._router is not None:
            kill_group(self._router)
            self._router = None
        _stop_all(self.labs)
        self.stopped = True
        return self

    def __enter__(self) -> LabFleet:
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def to_text(self) -> str:
        state = "stopped" if self.stopped else "running"
        lines = [f"lab fleet ({state}): {len(self.labs)} replica(s) in {self.directory}"]
        for i, (s, launch) in enumerate(zip(self.statuses, self.launches, strict=False)):
            lines.append(f"  replica {i}  {s.url or '-':<24} variant {launch:<8} pid {s.pid}  dir {s.lab_dir}")
        if self.router_url:
            lines.append(f"  router     {self.router_url} (smg, policy {self.policy}; log {self.router_log})")
        else:
            lines.append("  no router: the replicas are reached one by one")
        lines += [f"  ({n})" for n in self.notes]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.to_text())}</pre>"


def find_smg(smg: str | None = None) -> str | None:
    """sglang's router: ``smg`` given as a path, else next to this Python, else on PATH; None when absent."""
    if smg:
        return smg if os.path.isfile(smg) and os.access(smg, os.X_OK) else None
    beside = Path(sys.executable).with_name("smg")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("smg")


def fleet_up(replicas: int = 3, drifted: tuple[int, ...] | list[int] = (2,), variant: str = "new",
             drift_variant: str = "fixed", router: bool | None = None, policy: str = "cache_aware",
             directory: str | os.PathLike | None = None, smg: str | None = None, timeout: float = 120.0,
             scenario: str = "incident") -> LabFleet:
    """Start the fleet (see the module's docstring). ``router``: True needs ``smg`` (LabError without it),
    False starts none, None starts one when ``smg`` is found. ``smg`` a path to the router's program.
    ``timeout`` bounds each replica's start and the wait for the router's workers."""
    if not isinstance(replicas, int) or replicas < 1:
        raise LabError(f"a lab fleet needs at least one replica, not {replicas!r}", hint="fleet_up(replicas=3)")
    drifted = tuple(drifted or ())
    bad = [i for i in drifted if not isinstance(i, int) or not 0 <= i < replicas]
    if bad:
        raise LabError(f"drifted replica(s) {bad} outside 0..{replicas - 1}",
                       hint=f"give indices of the {replicas} replicas, e.g. drifted=({replicas - 1},)")
    known = variants(scenario=scenario)
    for name in {variant, drift_variant}:
        if name not in known:
            raise LabError(f"unknown lab variant {name!r}", hint=f"use one of {', '.join(known)}")
    program = find_smg(smg)
    if router and program is None:
        tried = smg or f"{Path(sys.executable).with_name('smg')} and PATH"
        raise LabError(f"sglang's router (smg) was asked for, but not found ({tried})",
                       hint="pip install smg (sglang's model gateway), or fleet_up(router=False)")
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="fleet-", dir=_fleet_parent()))
    root.mkdir(parents=True, exist_ok=True)
    launches = [drift_variant if i in drifted else variant for i in range(replicas)]
    labs = [Lab(directory=str((root / f"replica-{i}").resolve())) for i in range(replicas)]
    ports = _free_ports(replicas + (2 if program and router is not False else 0))
    fleet = LabFleet(str(root.resolve()), labs, [], launches)
    if router is None and program is None:
        fleet.notes.append("smg not found next to this Python nor on PATH: no router (pip install smg)")
    try:
        with ThreadPoolExecutor(max_workers=replicas) as pool:
            futures = [pool.submit(lab.up, variant=launch, flags=[METRICS_FLAG], port=port, scenario=scenario,
                                   timeout=timeout) for lab, launch, port in zip(labs, launches, ports, strict=False)]
            results = []
            for i, fut in enumerate(futures):
                try:
                    results.append(fut.result())
                except Exception as exc:  # noqa: BLE001 -- every failure is named, then all is stopped
                    results.append(f"replica {i} ({launches[i]}): {getattr(exc, 'message', exc)}")
        failed = [r for r in results if isinstance(r, str)]
        if failed:
            raise LabError("the lab fleet did not start: " + "; ".join(failed),
                           hint=f"its directory {root} keeps each replica's logs/server.log")
        fleet.statuses = results
        if program and router is not False:
            _start_router(fleet, program, ports[replicas], ports[replicas + 1], policy, timeout)
    except BaseException:
        fleet.down()
        raise
    return fleet


def _start_router(fleet: LabFleet, program: str, port: int, metrics_port: int, policy: str, timeout: float) -> None:
    log = Path(fleet.directory) / "router.log"
    argv = [program, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *fleet.urls,
            "--policy", policy, "--prometheus-port", str(metrics_port)]
    with open(log, "wb") as out:
        fleet._router = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
    fleet.router_url, fleet.router_log, fleet.policy = f"http://127.0.0.1:{port}", str(log), policy
    deadline, seen = time.monotonic() + timeout, "no answer yet"
    while True:
        if fleet._router.poll() is not None:
            raise LabError(f"the router exited with status {fleet._router.returncode}: {' '.join(argv)}\n"
                           f"    {_tail(log)}", hint="read its log, or fleet_up(router=False)")
        try:
            with urllib.request.urlopen(fleet.router_url + "/workers", timeout=5) as resp:
                listed = json.loads(resp.read()).get("workers", [])
            healthy = {str(w.get("url", "")).rstrip("/") for w in listed if w.get("is_healthy")}
            seen = f"{len(healthy)} of {len(fleet.urls)} workers healthy"
            if set(fleet.urls) <= healthy:
                return
        except (OSError, ValueError, AttributeError) as exc:
            seen = f"GET /workers: {exc}"
        if time.monotonic() > deadline:
            raise LabError(f"the router at {fleet.router_url} did not list every replica healthy within "
                           f"{timeout:g} s ({seen}); tried: {' '.join(argv)}\n    {_tail(log)}",
                           hint=f"read {log}; fleet_up(router=False) starts the replicas alone")
        time.sleep(0.5)


def _stop_all(labs: list[Lab]) -> None:
    with ThreadPoolExecutor(max_workers=max(1, len(labs))) as pool:
        for fut in [pool.submit(lab.down) for lab in labs if Path(lab.directory).is_dir()]:
            try:
                fut.result()
            except LabError:
                pass  # its directory was never prepared: nothing of it runs


def _fleet_parent() -> str:
    parent = cache_dir() / "fleet"
    parent.mkdir(parents=True, exist_ok=True)
    return str(parent)


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports below 55536 (sglang also claims port + 10000)."""
    ports: list[int] = []
    for _ in range(200 * n):
        if len(ports) == n:
            break
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port < 55536 and port not in ports:
            ports.append(port)
    if len(ports) < n:
        raise LabError(f"found only {len(ports)} of {n} free ports on 127.0.0.1", hint="free some ports")
    return ports


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n    ".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty log)"
    except OSError:
        return "(no log)"
