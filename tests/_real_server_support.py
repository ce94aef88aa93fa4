"""Real sglang servers for the tests: PyPI's sglang 0.5.11 on CPU with a tiny random Qwen3 or Qwen3.5.

``real_server`` (one per test session, shared by every test that names it) builds the real-server
environment once under the kit cache ($SGL_KIT_CACHE; about 2.4 GB, a few minutes the first time,
cached after), makes the tiny model and starts ``python -m sglang.launch_server`` through
``RealLab`` in a temporary lab directory on a free port. ``qwen35_server`` is the same for the tiny
Qwen3.5. Tests get a handle whose ``server()`` discovers the server afresh.

A shared server is never changed by a test: a test that relaunches, restarts, stops or
reconfigures a server takes its own (``own_real_server``: a fresh one for that test, found by its
port, SGL_KIT_LAB_DIR untouched). tests/conftest.py checks each shared server before and after
every test that uses it (``RealServer.problem``): alive, answering, on the launch it started with.
One found otherwise is restarted on its port and the test that left it so fails, naming what it
found; the tests after it get the server they expect. At the end every server of a lab directory,
and its workers, is stopped, and the test session fails if one is left.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _lab_support import free_port

from kit.hosts import LocalHost
from kit.lab.real import RealLab
from kit.target import discover, find_server, resolve_server

START_TIMEOUT = 600.0
# The session fixtures of shared real servers: tests/conftest.py checks them around each test that uses one.
SHARED_SERVERS = ("real_server", "qwen35_server")


@dataclass
class RealServer:
    lab: RealLab
    host: LocalHost
    lab_dir: str
    port: int
    started_s: float
    by_port: bool = False  # found by its port among its lab directory's servers, not through SGL_KIT_LAB_DIR
    launch: list[str] = field(default_factory=list)  # the argv it was started with (its lab record)

    def server(self):
        ours = [s for s in discover(self.host) if s.labels.get("lab_dir") == self.lab_dir]
        if self.by_port:  # not "the lab" (SGL_KIT_LAB_DIR names another directory): this server, by its port
            return find_server(self.host, port=self.port, servers=ours)
        return resolve_server(self.host, "lab", servers=ours)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def record(self) -> dict | None:
        """The lab's record of the server it started (run/server.json), None when there is none."""
        try:
            return json.loads((Path(self.lab_dir) / "run" / "server.json").read_text())
        except (OSError, ValueError):
            return None

    def problem(self, wait: float = 60.0) -> str | None:
        """What makes this server unfit for the next test, or None: the lab's record names a live process
        started with the same argv on the same port, and that process answers HTTP (within ``wait`` s:
        a busy machine may be slow to answer, which is not a fault)."""
        state = self.record()
        if state is None:
            return "its lab has no server (run/server.json is gone: stopped)"
        pid = int(state.get("pid") or 0)
        if _start_ticks(pid) != state.get("start_ticks"):
            return f"pid {pid}, the lab's server, is gone"
        if state.get("argv") != self.launch or int(state.get("port") or 0) != self.port:
            changed = sorted(set(state.get("argv") or []) ^ set(self.launch))
            return f"it runs another launch than it started with (pid {pid}, port {state.get('port')}: {changed})"
        deadline = time.monotonic() + wait
        while True:
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=10) as resp:
                    resp.read()
                return None
            except OSError as exc:
                if time.monotonic() > deadline:
                    return f"pid {pid} does not answer {self.url}/v1/models ({exc})"
                time.sleep(1)

    def restore(self) -> None:
        """Stop whatever runs of its lab directory and start its first launch again, on its port."""
        self.lab.down(timeout=10)
        left = stop_everything(self.lab_dir)
        assert not left, f"processes of the real server in {self.lab_dir} still alive after stopping: {left}"
        self.lab.up(port=self.port, timeout=START_TIMEOUT)
        self.launch = list((self.record() or {}).get("argv") or [])


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _ours(lab_dir: str) -> list:
    return [s for s in discover(LocalHost()) if s.labels.get("lab_dir") == lab_dir]


def stop_everything(lab_dir: str, timeout: float = 30.0) -> list[int]:
    """SIGTERM every server of the lab directory and its children; SIGKILL what is left; the pids still alive."""
    pids = []
    for server in _ours(lab_dir):
        pids += [server.pid] + [c["pid"] for c in server.children]
        try:
            os.kill(server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    time.sleep(0.5)
    return [p for p in pids if alive(p)]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def serve_real(tmp_path_factory, model: str = "qwen3", set_lab_dir: bool = True):
    """A generator for a fixture: one real server of the tiny ``model`` in its own lab directory.
    With ``set_lab_dir``, SGL_KIT_LAB_DIR points at it while it runs (discovery of target "lab")."""
    lab_dir = str(tmp_path_factory.mktemp(f"real-lab-{model}"))
    old = os.environ.get("SGL_KIT_LAB_DIR")
    if set_lab_dir:
        os.environ["SGL_KIT_LAB_DIR"] = lab_dir  # discovery of target "lab" looks for this directory's server
    lab = RealLab(LocalHost(), directory=lab_dir, model=model, progress=lambda step: None)
    port = free_port()
    t0 = time.monotonic()
    try:
        lab.up(port=port, timeout=START_TIMEOUT)
        handle = RealServer(lab, LocalHost(), lab_dir, port, time.monotonic() - t0, by_port=not set_lab_dir)
        handle.launch = list((handle.record() or {}).get("argv") or [])
        yield handle
    finally:
        # The suite is done with it: no need to wait out sglang's graceful shutdown of requests in flight
        # (a bad request earlier keeps it waiting; `lab down` itself waits 40 s and says so).
        lab.down(timeout=10)
        left = stop_everything(lab_dir)
        if set_lab_dir:
            if old is None:
                os.environ.pop("SGL_KIT_LAB_DIR", None)
            else:
                os.environ["SGL_KIT_LAB_DIR"] = old
        assert not left, f"processes of the real server still alive after stopping: {left}"


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    """The Qwen3 server every test shares; SGL_KIT_LAB_DIR names its lab (target "lab"). Never change it."""
    yield from serve_real(tmp_path_factory, "qwen3")


@pytest.fixture(scope="session")
def qwen35_server(tmp_path_factory):
    """The Qwen3.5 server its tests share, in its own lab directory (SGL_KIT_LAB_DIR is left to
    ``real_server``; its tests name the port). Never change it."""
    yield from serve_real(tmp_path_factory, "qwen3.5", set_lab_dir=False)


@pytest.fixture
def own_real_server(tmp_path_factory):
    """A Qwen3 server of the test's own, for a test that relaunches, restarts or stops it: found by its
    port in its own lab directory (SGL_KIT_LAB_DIR keeps naming the shared one)."""
    yield from serve_real(tmp_path_factory, "qwen3", set_lab_dir=False)


# ---------------------------------------------------------------------------- protocol shapes


def _keys(obj, prefix: str = "") -> set[str]:
    """Every key path of a JSON value (lists: their first item), e.g. {"meta_info.completion_tokens"}."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(prefix + k)
            out |= _keys(v, f"{prefix}{k}.")
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
        out |= _keys(obj[0], prefix.rstrip(".") + "[].")
    return out


def protocol_shape(port: int, model: str | None = None) -> dict:
    """What a server's API looks like, as key sets and framing: the same requests to the stand-in and
    the real server, compared key by key (values differ: the models differ)."""
    from _lab_support import request

    shape: dict = {}
    for path in ("/health", "/health_generate", "/server_info", "/get_server_info", "/v1/models", "/model_info",
                 "/get_model_info", "/metrics"):
        status, headers, body = request(port, "GET", path, timeout=60)
        shape[f"GET {path} status"] = status
        shape[f"GET {path} content-type"] = headers.get("content-type", "").split(";")[0]
        if path in ("/server_info", "/v1/models", "/model_info", "/get_model_info") and status == 200:
            data = json.loads(body)
            if path == "/server_info":
                shape[f"GET {path} keys"] = sorted(k for k in data if k != "internal_states")
                shape[f"GET {path} internal_states[] keys"] = sorted(_keys(data["internal_states"][0]) -
                                                                      set(data))
            else:
                shape[f"GET {path} keys"] = sorted(_keys(data))
        if path == "/metrics" and status == 200:
            shape["metrics families"] = sorted({line.split("{")[0].split(" ")[0] for line in body.decode().splitlines()
                                                if line.startswith("sglang:")})
    name = model or json.loads(request(port, "GET", "/v1/models")[2])["data"][0]["id"]
    gen = {"text": "hello", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    status, _, body = request(port, "POST", "/generate", gen, timeout=120)
    shape["POST /generate keys"] = sorted(_keys(json.loads(body))) if status == 200 else status
    for path, body_ in (("/generate", {**gen, "stream": True}),
                        ("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 4, "stream": True,
                                                  "stream_options": {"include_usage": True}}),
                        ("/v1/completions", {"model": name, "prompt": "hi", "max_tokens": 4, "stream": True})):
        status, headers, raw = request(port, "POST", path, body_, timeout=120)
        blocks = [b for b in raw.decode().split("\n\n") if b.strip()]
        shape[f"POST {path} stream content-type"] = headers.get("content-type", "").split(";")[0]
        shape[f"POST {path} stream framing"] = sorted({b.split(":", 1)[0] for b in blocks})
        shape[f"POST {path} stream ends with [DONE]"] = bool(blocks) and blocks[-1].strip() == "data: [DONE]"
        events = [json.loads(b[6:]) for b in blocks if b.startswith("data: {")]
        shape[f"POST {path} stream event keys"] = sorted(set().union(*(_keys(e) for e in events)) if events else [])
    chat = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    status, _, body = request(port, "POST", "/v1/chat/completions", chat, timeout=120)
    shape["POST /v1/chat/completions keys"] = sorted(_keys(json.loads(body))) if status == 200 else status
    status, _, body = request(port, "POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": -5}})
    shape["POST /generate bad request status"] = status
    return shape


def shape_diff(stand_in: dict, real: dict) -> dict:
    """Per item: what only the real server has, what only the stand-in has, or both values when they differ."""
    out = {}
    for key in sorted(set(stand_in) | set(real)):
        a, b = stand_in.get(key), real.get(key)
        if isinstance(a, list) and isinstance(b, list):
            only_real, only_stand_in = sorted(set(b) - set(a)), sorted(set(a) - set(b))
            if only_real or only_stand_in:
                out[key] = {"only real": only_real, "only stand-in": only_stand_in}
        elif a != b:
            out[key] = {"stand-in": a, "real": b}
    return out


def metric_total(url: str, name: str) -> float:
    """The sum over labels of one series on a server's own /metrics page (the test fails if it is absent)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert values, f"{name} not in /metrics"
    return sum(values)
