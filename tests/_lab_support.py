"""Shared pieces of the lab tests: real lab servers (a process, or the app in a thread) and HTTP helpers."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import statistics
import threading
from contextlib import contextmanager
from pathlib import Path

from kit.lab.api import LabApp
from kit.lab.engine import Engine
from kit.lab.http import new_event_loop, serve
from kit.lab.launches import load_launches
from kit.lab.throughput import load_scenario, throughput_model

CONFIG = Path(__file__).resolve().parent.parent / "kit" / "data" / "lab" / "Qwen3.6-27B" / "config.json"


def free_port() -> int:
    """A free port that sglang 0.5.11 accepts: it also claims port + 10000 (gRPC), so stay below 55536."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port < 55536:
            return port
    raise RuntimeError("no free port below 55536 on 127.0.0.1")


def variant_fields(variant: str = "new", **overrides) -> dict:
    """The resolved args of one committed launch, as the lab would run them."""
    fields = dict({x.variant: x for x in load_launches("0.5.11")}[variant].fields)
    fields.update(overrides)
    return fields


class AppServer:
    """The lab's HTTP app and engine on a loopback port, in a thread: the API without a process."""

    def __init__(self, fields: dict, scenario: str = "incident") -> None:
        self.scenario = load_scenario(scenario)
        self.model = throughput_model(self.scenario, fields)
        self.loop = new_event_loop()
        self.engine = Engine(self.model, fields, 460000, self.loop)
        self.app = LabApp(fields, self.engine, json.loads(CONFIG.read_text()), self.scenario.params, "0.5.11")
        self.app.up = True
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(serve(self.app.handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    def call(self, func, *args):
        """Run func in the server's loop (engine state is not thread-safe) and return its result."""
        done = threading.Event()
        box = {}

        def run():
            box["value"] = func(*args)
            done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(10)
        return box.get("value")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@contextmanager
def app_server(fields: dict, scenario: str = "incident"):
    server = AppServer(fields, scenario)
    try:
        yield server
    finally:
        server.stop()


def request(port: int, method: str, path: str, body=None, headers=None, timeout: float = 30):
    """(status, headers, body bytes) of one HTTP request to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    hdrs = {"content-type": "application/json"} if isinstance(body, (dict, list)) else {}
    hdrs.update(headers or {})
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def sse(port: int, path: str, body: dict, timeout: float = 60) -> list:
    """The `data:` payloads of a streaming response, parsed as JSON (the last is the string [DONE])."""
    status, headers, raw = request(port, "POST", path, body, timeout=timeout)
    assert status == 200, raw
    assert headers.get("content-type", "").startswith("text/event-stream")
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


# -- the lab's speed as the kit's runs recorded it ------------------------------------------------------
#
# The lab emits each round on a wall-clock schedule (kit/lab/engine.py), so a machine too busy to run it on
# time delays some chunks and bunches the ones after them. A request whose first or last chunk is hit reads
# a decode rate far from the others', which widens the bootstrap interval of the means the kit compares; the
# round time read over long spans of each request hardly moves.


def round_ms(run) -> float:
    """A run's round in ms (kit.bench's recorded chunk times). The schedule never drifts, so a chunk that left
    late moves only the spans it ends: per request, the median over pairs of chunks at least half the request
    apart of the time per round between them, then the median over the requests (each chunk is one round)."""
    per_request = []
    for r in run.results:
        t = r.chunk_t_ms if r.ok else []
        n = len(t)
        if n > 3:
            per_request.append(statistics.median((t[j] - t[i]) / (j - i) for i in range(n) for j in range(i + n // 2, n)))
    return statistics.median(per_request)


def rate_outliers(run, within: float = 0.05) -> list[float]:
    """The requests' decode rates more than ``within`` from the run's median: requests a stall of this
    machine threw off (on a quiet one a run's rates lie within about 1% of each other)."""
    rates = [r.decode_tok_s for r in run.results if r.ok]
    mid = statistics.median(rates)
    return [round(x, 1) for x in rates if abs(x / mid - 1) > within]


def p2p_rounds_ms(fields: dict) -> tuple[float, float]:
    """The round of the p2p-pcie scenario's model for a launch's fields: as found (NCCL all-reduces over PCIe)
    and once peer access is on (the custom all-reduce), in ms."""
    import os

    from kit.lab.throughput import MACHINE_ENV

    scenario = load_scenario("p2p-pcie")
    saved = os.environ.pop(MACHINE_ENV, None)
    try:
        found = throughput_model(scenario, fields).round_s
        os.environ[MACHINE_ENV] = "p2p-unavailable"
        fixed = throughput_model(scenario, fields).round_s
    finally:
        os.environ.pop(MACHINE_ENV, None)
        if saved is not None:
            os.environ[MACHINE_ENV] = saved
    return found * 1e3, fixed * 1e3
