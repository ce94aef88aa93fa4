"""The Kubernetes path of the fleet (kit/fleet/k8s.py), with the real official client.

No Kubernetes API server runs here. A real HTTP server on 127.0.0.1 answers the one API path the kit
asks, ``GET /api/v1/namespaces/NS/pods?labelSelector=SEL``, with recorded PodList responses
(tests/data/k8s/, origins in its SOURCES.md: sglang's own manifests for the container specs, statuses
written in the API server's form, a real empty PodList), checks the selector and the bearer token the
client sent, and answers 404 to anything else. The kubeconfig written here points the client at it.
For exec the same server plays, for one pod, a stand-in written here in the form of the API server's exec
WebSocket protocol (not a recording: exec was not exercised against a real API server).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from kit.errors import HostError, TargetError, UsageError
from kit.fleet.k8s import k8s_members, parse_selector, pod_exec
from kit.fleet.members import Member, members

DATA = Path(__file__).parent / "data" / "k8s"
# A secret-looking bearer token (a JWT's shape); it must reach the server and nothing else.
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZsZWV0In0.eyJzdWIiOiJmbGVldC1yZWFkZXIifQ.c2VjcmV0LXNpZ25hdHVyZS0xMjM0"
DEPLOYMENT = "app=meta-llama-31-8b-instruct-sglang"
LWS_SET = "leaderworkerset.sigs.k8s.io/name in (deepseekr10528-prefill-main,deepseekr10528-decode-main),role=leader"

# Written here, not recorded: a pod whose first container is a sidecar and whose sglang container is
# launched by `sglang serve` with `--port=N` / `--disaggregation-mode=M`, on an IPv6 pod network.
WRITTEN_POD = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": [{
    "metadata": {"name": "sglang-decode-v6", "namespace": "v6", "uid": "u-1", "labels": {"app": "v6"}},
    "spec": {"nodeName": "n1", "containers": [
        {"name": "metrics-sidecar", "image": "prom/statsd-exporter", "ports": [{"containerPort": 9102}]},
        {"name": "server", "image": "lmsysorg/sglang:v0.5.5", "command": ["sglang", "serve"],
         "args": ["--model-path", "Qwen/Qwen3-8B", "--port=31000", "--disaggregation-mode=decode"]}]},
    "status": {"phase": "Running", "podIP": "fd00:10:244::7",
               "conditions": [{"type": "Ready", "status": "True"}],
               "containerStatuses": [
                   {"name": "metrics-sidecar", "image": "prom/statsd-exporter", "imageID": "x", "ready": True,
                    "restartCount": 1},
                   {"name": "server", "image": "lmsysorg/sglang:v0.5.5", "imageID": "lmsysorg/sglang@sha256:ab",
                    "ready": True, "restartCount": 3}]}}]}

ROUTES = {
    ("/api/v1/namespaces/llm/pods", DEPLOYMENT): (DATA / "pods-deployment.json").read_bytes(),
    ("/api/v1/namespaces/pd/pods", "role=leader"): (DATA / "pods-lws-pd.json").read_bytes(),
    ("/api/v1/namespaces/pd/pods", LWS_SET): (DATA / "pods-lws-pd.json").read_bytes(),
    ("/api/v1/namespaces/multi/pods", "app=distributed-sglang"): (DATA / "pods-sts-pending.json").read_bytes(),
    ("/api/v1/namespaces/default/pods", "app=nothing"): (DATA / "pods-empty.json").read_bytes(),
    ("/api/v1/namespaces/v6/pods", "app=v6"): json.dumps(WRITTEN_POD).encode(),
}
# Written in the API server's Status form (reason and code as apiserver sends them).
FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": 'pods is forbidden: User "system:serviceaccount:ops:fleet-reader" cannot list resource '
                        '"pods" in API group "" in the namespace "locked"',
             "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403}


# Exec, written here in the form of the WebSocket protocol the API server speaks (v4.channel.k8s.io: one
# byte of channel, 1 stdout, 2 stderr, 3 the Status of the command), answered for one pod only. A stand-in,
# not a recording: exec was not exercised against a real API server.
EXEC_POD = "/api/v1/namespaces/llm/pods/meta-llama-31-8b-instruct-sglang-7d9f8c6b5d-x2kq7/exec"
EXIT_1 = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
          "message": "command terminated with non-zero exit code: error executing command [python3 -c import sglang], "
                     "exit code 1", "details": {"causes": [{"reason": "ExitCode", "message": "1"}]}}


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    size = bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
    return bytes([0x80 | opcode]) + size + payload


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        self.server.requests.append({"path": parts.path, "query": query,
                                     "authorization": self.headers.get("Authorization"),
                                     "upgrade": self.headers.get("Upgrade")})
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
            return self._send(401, json.dumps(body).encode())
        if parts.path == EXEC_POD and (self.headers.get("Upgrade") or "").lower() == "websocket":
            return self._exec(query.get("command", []))
        if parts.path == "/api/v1/namespaces/locked/pods":
            return self._send(403, json.dumps(FORBIDDEN).encode())
        selectors = query.get("labelSelector", [])
        body = ROUTES.get((parts.path, selectors[0])) if len(selectors) == 1 else None
        if body is None:
            body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "the server could not find the requested resource", "reason": "NotFound",
                    "code": 404}
            return self._send(404, json.dumps(body).encode())
        return self._send(200, body)


    def _exec(self, argv: list[str]) -> None:
        accept = hashlib.sha1((self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode())
        self.send_response(101, "Switching Protocols")
        for name, value in (("Upgrade", "websocket"), ("Connection", "Upgrade"),
                            ("Sec-WebSocket-Accept", base64.b64encode(accept.digest()).decode()),
                            ("Sec-WebSocket-Protocol", "v4.channel.k8s.io")):
            self.send_header(name, value)
        self.end_headers()
        if argv[:1] == ["nvidia-smi"]:
            frames = [(1, "NVIDIA H100 80GB HBM3, 570.124.06\n"), (3, json.dumps({"metadata": {}, "status": "Success"}))]
        else:
            frames = [(2, "ModuleNotFoundError: No module named 'sglang'\n"), (3, json.dumps(EXIT_1))]
        for channel, text in frames:
            self.wfile.write(_frame(0x2, bytes([channel]) + text.encode()))
        self.wfile.write(_frame(0x8, (1000).to_bytes(2, "big")))
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture(scope="module")
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def silent():
    """A port that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def kubeconfig(api, silent, tmp_path) -> Path:
    port = api.server_address[1]
    text = f"""\
apiVersion: v1
kind: Config
clusters:
- name: recorded
  cluster:
    server: http://127.0.0.1:{port}
- name: dead
  cluster:
    server: http://127.0.0.1:{_free_port()}
- name: silent
  cluster:
    server: http://127.0.0.1:{silent}
contexts:
- name: recorded
  context: {{cluster: recorded, user: fleet-reader}}
- name: dead
  context: {{cluster: dead, user: fleet-reader}}
- name: silent
  context: {{cluster: silent, user: fleet-reader}}
current-context: recorded
users:
- name: fleet-reader
  user:
    token: {TOKEN}
"""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    return path


def _list(selector: str, kubeconfig: Path, **kw) -> tuple[list[Member], list[str]]:
    return k8s_members(selector, kubeconfig=str(kubeconfig), timeout=5.0, **kw)


def test_the_three_deployment_pods_are_members(api, kubeconfig):
    found, problems = _list(f"llm/{DEPLOYMENT}", kubeconfig)
    assert problems == []
    assert [(m.name, m.url, m.port, m.role, m.target, m.source) for m in found] == [
        ("meta-llama-31-8b-instruct-sglang-7d9f8c6b5d-x2kq7", "http://10.244.1.23:30000", 30000, "regular", None, "k8s"),
        ("meta-llama-31-8b-instruct-sglang-7d9f8c6b5d-p8vhz", "http://10.244.2.17:30000", 30000, "regular", None, "k8s"),
        ("meta-llama-31-8b-instruct-sglang-5c4b9d7f68-mz4tn", "http://10.244.3.9:30000", 30000, "regular", None, "k8s"),
    ]
    first = dict(found[0].facts)
    # how to reach the pod again (pod_exec): the kubeconfig and context it was listed with
    assert (first.pop("kubeconfig"), first.pop("context")) == (str(kubeconfig), None)
    assert first == {
        "namespace": "llm", "pod": "meta-llama-31-8b-instruct-sglang-7d9f8c6b5d-x2kq7",
        "container": "meta-llama-31-8b-instruct-sglang", "node": "gpu-node-a", "phase": "Running", "ready": True,
        "restarts": 0, "image": "docker.io/lmsysorg/sglang:latest",
        "image_id": "docker.io/lmsysorg/sglang@sha256:9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c2b4d6f8e0a1c3e5b7d9f1a3c5e7b9d0f",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "meta-llama/Meta-Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "30000"],
        # the manifest's literal value is "<secret>": masked by the one policy of kit/_secrets.py
        "env": {"HF_TOKEN": "<redacted>"}, "env_from": [], "gpus": 1,
        "owner": "ReplicaSet/meta-llama-31-8b-instruct-sglang-7d9f8c6b5d",
        "labels": {"app": "meta-llama-31-8b-instruct-sglang", "model": "meta-llama-31-8b-instruct", "engine": "sglang",
                   "pod-template-hash": "7d9f8c6b5d"}}
    assert found[1].facts["restarts"] == 2
    # what the client sent: the path, the selector as given, the kubeconfig's token
    sent = [r for r in api.requests if r["path"] == "/api/v1/namespaces/llm/pods"][-1]
    assert sent["query"]["labelSelector"] == [DEPLOYMENT]
    assert sent["authorization"] == f"Bearer {TOKEN}"


def test_the_pod_of_the_newer_template_shows_its_own_args_and_env(kubeconfig):
    found, _ = _list(f"llm/{DEPLOYMENT}", kubeconfig)
    old, newer = found[0].facts, found[2].facts
    assert newer["args"][:6] == old["args"]
    assert newer["args"][6:] == ["--mem-fraction-static", "0.85", "--api-key", "<redacted>"]
    assert newer["env"] == {"HF_TOKEN": "<from secret hf-token/token>"}
    assert newer["env_from"] == ["configmap/sglang-env"]
    assert newer["owner"] == "ReplicaSet/meta-llama-31-8b-instruct-sglang-5c4b9d7f68" != old["owner"]
    text = repr(found)
    assert "sk-fleet-test" not in text and "<secret>" not in text


def test_lws_leaders_are_prefill_and_decode(api, kubeconfig):
    for selector in ("role=leader", LWS_SET):
        found, problems = _list(f"pd/{selector}", kubeconfig)
        assert problems == []
        assert api.requests[-1]["query"]["labelSelector"] == [selector]
        assert [(m.name, m.url, m.role) for m in found] == [
            ("deepseekr10528-prefill-main-0", "http://10.0.3.21:30000", "prefill"),
            ("deepseekr10528-decode-main-0", "http://10.0.3.25:30000", "decode")]
    prefill, decode = found[0].facts, found[1].facts
    assert (prefill["ready"], prefill["restarts"], decode["ready"], decode["restarts"]) == (True, 0, False, 1)
    assert prefill["owner"] == "StatefulSet/deepseekr10528-prefill-main"
    assert prefill["gpus"] == 8 and prefill["node"] == "h20-node-07"
    assert prefill["image"] == "lmsysorg/sglang:latest"
    assert prefill["args"] == [] and prefill["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--disaggregation-mode" in prefill["command"]
    # the LWS webhook's variables first, the template's own fieldRef for LWS_WORKER_INDEX replaced by its value
    assert list(prefill["env"])[:3] == ["LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"]
    assert prefill["env"]["LWS_LEADER_ADDRESS"] == "deepseekr10528-prefill-main-0.deepseekr10528-prefill-main.pd"
    assert prefill["env"]["LWS_WORKER_INDEX"] == "0"
    assert prefill["env"]["NCCL_IB_HCA"] == "^=mlx5_0,mlx5_5,mlx5_6"
    assert prefill["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_a_pending_pod_is_a_problem_and_the_shell_launch_gives_the_port(kubeconfig):
    found, problems = _list("multi/app=distributed-sglang", kubeconfig)
    assert [(m.name, m.url, m.port) for m in found] == [("distributed-sglang-0", "http://10.0.4.11:8000", 8000)]
    facts = found[0].facts
    assert facts["command"] == ["/bin/bash", "-c"] and "--port 8000" in facts["args"][0]
    assert facts["env"] == {"POD_INDEX": "<from field metadata.labels['apps.kubernetes.io/pod-index']>",
                            "NCCL_DEBUG": "INFO"}
    assert facts["gpus"] == 8 and facts["owner"] == "StatefulSet/distributed-sglang"
    assert len(problems) == 1
    assert problems[0].startswith("pod distributed-sglang-1 is Pending: no IP yet (Unschedulable: 0/4 nodes are")
    assert "Insufficient nvidia.com/gpu" in problems[0]


def test_no_pod_is_a_problem_with_the_kubectl_to_check(kubeconfig):
    found, problems = _list("default/app=nothing", kubeconfig)
    assert found == []
    assert len(problems) == 1
    assert "no pod in namespace default matches the selector 'app=nothing'" in problems[0]
    assert f"kubectl get pods -n default -l app=nothing --kubeconfig {kubeconfig}" in problems[0]


def test_the_sglang_container_port_role_and_ipv6_of_a_written_pod(kubeconfig):
    (m,), problems = _list("v6/app=v6", kubeconfig)
    assert problems == []
    assert (m.url, m.port, m.role) == ("http://[fd00:10:244::7]:31000", 31000, "decode")
    assert m.facts["container"] == "server" and m.facts["image_id"] == "lmsysorg/sglang@sha256:ab"
    assert m.facts["restarts"] == 4  # every container of the pod
    assert m.facts["gpus"] is None and m.facts["owner"] is None


def test_the_token_is_in_no_member_problem_or_error(kubeconfig, tmp_path):
    seen = []
    for selector in (f"llm/{DEPLOYMENT}", "pd/role=leader", "multi/app=distributed-sglang", "default/app=nothing",
                     "v6/app=v6"):
        found, problems = _list(selector, kubeconfig)
        seen += [repr(found), json.dumps([m.to_dict() for m in found]), repr(problems)]
    for selector, context in (("locked/app=x", None), ("llm/app=unrouted", None), ("llm/app=x", "dead")):
        with pytest.raises(TargetError) as err:
            _list(selector, kubeconfig, context=context)
        seen.append(str(err.value))
    text = "\n".join(seen)
    assert TOKEN not in text and TOKEN[-12:] not in text


@pytest.mark.parametrize("good, expected", [
    ("llm/app=sglang", ("llm", "app=sglang")),
    ("llm/app=sglang,tier==gpu", ("llm", "app=sglang,tier==gpu")),
    ("pd/app in (a,b),role!=worker", ("pd", "app in (a,b),role!=worker")),
    ("pd/!canary,leaderworkerset.sigs.k8s.io/name notin (x)", ("pd", "!canary,leaderworkerset.sigs.k8s.io/name notin (x)")),
    ("ns-1/app", ("ns-1", "app")),
])
def test_selectors_kubernetes_accepts_parse(good, expected):
    assert parse_selector(good) == expected


@pytest.mark.parametrize("bad", ["app=sglang", "llm/", "/app=x", "LLM/app=x", "llm/app=(x", "llm/app in a,b",
                                 "llm/a b=c", "llm/app=sglang,", "llm/app=x y"])
def test_a_bad_selector_is_a_usage_error_with_the_form(bad, kubeconfig):
    with pytest.raises(UsageError) as err:
        k8s_members(bad, kubeconfig=str(kubeconfig))
    assert repr(bad) in err.value.message
    assert "namespace/label=value" in err.value.message


def test_a_missing_kubeconfig_names_the_file(tmp_path, monkeypatch):
    missing = tmp_path / "nope" / "config"
    with pytest.raises(TargetError) as err:
        k8s_members("llm/app=x", kubeconfig=str(missing))
    assert str(missing) in err.value.message and "KUBECONFIG" in err.value.hint
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(TargetError) as err:
        k8s_members("llm/app=x")
    assert str(tmp_path / ".kube" / "config") in err.value.message
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(TargetError) as err:
        k8s_members("llm/app=x")
    assert str(missing) in err.value.message and "$KUBECONFIG" in err.value.message


def test_kubeconfig_from_the_environment_and_an_unknown_context(kubeconfig, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    found, _ = k8s_members(f"llm/{DEPLOYMENT}", timeout=5.0)
    assert len(found) == 3
    with pytest.raises(TargetError) as err:
        k8s_members(f"llm/{DEPLOYMENT}", context="staging")
    assert "staging" in err.value.message and "get-contexts" in err.value.hint


@pytest.mark.parametrize("context, said", [("dead", "connection refused"), ("silent", "timed out")])
def test_a_dead_api_server_fails_within_the_timeout_naming_it(kubeconfig, context, said):
    servers = [line.split("server: ")[1] for line in kubeconfig.read_text().splitlines() if "server: " in line]
    server = servers[["recorded", "dead", "silent"].index(context)]
    start = time.monotonic()
    with pytest.raises(TargetError) as err:
        k8s_members("llm/app=x", kubeconfig=str(kubeconfig), context=context, timeout=1.5)
    assert time.monotonic() - start < 1.5 + 1.0
    assert server in err.value.message and said in err.value.message
    assert "cluster-info" in err.value.hint


def test_a_refusal_says_the_status_and_what_to_check(kubeconfig):
    with pytest.raises(TargetError) as err:
        _list("locked/app=x", kubeconfig)
    assert "HTTP 403" in err.value.message and "cannot list resource" in err.value.message
    assert "kubectl auth can-i list pods -n locked" in err.value.hint


def test_the_fleet_lists_the_pods_and_their_problems(kubeconfig):
    fleet = members(k8s="multi/app=distributed-sglang", kubeconfig=str(kubeconfig), timeout=5.0)
    assert fleet.names() == ["distributed-sglang-0"]
    assert fleet.members[0].source == "k8s"
    assert fleet.problems[0].startswith("pod distributed-sglang-1 is Pending")


def test_exec_through_the_written_stand_in_returns_stdout_or_the_exit(api, kubeconfig):
    (member, *_), _ = _list(f"llm/{DEPLOYMENT}", kubeconfig)
    out = pod_exec(member, ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                   kubeconfig=str(kubeconfig), timeout=5.0)
    assert out == "NVIDIA H100 80GB HBM3, 570.124.06\n"
    asked = [r for r in api.requests if r["path"] == EXEC_POD][-1]
    assert asked["query"]["command"] == ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    assert asked["query"]["container"] == ["meta-llama-31-8b-instruct-sglang"]
    assert asked["authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(HostError) as err:
        pod_exec(member, ["python3", "-c", "import sglang; print(sglang.__version__)"], kubeconfig=str(kubeconfig),
                 timeout=5.0)
    assert "exited 1 in pod llm/meta-llama-31-8b-instruct-sglang-7d9f8c6b5d-x2kq7" in err.value.message
    assert "No module named 'sglang'" in err.value.message and "kubectl exec -n llm" in err.value.hint


def test_exec_that_the_api_server_refuses_is_a_host_error_naming_the_pod(api, kubeconfig):
    # Any other pod's exec is answered 404, as a server without that pod would.
    (member, *_), _ = _list("multi/app=distributed-sglang", kubeconfig)
    start = time.monotonic()
    with pytest.raises(HostError) as err:
        pod_exec(member, ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                 kubeconfig=str(kubeconfig), timeout=5.0)
    assert time.monotonic() - start < 6.0
    assert f"pod multi/{member.name}" in err.value.message and "404" in err.value.message
    assert "pods/exec" in err.value.hint
    asked = [r for r in api.requests if r["path"].endswith(f"/pods/{member.name}/exec")]
    assert asked and asked[-1]["query"]["command"][0] == "nvidia-smi" and asked[-1]["upgrade"] == "websocket"
    assert asked[-1]["query"]["container"] == ["sglang-container"]
    with pytest.raises(UsageError):
        pod_exec(Member("10.0.0.1:30000", "http://10.0.0.1:30000"), ["true"], kubeconfig=str(kubeconfig))
