"""What each replica runs, and where replicas differ: the sglang version, the image, the launch as sglang
resolved it (``/server_info``), the environment that changes sglang, NCCL and CUDA, the GPUs and their
driver, the model and its revision. :func:`replica_facts` reads one replica; :func:`drift` compares them,
field by field, against the majority; :func:`group_findings` says which of the doctor's findings hold on
every replica and which on some.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kit._text import clip

from .member import Member

__all__ = ["Drift", "FIELDS", "PER_REPLICA", "drift", "group_findings", "replica_facts"]

# The columns of the drift table, in order; launch.* and env.* hold one field each.
FIELDS = ("sglang", "image", "gpu", "driver", "model", "revision", "launch", "env")
# Fields of the resolved launch that differ between replicas by design: where each one listens and its seed.
PER_REPLICA = frozenset({"host", "port", "random_seed", "nccl_port", "dist_init_addr", "node_rank",
                         "disaggregation_bootstrap_port", "metrics_http_port", "base_gpu_id"})
_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{7,40})")
NOT_READ = "not read"


def replica_facts(member: Member, *, timeout: float = 30.0, hardware: bool = True,
                  ssh_options: dict | None = None, host=None) -> dict[str, Any]:
    """One replica's facts as flat fields (``sglang``, ``image``, ``gpu``, ``driver``, ``model``,
    ``revision``, ``launch.<arg>``, ``env.<VAR>``) and ``read``: where each came from and what could not be
    read. Through its target (the process, its environment, ``nvidia-smi``) when it has one, else over HTTP
    (``/server_info``); a Kubernetes member adds its pod's image and environment."""
    from kit._secrets import redact_env
    from kit.server_args import from_server_info
    from kit.target import ENV_PREFIXES, connect, get_server_info, inventory, resolve_server

    facts: dict[str, Any] = {}
    read: list[str] = []
    info = None
    opened = None
    try:
        if member.target:
            if host is None:  # a caller's open connection is reused (and left open)
                host = opened = connect(member.target, **(ssh_options or {}))
            server = resolve_server(host, member.target, port=member.port, prefetch={"server_info": min(timeout, 10.0)})
            facts["sglang"] = server.sglang_version or NOT_READ
            if server.env_readable:
                # SGL_KIT_* are the kit's own labels of the servers its lab starts, not sglang's settings.
                env = {k: v for k, v in server.env.items() if k.startswith(ENV_PREFIXES)
                       and k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("SGL_KIT_")}
                facts.update({f"env.{k}": v for k, v in redact_env(env).items()})
                facts["env"] = "read"
            else:
                read.append(f"the environment of pid {server.pid} (not readable as this user)")
            info = server.server_info(timeout=min(timeout, 10.0)) if server.url else None
            read.append(f"pid {server.pid} on {server.host_name} ({member.target})")
            if hardware:
                inv = inventory(host, timeout=timeout)
                facts["gpu"] = ", ".join(sorted(Counter(g["name"] for g in inv.gpus).elements())) if inv.gpus \
                    else f"none ({inv.gpu_note})"
                facts["driver"] = ", ".join(sorted({g["driver"] for g in inv.gpus})) or "none"
        elif member.url:
            info = get_server_info(member.url, timeout=min(timeout, 10.0))
            read.append(f"{member.url}/server_info (HTTP only: no environment, GPU or driver)")
    finally:
        if opened is not None:
            opened.close()
    if info is not None:
        snap = from_server_info(info)
        facts.setdefault("sglang", str(info.get("version") or NOT_READ))
        if facts["sglang"] == NOT_READ and info.get("version"):
            facts["sglang"] = str(info["version"])
        for key, value in snap.fields.items():
            if key not in PER_REPLICA:
                facts[f"launch.{key}"] = value
        facts["launch"] = "read"
        model = str(snap.fields.get("model_path") or "")
        facts["model"] = model or NOT_READ
        rev = snap.fields.get("revision") or (_SNAPSHOT.search(model).group(1) if _SNAPSHOT.search(model) else None)
        facts["revision"] = str(rev) if rev else "default (none given)"
    pod = member.facts
    if member.source == "k8s":
        facts["image"] = pod.get("image_id") or pod.get("image") or NOT_READ
        if hardware and "gpu" not in facts:
            facts.update(_pod_gpus(member, timeout, read))
        for k, v in (pod.get("env") or {}).items():
            if k.startswith(ENV_PREFIXES):
                facts.setdefault(f"env.{k}", v)
        facts.setdefault("env", "read (pod spec)")
    else:
        facts.setdefault("image", "-")
    labels = pod.get("labels") if isinstance(pod.get("labels"), dict) else {}
    if facts.get("sglang") in (None, NOT_READ) and labels.get("version"):
        facts["sglang"] = str(labels["version"])  # the router's label, read from the worker when it registered
    facts["read"] = read
    return facts


def _pod_gpus(member: Member, timeout: float, read: list[str]) -> dict[str, str]:
    """The pod's GPUs and driver from ``nvidia-smi`` run in its sglang container (kit.fleet.k8s.pod_exec);
    nothing, and a line in ``read`` saying why, when the exec is refused or fails."""
    from kit.errors import KitError

    from .k8s import pod_exec

    try:
        text = pod_exec(member, ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                        kubeconfig=member.facts.get("kubeconfig"), context=member.facts.get("context"),
                        timeout=min(timeout, 30.0))
    except KitError as exc:
        read.append(f"nvidia-smi in pod {member.facts.get('pod')}: {exc.message}")
        return {}
    rows = [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.count(",") >= 1]
    if not rows:
        return {}
    return {"gpu": ", ".join(sorted(r[0] for r in rows)), "driver": ", ".join(sorted({r[1] for r in rows}))}


@dataclass
class Drift:
    """``facts`` by replica; ``majority`` each field's most common value (None: no majority); ``deviants``
    by replica, the fields where it differs from the majority (or where replicas split with none)."""

    facts: dict[str, dict[str, Any]]
    majority: dict[str, Any] = field(default_factory=dict)
    deviants: dict[str, list[str]] = field(default_factory=dict)
    split: list[str] = field(default_factory=list)
    unique: list[str] = field(default_factory=list)  # a value of its own on every replica (3 or more): not drift

    def order(self) -> list[str]:
        """Replicas that differ first (most fields first), then the rest in the order listed."""
        names = list(self.facts)
        return sorted(names, key=lambda n: (-len(self.deviants.get(n, [])), names.index(n)))

    def table(self):
        """One row per replica, deviants first: the fields that differ, then FIELDS (launch and env as a
        digest of their fields, so equal launches show equal digests)."""
        import pandas as pd

        rows = []
        for name in self.order():
            f = self.facts[name]
            diff = self.deviants.get(name, [])
            row = {"replica": name, "differs": (f"{len(diff)}: {', '.join(diff[:2])}" + (", ..." if len(diff) > 2
                                                                                         else "")) if diff else "-"}
            for col in FIELDS:
                if col in ("launch", "env"):
                    sub = {k: v for k, v in f.items() if k.startswith(col + ".")}
                    row[col] = _digest(sub) if f.get(col) else NOT_READ
                else:
                    row[col] = f.get(col, NOT_READ)
            rows.append(row)
        return pd.DataFrame(rows, columns=["replica", "differs", *FIELDS])

    def differences(self) -> list[dict]:
        """Each differing field of each deviant: the replica, the field, its value and the majority's."""
        out = []
        for name in self.order():
            for key in self.deviants.get(name, []):
                out.append({"replica": name, "field": key, "value": self.facts[name].get(key, "(unset)"),
                            "majority": self.majority.get(key, "(no majority)") if key not in self.split
                            else "(no majority)"})
        return out

    def to_text(self) -> str:
        n = len(self.facts)
        if not n:
            return "no replica answered: nothing to compare (the failures follow)"
        bad = [r for r in self.order() if self.deviants.get(r)]
        head = (f"{len(bad)} of {n} replica(s) differ from the majority" if bad
                else f"all {n} replica(s) agree on every field read")
        lines = [head]
        for d in self.differences():
            lines.append(f"  {d['replica']:<24} {d['field']:<36} {clip(d['value'], 60)}   "
                         f"(majority: {clip(d['majority'], 60)})")
        if self.unique:
            lines.append(f"  (a value of its own on every replica, not counted: {', '.join(self.unique)})")
        lines.append("")
        lines.append(self.table().to_string(index=False))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"order": self.order(), "deviants": self.deviants, "differences": self.differences(),
                "unique": self.unique,
                "majority": {k: v for k, v in self.majority.items() if not k.startswith(("launch.", "env."))},
                "facts": {k: {f: v for f, v in d.items()} for k, d in self.facts.items()}}


def _digest(fields: dict) -> str:
    if not fields:
        return "(none)"
    text = "\n".join(f"{k}={fields[k]!r}" for k in sorted(fields))
    return f"{len(fields)} fields #{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def drift(facts: dict[str, dict[str, Any]]) -> Drift:
    """Compare replicas field by field. A field a replica did not read (its GPU over HTTP only) does not
    vote and does not make it differ; an env var set on some replicas and not on others is a difference
    ("(unset)" is a value), and so is a launch field."""
    keys = sorted({k for f in facts.values() for k in f if k not in ("read", "launch", "env")})
    majority: dict[str, Any] = {}
    deviants: dict[str, list[str]] = {}
    split: list[str] = []
    unique: list[str] = []
    for key in keys:
        votes: dict[str, Any] = {}
        for name, f in facts.items():
            group = key.split(".", 1)[0] if "." in key else None
            if group and f.get(group):
                votes[name] = f.get(key, "(unset)")
            elif not group and f.get(key) not in (None, NOT_READ):
                votes[name] = f[key]
        if len(set(map(repr, votes.values()))) <= 1:
            continue
        counts = Counter(repr(v) for v in votes.values())
        if len(votes) >= 3 and len(counts) == len(votes):
            unique.append(key)  # every replica its own value (a host name, a path per machine): listed, not drift
            continue
        (top, top_n), *rest = counts.most_common()
        if rest and rest[0][1] == top_n:
            split.append(key)
            for name in votes:
                deviants.setdefault(name, []).append(key)
            continue
        majority[key] = next(v for v in votes.values() if repr(v) == top)
        for name, v in votes.items():
            if repr(v) != top:
                deviants.setdefault(name, []).append(key)
    return Drift(facts, majority, deviants, split, unique)


def group_findings(diagnoses: dict[str, Any]) -> list[dict]:
    """The doctor's findings across replicas: each finding (by rule id) with the replicas it was found
    on, ``everywhere`` when that is every replica diagnosed. Findings on some replicas come first."""
    seen: dict[str, dict] = {}
    names = list(diagnoses)
    for name, diag in diagnoses.items():
        for f in getattr(diag, "findings", []) or []:
            entry = seen.setdefault(f.id, {"id": f.id, "title": f.title, "on": [], "impact": []})
            entry["on"].append(name)
            entry["impact"].append(f.impact)
    out = []
    for entry in seen.values():
        entry["everywhere"] = len(entry["on"]) == len(names)
        entry["not_on"] = [n for n in names if n not in entry["on"]]
        out.append(entry)
    return sorted(out, key=lambda e: (e["everywhere"], -len(e["on"]), e["id"]))
