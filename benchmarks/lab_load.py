"""The lab's speed, measured side by side with what it promises.

1. Single stream, per launch variant of the incident (scenario `incident`): decode tok/s
   and time to first token of the lab's real server process, next to the throughput
   model's own expectation and the calibration range from the incident.
2. Load (scenario `loadtest`, fast synthetic streams): N concurrent streams against one
   lab process, the aggregate tokens per second the clients received, and how late the
   lab emitted its chunks against its own schedule (the lab measures that itself and
   reports it at /lab/stats), next to the targets: >= 256 streams, >= 20,000 tok/s,
   p99 emission error < 1 ms.

The client is a lean epoll reader in this process (a few microseconds per chunk, so that
it measures the lab rather than itself); the lab is its own process, as in use. Both share this machine's cores, so the load average is printed too.

    .venv/bin/python benchmarks/lab_load.py [--streams 256] [--tokens 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import selectors
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kit.lab.control import Lab  # noqa: E402
from kit.lab.launches import load_launches  # noqa: E402
from kit.lab.throughput import load_scenario, throughput_model  # noqa: E402

_COUNT = re.compile(rb'"completion_tokens":(\d+)')


class _Stream:
    """One streaming request on a non-blocking socket: when its tokens came, and how many."""

    def __init__(self, port: int, path: str, body: dict) -> None:
        data = json.dumps(body).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setblocking(False)
        self.request = (b"POST %b HTTP/1.1\r\nhost: lab\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%b" % (path.encode(), len(data), data))
        self.start = self.first = self.last = 0.0
        self.first_tokens = self.tokens = 0
        self.tail = b""
        self.done = False

    def send(self) -> None:
        self.start = time.perf_counter()
        self.sock.sendall(self.request)

    def on_readable(self) -> None:
        chunk = self.sock.recv(1 << 16)
        now = time.perf_counter()
        if not chunk:
            self.done = True
            return
        self.tail = (self.tail + chunk)[-64:]
        counts = _COUNT.findall(chunk)
        if counts:
            self.tokens = int(counts[-1])
            if not self.first:
                self.first, self.first_tokens = now, self.tokens
            self.last = now
        if self.tail.endswith(b"0\r\n\r\n"):
            self.done = True

    def result(self) -> dict:
        self.sock.close()
        return {"start": self.start, "first": self.first, "last": self.last, "tokens": self.tokens,
                "first_tokens": self.first_tokens}


def run_streams(port: int, path: str, bodies: list[dict], timeout: float = 600) -> list[dict]:
    """Run the streams concurrently with one epoll loop: a client that costs little CPU per chunk."""
    streams = [_Stream(port, path, b) for b in bodies]
    sel = selectors.DefaultSelector()
    for st in streams:
        sel.register(st.sock, selectors.EVENT_READ, st)
        st.send()
    deadline = time.monotonic() + timeout
    left = len(streams)
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            st = key.data
            st.on_readable()
            if st.done:
                sel.unregister(st.sock)
                left -= 1
    return [st.result() for st in streams]


def _generate(tokens: int, i: int) -> dict:
    return {"text": f"request {i}: " + "tell me about speculative decoding " * 8,
            "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}, "stream": True}


def _chat(tokens: int, i: int) -> dict:
    return {"model": "lab", "messages": [{"role": "user", "content": f"request {i}: tell me more " * 8}],
            "max_tokens": tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- single stream


def single_stream(lab: Lab, port: int, tokens: int, repeats: int) -> list[dict]:
    scenario = load_scenario("incident")
    rows = []
    for launch in load_launches("0.5.11"):
        status = lab.restart(variant=launch.variant, port=port, scenario="incident")
        runs = [run_streams(status.port, "/generate", [_generate(tokens, i)])[0] for i in range(repeats)]
        rates = [(r["tokens"] - r["first_tokens"]) / (r["last"] - r["first"]) for r in runs]
        model = throughput_model(scenario, launch.fields)
        calibration = scenario.calibration.get(launch.variant, {})
        rows.append({"variant": launch.variant, "tok_s": statistics.mean(rates), "tok_s_sd": statistics.pstdev(rates),
                     "ttft_ms": statistics.mean((r["first"] - r["start"]) * 1e3 for r in runs),
                     "model_tok_s": model.expected_tok_s(1), "range": calibration.get("tok_s"),
                     "source": "assumption" if "ASSUMPTION" in calibration.get("source", "") else "incident"})
    return rows


# --------------------------------------------------------------------------- load


def load(lab: Lab, port: int, streams: int, tokens: int, api: str) -> dict:
    status = lab.restart(variant="fixed", port=port, scenario="loadtest")
    url = f"http://127.0.0.1:{status.port}"
    _get(url + "/lab/stats?reset=1")
    server_cpu = _cpu_seconds(status.pid)
    client_cpu = resource.getrusage(resource.RUSAGE_SELF)
    path, body = ("/generate", _generate) if api == "native" else ("/v1/chat/completions", _chat)

    started = time.perf_counter()
    results = run_streams(status.port, path, [body(tokens, i) for i in range(streams)])
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    stats = _get(url + "/lab/stats")
    got = sum(r["tokens"] for r in results)
    # Steady state: from the moment every stream had its first token to the first stream's end.
    window = (min(r["last"] for r in results), max(r["first"] for r in results))
    steady = [r for r in results]
    steady_tokens = sum(_tokens_between(r, window[1], window[0]) for r in steady)
    return {"api": api, "streams": streams, "ok": sum(r["tokens"] == tokens for r in results), "tokens": got,
            "wall_s": wall, "tok_s": got / wall,
            "steady_tok_s": steady_tokens / (window[0] - window[1]) if window[0] > window[1] else float("nan"),
            "p50_ms": stats["p50_ms"], "p99_ms": stats["p99_ms"], "p999_ms": stats["p999_ms"],
            "max_ms": stats["max_ms"], "emissions": stats["emissions"], "scheduling": stats["scheduling"],
            "server_cpu_s": _cpu_seconds(status.pid) - server_cpu,
            "client_cpu_s": (after.ru_utime + after.ru_stime) - (client_cpu.ru_utime + client_cpu.ru_stime)}


def _tokens_between(r: dict, a: float, b: float) -> float:
    """Tokens a stream received in [a, b], assuming an even rate between its first and last token."""
    span = r["last"] - r["first"]
    if span <= 0:
        return 0.0
    overlap = max(0.0, min(b, r["last"]) - max(a, r["first"]))
    return (r["tokens"] - r["first_tokens"]) * overlap / span


# --------------------------------------------------------------------------- report


def _print_single(rows: list[dict]) -> None:
    print("\nSingle stream, scenario `incident` (decode tok/s after the first token; mean of runs)")
    print(f"{'variant':<8} {'lab measured':>14} {'model says':>11} {'target range':>13}  {'range source':<12} "
          f"{'TTFT ms':>8}")
    for r in rows:
        low, high = r["range"] or (float("nan"), float("nan"))
        inside = "in range" if low <= r["tok_s"] <= high else "OUT OF RANGE"
        print(f"{r['variant']:<8} {r['tok_s']:>8.1f} ±{r['tok_s_sd']:<4.1f} {r['model_tok_s']:>11.1f} "
              f"{f'{low:g}-{high:g}':>13}  {r['source']:<12} {r['ttft_ms']:>8.0f}   {inside}")


def _print_load(rows: list[dict]) -> None:
    print("\nLoad, scenario `loadtest` (lab process and this client share the machine)")
    print(f"{'api':<7} {'streams':>7} {'complete':>8} {'tok/s (all)':>11} {'tok/s steady':>12} {'emission error p50':>17} "
          f"{'p99':>7} {'p99.9':>7} {'max':>7} {'lab cpu s':>9} {'client cpu s':>12}")
    for r in rows:
        print(f"{r['api']:<7} {r['streams']:>7} {r['ok']:>8} {r['tok_s']:>11.0f} {r['steady_tok_s']:>12.0f} "
              f"{r['p50_ms']:>14.2f} ms {r['p99_ms']:>7.2f} {r['p999_ms']:>7.2f} {r['max_ms']:>7.1f} "
              f"{r['server_cpu_s']:>9.1f} {r['client_cpu_s']:>12.1f}")
    print(f"{'target':<7} {'>=256':>7} {'':>8} {'>=20000':>11} {'':>12} {'':>17} {'< 1.00':>7}")
    print(f"(emission error: |sent - scheduled| per chunk, measured by the lab; its OS scheduling: "
          f"{rows[0]['scheduling']})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=1000, help="output tokens per stream under load")
    parser.add_argument("--single-tokens", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="fewer tokens, one run per variant")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.single_tokens, args.repeats = 300, 100, 1
    os.environ.setdefault("SGL_KIT_LAB_DRYRUN", "0")  # the committed snapshots: a start takes a second
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before the run")
    with tempfile.TemporaryDirectory(prefix="sgl-kit-lab-bench-") as tmp:
        lab = Lab(directory=tmp)
        port = _free_port()
        try:
            single = single_stream(lab, port, args.single_tokens, args.repeats)
            loads = [load(lab, port, args.streams, args.tokens, api) for api in ("chat", "native")]
        finally:
            lab.down()
    _print_single(single)
    _print_load(loads)
    print(f"\nload average {os.getloadavg()[0]:.2f} after the run")
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
