"""Many servers at once: the replicas behind sglang's router, a list of targets, or the pods of a
Kubernetes selector (:func:`members`); one question asked of all of them in parallel (:func:`fanout`);
where they differ (:func:`fleet_args`, drift first), what the doctor finds on every replica or on some
(:func:`fleet_doctor`), each replica's evidence kept (:func:`fleet_collect`) or measured (:func:`fleet_bench`),
and how the load is spread between them (:func:`kit.fleet.balance.balance`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .balance import IMBALANCE_RATIO, Balance, balance
from .drift import Drift, drift, group_findings, replica_facts
from .fanout import FanOut, fanout
from .members import Fleet, Member, members

__all__ = ["IMBALANCE_RATIO", "Balance", "Drift", "FanOut", "Fleet", "FleetArgs", "FleetDoctor", "Member", "balance",
           "drift", "fanout", "fleet_args", "fleet_bench", "fleet_collect", "fleet_doctor", "group_findings",
           "lab_fleet", "members", "replica_facts"]


def lab_fleet(replicas: int = 3, drifted: tuple[int, ...] = (2,), **options):
    """The lab's fleet: ``replicas`` stand-ins, the ``drifted`` ones from another launch, sglang's router
    (smg) in front when it is installed (:func:`kit.lab.fleet.fleet_up`; stop it with ``.down()``)."""
    from kit.lab.fleet import fleet_up

    return fleet_up(replicas=replicas, drifted=drifted, **options)


@dataclass
class FleetArgs:
    """What every replica runs, compared: ``drift`` (deviants first) and the fan-out that read it."""

    fleet: Fleet
    drift: Drift
    run: FanOut

    def to_text(self, cli: bool = False) -> str:
        parts = [self.drift.to_text(), "", self.run.summary(cli)]
        if self.fleet.problems:
            parts += [f"! {p}" for p in self.fleet.problems]
        return "\n".join(parts)

    def to_dict(self, cli: bool = False) -> dict:
        return {"drift": self.drift.to_dict(), "failures": self.run.failure_text(cli), "seconds": self.run.seconds,
                "elapsed_s": round(self.run.elapsed, 3), "fleet": self.fleet.to_dict()}

    def _repr_html_(self) -> str:
        import html

        return (f"<p>{html.escape(self.to_text().splitlines()[0])}</p>"
                + self.drift.table().to_html(index=False) + f"<pre>{html.escape(self.run.summary())}</pre>")


def fleet_args(fleet: Fleet, *, concurrency: int = 8, timeout: float = 60.0, hardware: bool = True,
               ssh_options: dict | None = None, progress: Any = "auto") -> FleetArgs:
    """Every replica's facts (:func:`replica_facts`) in parallel, then the drift between them."""
    run = fanout(fleet.members, lambda m: replica_facts(m, timeout=timeout, hardware=hardware,
                                                        ssh_options=ssh_options),
                 what="fleet args", concurrency=concurrency, timeout=timeout, progress=progress)
    return FleetArgs(fleet, drift(run.results), run)


@dataclass
class FleetDoctor:
    """The doctor on every replica: findings grouped (on some replicas first), the drift beside them."""

    fleet: Fleet
    drift: Drift
    groups: list[dict]
    diagnoses: dict[str, Any]
    run: FanOut
    problems: dict[str, list[str]] = field(default_factory=dict)

    def to_text(self, cli: bool = False) -> str:
        lines = [self.drift.to_text().split("\n\n")[0], ""]
        n = len(self.diagnoses)
        if not self.groups:
            lines.append(f"the doctor found nothing on any of the {n} replica(s) diagnosed")
        for g in self.groups:
            where = f"on every replica ({n})" if g["everywhere"] else \
                f"on {len(g['on'])} of {n}: {', '.join(g['on'])}"
            lines.append(f"- {g['title']} [{g['id']}]  {where}")
        lines += ["", self.run.summary(cli)]
        return "\n".join(lines)

    def to_dict(self, cli: bool = False) -> dict:
        return {"drift": self.drift.to_dict(), "findings": self.groups,
                "diagnoses": {k: _diag_dict(d) for k, d in self.diagnoses.items()},
                "failures": self.run.failure_text(cli), "elapsed_s": round(self.run.elapsed, 3)}

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.to_text())}</pre>"


def _diag_dict(diag: Any) -> Any:
    to_dict = getattr(diag, "to_dict", None)
    return to_dict() if callable(to_dict) else str(diag)


def _doctor_one(member: Member, timeout: float, ssh_options: dict | None, folder: Path) -> tuple[dict, Any]:
    import kit.doctor as doctor_pkg

    if member.target:
        from kit.target import connect

        host = connect(member.target, **(ssh_options or {}))  # one connection for the facts and the doctor
        try:
            facts = replica_facts(member, timeout=timeout, host=host)
            return facts, doctor_pkg.doctor(member.target, host=host, port=member.port,
                                            prometheus_timeout=min(timeout, 10.0))
        finally:
            host.close()
    facts = replica_facts(member, timeout=timeout, ssh_options=ssh_options)
    from kit.target import get_server_info

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{member.name.replace(':', '_').replace('/', '_')}-server_info.json"
    path.write_text(json.dumps(get_server_info(member.url, timeout=min(timeout, 10.0))))
    return facts, doctor_pkg.doctor(server_info=str(path))


def fleet_doctor(fleet: Fleet, *, concurrency: int = 4, timeout: float = 180.0, ssh_options: dict | None = None,
                 progress: Any = "auto", workdir: str | os.PathLike | None = None) -> FleetDoctor:
    """The doctor on every replica in parallel (through its target when it has one, else from its
    ``/server_info``), the facts read on the way, the findings grouped."""
    import tempfile

    folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sgl-kit-fleet-"))
    run = fanout(fleet.members, lambda m: _doctor_one(m, timeout, ssh_options, folder), what="fleet doctor",
                 concurrency=concurrency, timeout=timeout, progress=progress)
    facts = {k: v[0] for k, v in run.results.items()}
    diagnoses = {k: v[1] for k, v in run.results.items()}
    return FleetDoctor(fleet, drift(facts), group_findings(diagnoses), diagnoses, run)


def fleet_collect(fleet: Fleet, out: str | os.PathLike, *, concurrency: int = 4, timeout: float = 300.0,
                  ssh_options: dict | None = None, progress: Any = "auto", **capture_options) -> FanOut:
    """Each replica's evidence kept in ``out/<replica>/`` (:func:`kit.case.capture`, read-only), plus
    ``out/fleet.json`` (the members and what failed). Replicas without a target are not captured (capture
    reads the process): each is named as a failure."""
    from kit.case import capture

    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)

    def one(member: Member):
        if not member.target:
            raise RuntimeError(f"{member.url}: HTTP only (no target to read the process on); give --ssh "
                               "'user@{host}' or list the replica as a target")
        from kit.target import connect

        host = connect(member.target, **(ssh_options or {}))
        try:
            res = capture(member.target, root / _slug(member.name), host=host, port=member.port, **capture_options)
        finally:
            host.close()
        return str(getattr(res, "path", root / _slug(member.name)))

    run = fanout(fleet.members, one, what="fleet collect", concurrency=concurrency, timeout=timeout,
                 progress=progress)
    (root / "fleet.json").write_text(json.dumps({"fleet": fleet.to_dict(), "cases": run.results,
                                                 "failures": run.failures}, indent=2, default=str))
    return run


def fleet_bench(fleet: Fleet, *, concurrency: int = 8, timeout: float = 600.0, out: str | os.PathLike | None = None,
                ssh_options: dict | None = None, progress: Any = "auto", config: Any = None,
                **bench_options) -> FanOut:
    """The same load on every replica at once (:func:`kit.bench.bench`, one run file each in ``out``);
    ``concurrency`` is how many replicas are measured at once, ``config`` (a BenchConfig) or
    ``bench_options`` the load on each. Replicas measured together share the client machine."""
    from kit.bench import bench

    root = Path(out) if out else Path("runs") / "fleet"
    root.mkdir(parents=True, exist_ok=True)

    def one(member: Member):
        where = member.url or member.target
        return bench(where, port=member.port if not member.url else None,
                     out=root / f"{_slug(member.name)}.jsonl", progress=None, ssh_options=ssh_options,
                     config=config, **bench_options)

    return fanout(fleet.members, one, what="fleet bench", concurrency=concurrency, timeout=timeout,
                  progress=progress)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
