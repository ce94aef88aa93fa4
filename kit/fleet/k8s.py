"""The replicas a Kubernetes label selector names, read with the official ``kubernetes`` client.

``--k8s NAMESPACE/SELECTOR`` (``llm/app=sglang``, ``pd/role=leader,app in (sglang,sglang-canary)``) becomes
one API call, ``CoreV1Api.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR)``, that is
``GET /api/v1/namespaces/NAMESPACE/pods?labelSelector=SELECTOR`` on the API server of the kubeconfig
(``kubeconfig=``, else ``$KUBECONFIG``, else ``~/.kube/config``; ``context=``, else its current context).
Nothing is written: not the cluster, not the kubeconfig (``persist_config=False``).

Each pod with an IP becomes a :class:`~kit.fleet.members.Member` read from its PodList entry alone:

- the sglang container: the one whose command and args name ``sglang.launch_server``, ``sglang serve`` or
  ``launch_server`` (a ``sh -c "python3 -m sglang.launch_server ..."`` string too), else the first;
- ``url`` ``http://POD_IP:PORT``: ``PORT`` from the container's ``--port N`` / ``--port=N``, else its first
  ``containerPort``, else 30000 (sglang's default); ``role`` prefill or decode from
  ``--disaggregation-mode``, else regular;
- ``facts``: namespace, pod, container, node (``spec.nodeName``), phase, ready (the ``Ready`` condition),
  restarts (the sum of ``containerStatuses[].restartCount``), image, image_id (its container status),
  command and args (secret-named flags masked), env (literal values, secret-named ones masked;
  ``valueFrom`` entries as ``<from secret NAME/KEY>``, ``<from configmap NAME/KEY>``, ``<from field PATH>``,
  the values themselves never read), env_from (``configmap/NAME``, ``secret/NAME``), gpus (the
  container's ``nvidia.com/gpu`` limit, else ``amd.com/gpu``), owner (``StatefulSet/NAME``,
  ``ReplicaSet/NAME``: the controller among ``ownerReferences``) and labels.

A pod without an IP (Pending, or ended) is a problem, not a member; so is a selector no pod matches.

The kit reaches the pods by their IP: it has to run where the pod network is routed (inside the
cluster, on a node, or over a VPN into it). From outside, run ``kubectl port-forward -n NS pod/NAME
8000:30000`` and list ``http://127.0.0.1:8000`` as a target instead. :func:`pod_exec` runs a command in
the sglang container through the API server (``nvidia-smi --query-gpu=name,driver_version
--format=csv,noheader``, ``python3 -c 'import sglang; print(sglang.__version__)'``).

No Kubernetes API server runs in this project's tests: the listing is tested against recorded API
responses served over HTTP (tests/data/k8s/SOURCES.md); exec was not exercised against a real API server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
from typing import Any

from kit._secrets import mask_argv, redact_env
from kit.errors import HostError, TargetError, UsageError

from .member import Member

__all__ = ["DEFAULT_PORT", "k8s_members", "parse_selector", "pod_exec"]

DEFAULT_PORT = 30000  # sglang's --port default
_LAUNCHERS = ("sglang.launch_server", "sglang serve", "launch_server")
_GPU_KEYS = ("nvidia.com/gpu", "amd.com/gpu")
_FORM = "namespace/label=value[,label2=value2]"

# Kubernetes names: a namespace is a DNS label; a label key an optional DNS-subdomain prefix and a name.
_NAMESPACE = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_REQUIREMENTS = (
    re.compile(rf"^!?\s*{_KEY}$"),  # key exists / does not exist
    re.compile(rf"^{_KEY}\s*(?:==|=|!=)\s*{_VALUE}$"),  # equality
    re.compile(rf"^{_KEY}\s+(?:in|notin)\s*\(\s*{_VALUE}(?:\s*,\s*{_VALUE})*\s*\)$"),  # set
)


def parse_selector(text: str) -> tuple[str, str]:
    """``"NAMESPACE/SELECTOR"`` as (namespace, label selector). The selector is any that ``kubectl -l``
    accepts: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x)``, joined by commas."""
    raw = text if isinstance(text, str) else ""
    namespace, slash, selector = raw.strip().partition("/")
    selector = selector.strip()

    def bad(why: str) -> UsageError:
        return UsageError(f"{text!r} is not a Kubernetes selector ({why}); expected {_FORM}",
                          hint='e.g. k8s="llm/app=sglang" or k8s="pd/role=leader,app in (sglang,sglang-canary)"',
                          cli_hint="e.g. --k8s llm/app=sglang or --k8s 'pd/role=leader,app in (sglang,sglang-canary)'")

    if not slash:
        raise bad("no namespace before a /")
    if not _NAMESPACE.match(namespace):
        raise bad(f"{namespace!r} is not a namespace name")
    if not selector:
        raise bad("no label selector after the /")
    for requirement in _split_requirements(selector):
        if not any(r.match(requirement.strip()) for r in _REQUIREMENTS):
            raise bad(f"{requirement.strip()!r} is not a label requirement")
    return namespace, selector


def _split_requirements(selector: str) -> list[str]:
    """The selector cut at the commas outside parentheses (``a=b,c in (x,y)`` is two requirements)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    return parts + [selector[start:]]


def _kubeconfig(kubeconfig: str | os.PathLike | None) -> tuple[str, list[str], str]:
    """(what to give the client, the files it reads, where that came from)."""
    if kubeconfig:
        spec = os.fspath(kubeconfig)
        return spec, [os.path.expanduser(spec)], "given"
    env = os.environ.get("KUBECONFIG", "")
    if env.strip(os.pathsep):
        return env, [os.path.expanduser(p) for p in env.split(os.pathsep) if p], "from $KUBECONFIG"
    return "~/.kube/config", [os.path.expanduser("~/.kube/config")], "the default; $KUBECONFIG is not set"


def _api_client(kubeconfig, context: str | None):
    """The client of the kubeconfig's cluster and user (``new_client_from_config``), one attempt per call."""
    from kubernetes import client, config

    spec, files, whence = _kubeconfig(kubeconfig)
    if not any(os.path.isfile(f) for f in files):
        raise TargetError(f"no kubeconfig at {', '.join(files)} ({whence})",
                          hint="give kubeconfig= (the file kubectl uses), or set KUBECONFIG; "
                               "`kubectl config view --minify` shows the cluster kubectl talks to",
                          cli_hint="give --kubeconfig FILE (the file kubectl uses), or set KUBECONFIG; "
                                   "`kubectl config view --minify` shows the cluster kubectl talks to")
    configuration = client.Configuration()
    configuration.retries = 0  # one attempt: a dead API server fails within the timeout, not four times it
    try:
        return config.new_client_from_config(config_file=spec, context=context, persist_config=False,
                                             client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        what = f"context {context!r} of " if context else ""
        raise TargetError(f"could not use {what}the kubeconfig {', '.join(files)}: {exc}",
                          hint="`kubectl config get-contexts` lists its contexts; give context= to pick one",
                          cli_hint="`kubectl config get-contexts` lists its contexts; give --context NAME "
                                   "to pick one") from None


def _unreachable(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "refused" in text.lower():
        return "connection refused"
    if "timed out" in text.lower() or "timeout" in type(reason).__name__.lower():
        return "timed out"
    return f"{type(reason).__name__}: {text}"


def _api_said(exc, server: str, namespace: str, selector: str) -> TargetError:
    """An ApiException as the error to show: the status, what the server said, what to try."""
    said = ""
    try:
        said = str(json.loads(exc.body or "").get("message") or "")
    except (ValueError, AttributeError):
        said = (exc.body or "").strip()[:200] if isinstance(exc.body, str) else ""
    status = exc.status or 0
    check = f"kubectl get pods -n {namespace} -l {shlex.quote(selector)}"
    if status == 0:
        return TargetError(f"the Kubernetes API server at {server} could not be asked for pods: {exc.reason}",
                           hint=f"check the cluster in the kubeconfig; `{check}` asks the same")
    head = f"the Kubernetes API server at {server} answered HTTP {status} {exc.reason or ''}".rstrip()
    head += f" to listing pods in namespace {namespace} with {selector!r}" + (f": {said}" if said else "")
    hints = {401: f"the kubeconfig's credentials were refused (expired?): `{check}` with the same kubeconfig",
             403: f"the kubeconfig's user may not list pods there: `kubectl auth can-i list pods -n {namespace}`",
             404: "that URL is not a Kubernetes API server (or a proxy hides it): `kubectl cluster-info`"}
    return TargetError(head, hint=hints.get(status, f"`{check}` asks the same"))


def k8s_members(selector: str, *, kubeconfig=None, context: str | None = None,
                timeout: float = 10.0) -> tuple[list[Member], list[str]]:
    """The pods ``"NAMESPACE/SELECTOR"`` matches as members (one per pod with an IP), and the problems
    (a pod without an IP, no pod at all). Raises UsageError for a bad selector, TargetError when the
    kubeconfig cannot be used or the API server does not answer, within ``timeout`` seconds."""
    namespace, labels = parse_selector(selector)
    api_client = _api_client(kubeconfig, context)
    server = api_client.configuration.host
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        listed = CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=labels,
                                                           _request_timeout=timeout)
    except ApiException as exc:
        raise _api_said(exc, server, namespace, labels) from None
    except (HTTPError, OSError) as exc:
        why = _unreachable(exc)
        raise TargetError(f"the Kubernetes API server at {server} did not answer"
                          + (f" within {timeout:g} s" if why == "timed out" else "") + f" ({why})",
                          hint="is the kubeconfig's cluster reachable from here (VPN, bastion)? "
                               "`kubectl cluster-info` tries the same server") from None
    except ValueError as exc:  # a 200 whose body is no PodList
        raise TargetError(f"the Kubernetes API server at {server} answered something that is not a PodList "
                          f"for namespace {namespace}: {(str(exc).splitlines() or [type(exc).__name__])[0]}",
                          hint="`kubectl cluster-info`: is that URL the API server?") from None
    finally:
        api_client.close()
    members: list[Member] = []
    problems: list[str] = []
    for pod in listed.items or []:
        found = _member(pod)
        if isinstance(found, Member):  # what pod_exec needs to reach it again
            found.facts.update({"kubeconfig": os.fspath(kubeconfig) if kubeconfig else None, "context": context})
        (members if isinstance(found, Member) else problems).append(found)
    if not listed.items:
        how = "".join(f" --{k} {shlex.quote(os.fspath(v))}" for k, v in
                      (("kubeconfig", kubeconfig), ("context", context)) if v)
        problems.append(f"no pod in namespace {namespace} matches the selector {labels!r} (API server {server}): "
                        f"check with `kubectl get pods -n {namespace} -l {shlex.quote(labels)}{how}`")
    return members, problems


def _member(pod) -> Member | str:
    """A pod as a Member, or the problem that keeps it out (no IP yet, ended)."""
    from kubernetes.client import V1PodStatus

    meta, spec, status = pod.metadata, pod.spec, pod.status or V1PodStatus()
    name = meta.name
    phase = status.phase or "Unknown"
    ip = status.pod_ip
    if phase in ("Succeeded", "Failed"):
        return f"pod {name} has ended ({phase}): not a running replica"
    if not ip:
        why = next((f" ({c.reason}: {c.message})" for c in status.conditions or []
                    if c.type == "PodScheduled" and c.status == "False" and c.reason), "")
        return f"pod {name} is {phase}: no IP yet{why}"
    container = _sglang_container(spec.containers or [])
    words = _launch_words(container)
    port = _port(words, container)
    mode = _flag(words, "--disaggregation-mode")
    statuses = status.container_statuses or []
    facts: dict[str, Any] = {
        "namespace": meta.namespace, "pod": name, "container": container.name if container else None,
        "node": spec.node_name, "phase": phase,
        "ready": any(c.type == "Ready" and c.status == "True" for c in status.conditions or []),
        "restarts": sum(c.restart_count or 0 for c in statuses),
        "image": container.image if container else None,
        "image_id": next((c.image_id for c in statuses if container and c.name == container.name), None),
        "command": _mask(container.command if container else None),
        "args": _mask(container.args if container else None),
        "env": _env(container.env if container else None),
        "env_from": _env_from(container.env_from if container else None),
        "gpus": _gpus(container),
        "owner": _owner(meta.owner_references),
        "labels": dict(meta.labels or {}),
    }
    host = f"[{ip}]" if ":" in ip else ip
    return Member(name, f"http://{host}:{port}", None, port, mode if mode in ("prefill", "decode") else "regular",
                  "k8s", facts)


def _launches(words: list[str]) -> bool:
    text = " ".join(words)
    return any(mark in text for mark in _LAUNCHERS)


def _sglang_container(containers: list):
    for c in containers:
        if _launches(list(c.command or []) + list(c.args or [])):
            return c
    return containers[0] if containers else None


def _launch_words(container) -> list[str]:
    """The container's command and args as words; a shell string that launches sglang
    (``sh -c "python3 -m sglang.launch_server --port 8000 ..."``) is split into its words."""
    if container is None:
        return []
    out: list[str] = []
    for word in list(container.command or []) + list(container.args or []):
        if re.search(r"\s", word) and _launches([word]):
            text = word.replace("\\\r\n", " ").replace("\\\n", " ")
            try:
                out += shlex.split(text, comments=True)
            except ValueError:
                out += text.split()
        else:
            out.append(word)
    return out


def _flag(words: list[str], name: str) -> str | None:
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _port(words: list[str], container) -> int:
    value = _flag(words, "--port")
    if value and value.isdigit() and 0 < int(value) < 65536:
        return int(value)
    for p in (container.ports or []) if container else []:
        if p.container_port:
            return int(p.container_port)
    return DEFAULT_PORT


def _mask(words: list[str] | None) -> list[str]:
    """A command or args list with secret-named flags masked, inside a shell string too."""
    out = []
    for word in mask_argv(list(words or [])):
        if isinstance(word, str) and re.search(r"\s", word):
            parts = re.split(r"((?:\s|\\(?=\r?\n))+)", word)  # words and the separators between them
            parts[0::2] = mask_argv(parts[0::2])
            word = "".join(parts)
        out.append(word)
    return out


def _env(env: list | None) -> dict[str, str]:
    literal = {e.name: e.value or "" for e in env or [] if e.value_from is None}
    shown = redact_env(literal)
    return {e.name: shown[e.name] if e.value_from is None else _source(e.value_from) for e in env or []}


def _source(ref) -> str:
    """Where a ``valueFrom`` takes its value, never the value."""
    if ref.secret_key_ref:
        return f"<from secret {ref.secret_key_ref.name}/{ref.secret_key_ref.key}>"
    if ref.config_map_key_ref:
        return f"<from configmap {ref.config_map_key_ref.name}/{ref.config_map_key_ref.key}>"
    if ref.field_ref:
        return f"<from field {ref.field_ref.field_path}>"
    if ref.resource_field_ref:
        return f"<from resource {ref.resource_field_ref.resource}>"
    file_ref = getattr(ref, "file_key_ref", None)
    if file_ref:
        return f"<from file {file_ref.volume_name}/{file_ref.path} key {file_ref.key}>"
    return "<from elsewhere>"


def _env_from(sources: list | None) -> list[str]:
    out = []
    for s in sources or []:
        ref = s.config_map_ref or s.secret_ref
        if ref is None:
            continue
        kind = "configmap" if s.config_map_ref else "secret"
        out.append(f"{kind}/{ref.name}" + (f" (prefix {s.prefix})" if s.prefix else ""))
    return out


def _gpus(container) -> int | str | None:
    limits = (container.resources.limits or {}) if container and container.resources else {}
    for key in _GPU_KEYS:
        if key in limits:
            value = str(limits[key])
            return int(value) if value.isdigit() else value
    return None


def _owner(refs: list | None) -> str | None:
    refs = list(refs or [])
    ref = next((r for r in refs if r.controller), refs[0] if refs else None)
    return f"{ref.kind}/{ref.name}" if ref else None


def _exec_said(exc: BaseException) -> str:
    """What the WebSocket transport's error says, without the response headers it carries
    (``Handshake status 403 Forbidden -+-+- {headers} -+-+- {Status}``: the status and the Status's message)."""
    parts = str(getattr(exc, "reason", None) or exc).split(" -+-+- ")
    said = parts[0].strip()
    try:
        message = json.loads(parts[-1]).get("message") if len(parts) > 1 else None
    except (ValueError, AttributeError):
        message = None
    return f"{said}: {message}" if message else said


def pod_exec(member: Member, argv: list[str], *, kubeconfig=None, context: str | None = None,
             timeout: float = 30.0) -> str:
    """Run ``argv`` (no shell) in the member's sglang container through the API server
    (``connect_get_namespaced_pod_exec`` over a WebSocket, ``kubernetes.stream.stream``) and return its
    stdout. HostError when it cannot run, exits non-zero or runs past ``timeout`` seconds.

    Not tested against a real API server (no cluster in this project's tests): the tests run it against a
    stand-in written in tests/test_fleet_k8s.py that speaks the exec WebSocket protocol (v4.channel.k8s.io)
    for one pod and refuses the upgrade for the others."""
    facts = member.facts or {}
    namespace, pod, container = facts.get("namespace"), facts.get("pod"), facts.get("container")
    if member.source != "k8s" or not namespace or not pod:
        raise UsageError(f"{member.name} was not listed from Kubernetes: no pod to exec in",
                         hint="list the fleet with k8s=namespace/label=value",
                         cli_hint="list the fleet with --k8s namespace/label=value")
    api_client = _api_client(kubeconfig, context)
    where, command = f"pod {namespace}/{pod}", shlex.join(argv)
    box: dict[str, Any] = {}

    def run() -> None:
        from kubernetes.client import CoreV1Api
        from kubernetes.stream import stream

        try:
            ws = stream(CoreV1Api(api_client).connect_get_namespaced_pod_exec, pod, namespace,
                        command=list(argv), container=container, stdin=False, stdout=True, stderr=True,
                        tty=False, _preload_content=False, _request_timeout=timeout)
            ws.run_forever(timeout=timeout)
            out, err = ws.read_stdout(), ws.read_stderr()
            try:
                code = ws.returncode  # None while it still runs; from the status on the error channel
            except (TypeError, KeyError, IndexError, ValueError):
                code = "unknown"
            box["done"] = (out, err, code)
            ws.close()
        except Exception as exc:  # whatever the transport raised is reported below
            box["error"] = exc
        finally:
            api_client.close()

    worker = threading.Thread(target=run, name=f"exec {pod}", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)  # the WebSocket's connect has no timeout of its own: the join bounds it
    if "error" in box:
        raise HostError(f"could not exec in {where} through {api_client.configuration.host}: "
                        f"{_exec_said(box['error'])}", host=where,
                        hint=f"exec needs `create pods/exec`: `kubectl auth can-i create pods/exec -n {namespace}`;"
                             f" by hand: `kubectl exec -n {namespace} {pod} -c {container} -- {command}`")
    out, err, code = box.get("done", (None, None, None))
    if code is None:
        raise HostError(f"{command} did not finish within {timeout:g} s in {where}", host=where,
                        hint="raise timeout=, or run it by hand with `kubectl exec`")
    if code != 0:
        tail = "\n    ".join((err or out or "").strip().splitlines()[-5:])
        raise HostError(f"{command} exited {code} in {where}" + (f":\n    {tail}" if tail else ""), host=where,
                        hint=f"run it by hand: `kubectl exec -n {namespace} {pod} -c {container} -- {command}`")
    return out or ""
