"""`fleet args` over 64 replicas: 64 lab stand-ins (sglang's HTTP API, kit.lab) on free loopback ports in one
helper process (tests/_fleet_support.py), one of them started from another launch. Every member is HTTP only.

What is checked is the answer, not its speed (benchmarks/fleet_scale.py times it): every replica read,
the drifted one first with the fields that differ named, unreachable replicas named with their URL while
the rest is kept, and a replica that never answers cut off at the timeout. Time bounds are generous.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _fleet_support import drifted_fields, standins

from kit.fleet import Fleet, Member, fleet_args

N = 64
DRIFTED = 41  # not first in the listing: the drift must put it first


def _member(port: int) -> Member:
    return Member(name=f"127.0.0.1:{port}", url=f"http://127.0.0.1:{port}", target=None, port=port)


def _fleet(ports: list[int]) -> Fleet:
    return Fleet([_member(p) for p in ports])


@pytest.fixture(scope="module")
def lab64():
    with standins(N, DRIFTED) as stand_ins:
        yield stand_ins
    assert stand_ins.proc.poll() is not None  # the helper process is gone


@pytest.fixture
def refused_ports():
    """3 ports bound and not listening: a connection to them is refused (a replica that is down)."""
    socks = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


@pytest.fixture
def silent_port():
    """A server that accepts connections and never answers (nor reads)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.1)  # so that the accepting thread sees `stop`
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(5)
    srv.close()
    for conn in held:
        conn.close()


def test_all_64_read_and_the_drifted_one_first(lab64):
    t0 = time.monotonic()
    res = fleet_args(_fleet(lab64.ports), concurrency=8, timeout=60, hardware=False, progress=None)
    assert time.monotonic() - t0 < 60
    assert res.run.failures == {}
    assert list(res.run.results) == [lab64.name(i) for i in range(N)]  # in the order listed
    assert len(res.drift.facts) == N
    drifted = lab64.name(DRIFTED)
    want = drifted_fields()
    assert want and all(f.startswith("launch.") for f in want)
    assert res.drift.order()[0] == drifted
    assert list(res.drift.deviants) == [drifted]
    assert set(res.drift.deviants[drifted]) == want
    for d in res.drift.differences():
        assert d["replica"] == drifted and d["field"] in want and d["value"] != d["majority"]
    text = res.to_text()
    assert text.startswith(f"1 of {N} replica(s) differ from the majority")
    difference_lines = text.split("\n\n")[0].splitlines()[1:]
    assert len(difference_lines) == len(want)
    for line in difference_lines:
        assert line.split()[0] == drifted
    for field in want:
        assert field in text
    assert f"{N} of {N} replica(s) answered" in text
    # every replica read over HTTP only, nothing else tried
    for facts in res.drift.facts.values():
        assert facts["sglang"] == "0.5.11"
        assert facts["launch"] == "read"
        assert any("/server_info (HTTP only" in r for r in facts["read"])


def test_three_unreachable_replicas_give_a_partial_answer(lab64, refused_ports):
    ports = lab64.ports[:20] + refused_ports[:1] + lab64.ports[20:50] + refused_ports[1:] + lab64.ports[50:]
    t0 = time.monotonic()
    res = fleet_args(_fleet(ports), concurrency=8, timeout=30, hardware=False, progress=None)
    assert time.monotonic() - t0 < 60
    assert res.run.partial
    assert len(res.run.results) == N
    assert set(res.run.failures) == {f"127.0.0.1:{p}" for p in refused_ports}
    for p in refused_ports:
        why = res.run.failures[f"127.0.0.1:{p}"]
        assert f"http://127.0.0.1:{p}/" in why, why
        assert re.search(r"refused", why, re.I), why
    # the replicas that answered still compare: the drifted one first, the unreachable ones not in the drift
    assert res.drift.order()[0] == lab64.name(DRIFTED)
    assert list(res.drift.deviants) == [lab64.name(DRIFTED)]
    assert not {f"127.0.0.1:{p}" for p in refused_ports} & set(res.drift.facts)
    summary = res.run.summary()
    assert summary.startswith(f"fleet args: {N} of {N + 3} replica(s) answered")
    for p in refused_ports:
        assert f"! 127.0.0.1:{p}: " in summary


def test_a_replica_that_never_answers_is_cut_off_at_the_timeout(lab64, silent_port):
    ports = lab64.ports[:3] + [silent_port] + lab64.ports[3:6]
    t0 = time.monotonic()
    res = fleet_args(_fleet(ports), concurrency=8, timeout=0.5, hardware=False, progress=None)
    elapsed = time.monotonic() - t0
    assert elapsed < 5, elapsed  # a few seconds at most, though the silent replica never answers
    name = f"127.0.0.1:{silent_port}"
    assert name in res.run.failures
    why = res.run.failures[name]
    # fanout's own deadline says "no answer within 0.5 s (...)"; the HTTP read's socket timeout is the
    # same 0.5 s (replica_facts gives get_server_info min(timeout, 10)), and whichever fires first is the
    # one reported -- usually the socket's "GET http://.../server_info failed: timed out". Either names it.
    assert re.search(r"no answer within 0\.5 s|/server_info failed: timed out", why), why
    assert res.run.seconds[name] < 5
    # the stand-ins around it were not held up by it (they answer in milliseconds; 0.5 s is their limit too,
    # so on a machine too busy for that they may time out -- then they are named, never lost)
    assert set(res.run.results) | set(res.run.failures) == {f"127.0.0.1:{p}" for p in ports}


def test_the_cli_reads_64_replicas_http_only(lab64):
    cli = Path(sys.executable).with_name("sgl-kit")
    helped = subprocess.run([str(cli), "fleet", "args", "--help"], capture_output=True, text=True, timeout=60)
    if helped.returncode != 0 or "--http-only" not in helped.stdout:
        pytest.skip("`sgl-kit fleet args --http-only` is not there yet")
    res = subprocess.run([str(cli), "fleet", "args", *lab64.urls(), "--http-only", "--concurrency", "8"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert out.startswith(f"1 of {N} replica(s) differ from the majority"), out[:500]
    drifted = lab64.name(DRIFTED)
    first_named = min(out.find(lab64.name(i) + " ") for i in range(N) if lab64.name(i) + " " in out)
    assert out.find(drifted + " ") == first_named
    assert f"{N} of {N} replica(s) answered" in out
    assert "! " not in out
