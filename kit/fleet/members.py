"""Who is in the fleet: targets given one by one, the workers a router lists, or the pods a Kubernetes
selector matches. Each becomes a :class:`Member`, resolved once: the URL its sglang server answers at,
and, when the kit can reach the machine, the kit target (``local``, an SSH alias, ``ssh://...``) whose
server process the kit reads with its one resolver (:func:`kit.target.resolve_server`).

The router is sglang's model gateway (``smg``, formerly ``sglang-router``). Its worker list is
``GET /workers`` (smg 1.x: ``{"workers": [{"url", "worker_type", "is_healthy", "status", "load",
"labels": {"version", ...}}]}``; the router of ``sglang-router`` 0.1/0.2 answers ``GET /list_workers``
with ``{"urls": [...]}``, read as a fallback).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kit.errors import TargetError, UsageError

from .member import Member

__all__ = ["Fleet", "Member", "from_router", "from_targets", "members", "router_launch"]

_LOCAL_NAMES = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9_.\-\[\]:]+?):(?P<port>\d{1,5})$")


@dataclass
class Fleet:
    """The members, the router in front of them (its URL, policy and launch when read), and what could
    not be listed."""

    members: list[Member]
    router: dict | None = None
    problems: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.members)

    def names(self) -> list[str]:
        return [m.name for m in self.members]

    def to_dict(self) -> dict[str, Any]:
        return {"members": [m.to_dict() for m in self.members], "router": self.router, "problems": self.problems}

    def to_text(self) -> str:
        lines = [f"{len(self.members)} replica(s)" + (f" behind the router {self.router['url']} (policy "
                                                       f"{self.router.get('policy') or 'not read'})"
                                                       if self.router else "")]
        for m in self.members:
            reach = m.target or "HTTP only"
            lines.append(f"  {m.name:<28} {m.role:<8} {m.url or '-':<30} read through: {reach}")
        lines += [f"  ! {p}" for p in self.problems]
        return "\n".join(lines)


def _target_for(host: str, ssh: str | None) -> str | None:
    """The kit target of the machine at ``host``: this machine for a loopback address, else ``ssh`` with
    ``{host}`` filled in (``root@{host}``, ``ssh://ops@{host}:2222``), else None (HTTP only)."""
    if host in _LOCAL_NAMES:
        return "local"
    if ssh:
        return ssh.replace("{host}", host) if "{host}" in ssh else f"{ssh}@{host}" if "@" not in ssh else ssh
    return None


def from_targets(targets: list[str], *, port: int | None = None, ssh: str | None = None) -> list[Member]:
    """Members from strings as people type them: ``http://host:port`` (a server's URL), ``host:port``, or a
    kit target (``local``, ``lab``, an SSH alias, ``user@host``, ``ssh://...``) whose server is on ``port``
    (or the only one there)."""
    from kit.target import parse_target

    out: list[Member] = []
    for raw in targets:
        text = raw.strip().rstrip("/")
        if not text:
            continue
        if text.startswith(("http://", "https://")):
            parts = urlsplit(text)
            if not parts.hostname:
                raise UsageError(f"{raw!r} has no host", hint="write it as http://host:port")
            out.append(Member(f"{parts.hostname}:{parts.port or 80}", text, _target_for(parts.hostname, ssh),
                              parts.port or 80))
            continue
        found = _HOST_PORT.match(text)
        if found and "@" not in text:
            host, p = found["host"].strip("[]"), int(found["port"])
            out.append(Member(text, f"http://{found['host']}:{p}", _target_for(host, ssh), p))
            continue
        try:
            parse_target(text)
        except TargetError as exc:
            raise UsageError(f"{raw!r} is neither a URL, host:port nor a target ({exc.message})",
                             hint="give http://host:port, host:port, or a target (an SSH alias, user@host, "
                                  "ssh://user@host:port, local, lab)") from None
        out.append(Member(text if port is None else f"{text}:{port}", None, text, port))
    names = [m.name for m in out]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise UsageError(f"the same replica is listed twice: {', '.join(doubled)}", hint="list each replica once")
    return out


def _get_json(url: str, timeout: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8", "replace"))


def from_router(url: str, *, ssh: str | None = None, timeout: float = 10.0) -> tuple[list[Member], dict]:
    """The workers behind a router: ``GET /workers`` (smg), else ``GET /list_workers`` (sglang-router 0.1/0.2).
    Returns the members and what was read of the router (its URL, how its workers were listed)."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        base = "http://" + base
    tried = []
    for path in ("/workers", "/list_workers"):
        try:
            data = _get_json(base + path, timeout)
        except urllib.error.HTTPError as exc:
            tried.append(f"GET {path}: HTTP {exc.code}")
            continue
        except (OSError, ValueError) as exc:
            raise TargetError(f"the router at {base} did not answer GET {path}: {exc}",
                              hint="check the URL and that the router is up (curl it from here)") from None
        members = _router_workers(data, ssh)
        if members is not None:
            return members, {"url": base, "listed_by": f"GET {path}"}
        tried.append(f"GET {path}: an answer without a worker list")
    raise TargetError(f"{base} lists no workers ({'; '.join(tried)})",
                      hint="is this sglang's router (smg / sglang-router)? Give the workers as targets instead")


def _router_workers(data: Any, ssh: str | None) -> list[Member] | None:
    if isinstance(data, dict) and isinstance(data.get("workers"), list):
        rows = data["workers"]
    elif isinstance(data, dict) and isinstance(data.get("urls"), list):
        rows = [{"url": u} for u in data["urls"]]
    else:
        return None
    out = []
    for row in rows:
        if not isinstance(row, dict) or not row.get("url"):
            continue
        parts = urlsplit(str(row["url"]))
        host, port = parts.hostname or "", parts.port
        facts = {k: row.get(k) for k in ("is_healthy", "status", "load", "worker_type", "priority", "cost",
                                         "bootstrap_port", "connection_mode") if k in row}
        # smg 1.x: "labels"; sglang-router 0.3: "metadata" (the worker's /server_info fields it read)
        labels = next((row[k] for k in ("labels", "metadata") if isinstance(row.get(k), dict)), {})
        if labels:
            facts["labels"] = labels
        role = str(row.get("worker_type") or "regular").lower()
        out.append(Member(f"{host}:{port}", str(row["url"]).rstrip("/"), _target_for(host, ssh), port,
                          role if role in ("prefill", "decode") else "regular", "router", facts))
    return out


_POLICY_NAMES = {"cacheaware": "cache_aware", "roundrobin": "round_robin", "random": "random",
                 "poweroftwo": "power_of_two", "consistenthashing": "consistent_hashing", "prefixhash": "prefix_hash",
                 "leastload": "least_load", "manual": "manual", "passthrough": "passthrough", "bucket": "bucket"}
# smg's start line (model_gateway/src/server.rs, smg 1.13: "Starting router on HOST:PORT | mode: ... | policy:
# CacheAware { ... } | max_payload: ..."); sglang-router wrote the same form.
_START_LINE = re.compile(r"Starting router on (?P<addr>\S+?):(?P<port>\d+) \|.*?\bpolicy: (?P<policy>[A-Za-z]+)")


def router_launch(router_url: str, *, log: str | None = None) -> dict:
    """The router's routing settings: from ``log`` (a file: the router's log, or its launch command), else,
    when the router runs on this machine, from its process (its argv; smg 1.13 renames its process to
    ``smg::router`` and sglang-router 0.3 to ``sglang::router``, so then from the start line of the log its
    stdout or stderr goes to). Keys: ``policy``,
    ``policy_origin`` (explicit, default, log), the other routing flags when a command was read, and ``read``:
    where it came from, or why it was not read."""
    parts = urlsplit(router_url if "://" in router_url else "http://" + router_url)
    port = str(parts.port or 80)
    if log:
        from pathlib import Path

        try:
            text = Path(log).expanduser().read_text(errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read the router's log or launch {log}: {exc.strerror or exc}",
                             hint="give the file the router logs to, or a file holding its launch command") from None
        return _from_text(text, port, f"{log}", any_port=True)
    if (parts.hostname or "") not in _LOCAL_NAMES:
        return {"policy": None, "read": f"not read: the router runs on {parts.hostname}, not this machine "
                                        "(give its log or launch command with --router-log FILE)"}
    for pid, argv in _local_processes():
        head = " ".join(argv[:3])
        if not re.search(r"(^|/)(smg|sglang[-_]router)\b|(smg|sglang)::router|launch_router", head):
            continue
        if "--worker-urls" in argv or "--pd-disaggregation" in argv or "--port" in argv:
            if (_flag(argv, "--port") or "30000") != port:
                continue
            return {**router_flags(argv), "pid": pid, "argv": argv, "read": f"the launch of pid {pid}"}
        for fd in ("1", "2"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                with open(target, errors="replace") as fh:
                    text = fh.read(2_000_000)
            except OSError:
                continue
            found = _from_text(text, port, f"the log of pid {pid} ({target})")
            if found.get("policy"):
                return {**found, "pid": pid}
    return {"policy": None, "read": f"not read: no router process of port {port} found on this machine, or its "
                                    "log is not a file (give it with --router-log FILE)"}


def _from_text(text: str, port: str, where: str, any_port: bool = False) -> dict:
    """The policy in a router's log (its start line for ``port``; with ``any_port``, the last start line:
    a log the user named is that router's even behind a proxy), or in a launch command."""
    starts = [m for m in _START_LINE.finditer(text) if m["port"] == port] or (
        list(_START_LINE.finditer(text)) if any_port else [])
    if starts:
        name = starts[-1]["policy"].lower()
        return {"policy": _POLICY_NAMES.get(name, name), "policy_origin": "log",
                "read": f"{where}: its start line"}
    import shlex

    try:
        argv = shlex.split(text.replace("\\\n", " "), comments=True) if "--" in text else []
    except ValueError:
        argv = text.split()
    if argv and any(a in argv for a in ("--worker-urls", "--policy", "--pd-disaggregation", "--port")) and any_port:
        return {**router_flags(argv), "read": f"{where}: the launch command"}
    return {"policy": None, "read": f"not read: {where} has neither the router's start line nor a launch"}


def _local_processes():
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
        except OSError:
            continue
        if argv:
            yield int(entry), argv


def router_flags(argv: list[str]) -> dict:
    """The router's routing settings in a launch's argv (defaults as smg 1.13's ``launch --help`` prints them)."""
    policy = _flag(argv, "--policy")
    return {"policy": policy or "cache_aware", "policy_origin": "explicit" if policy else "default",
            "prefill_policy": _flag(argv, "--prefill-policy"), "decode_policy": _flag(argv, "--decode-policy"),
            "cache_threshold": _flag(argv, "--cache-threshold"),
            "balance_abs_threshold": _flag(argv, "--balance-abs-threshold"),
            "balance_rel_threshold": _flag(argv, "--balance-rel-threshold"),
            "pd_disaggregation": "--pd-disaggregation" in argv}


def _flag(argv: list[str], name: str) -> str | None:
    from kit._argv import option_value

    return option_value(argv, name)


def members(targets: list[str] | None = None, *, router: str | None = None, k8s: str | None = None,
            port: int | None = None, ssh: str | None = None, kubeconfig: str | None = None,
            context: str | None = None, timeout: float = 10.0, router_log: str | None = None) -> Fleet:
    """The fleet from any of: ``targets`` (URLs, ``host:port``, kit targets), a ``router`` URL (its worker
    list), a Kubernetes selector ``namespace/label=value`` (the official client and the kubeconfig). ``ssh``
    is how a worker's machine is reached (``root@{host}``); a loopback worker is read on this machine."""
    if not targets and not router and not k8s:
        raise UsageError("no replicas: give targets, --router URL or --k8s namespace/label=value",
                         hint="e.g. `sgl-kit fleet args --router http://127.0.0.1:30000`")
    listed: list[Member] = []
    info = None
    problems: list[str] = []
    if targets:
        listed += from_targets(list(targets), port=port, ssh=ssh)
    if router:
        found, info = from_router(router, ssh=ssh, timeout=timeout)
        info.update(router_launch(info["url"], log=router_log))
        if not found:
            problems.append(f"the router at {info['url']} lists no workers")
        listed += found
    if k8s:
        from .k8s import k8s_members

        found, said = k8s_members(k8s, kubeconfig=kubeconfig, context=context, timeout=timeout)
        listed += found
        problems += said
    seen: dict[str, Member] = {}
    for m in listed:
        seen.setdefault(m.name, m)
    return Fleet(list(seen.values()), info, problems)
