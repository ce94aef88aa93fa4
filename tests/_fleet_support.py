"""Many lab stand-ins for the fleet tests: N of sglang's HTTP API (``kit.lab``'s app and engine, built as
``_lab_support.AppServer`` builds one) on free loopback ports, all in ONE helper process with one event
loop, so that the process under test is not the one answering.

``standins(n, drifted=i)`` starts the helper (this file run as a script), yields the ports, and stops the
helper on exit. Replica ``drifted`` runs the ``fixed`` launch, the others ``new`` (:data:`DRIFTED_FIELDS`:
the launch fields that differ). The helper also stops when its stdin closes, so it cannot outlive the test
process.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BASE, DRIFTED = "new", "fixed"


def drifted_fields() -> set[str]:
    """The drift's names (``launch.<field>``) of the fields where the drifted replica differs."""
    from _lab_support import variant_fields

    from kit.fleet.drift import PER_REPLICA

    a, b = variant_fields(BASE), variant_fields(DRIFTED)
    return {f"launch.{k}" for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in PER_REPLICA}


@dataclass
class StandIns:
    ports: list[int]
    drifted: int
    proc: subprocess.Popen

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def name(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i]}"


@contextmanager
def standins(n: int, drifted: int):
    """``n`` stand-ins in a helper process; replica ``drifted`` (0-based) from the other launch."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(n), str(drifted)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the stand-ins' helper process ended before serving (exit {proc.wait(10)})")
        yield StandIns(json.loads(line)["ports"], drifted, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()


def _serve(n: int, drifted: int) -> None:
    import asyncio

    from _lab_support import CONFIG, variant_fields

    import kit.lab.api as lab_api
    from kit.lab.api import LabApp
    from kit.lab.engine import Engine
    from kit.lab.http import new_event_loop, serve
    from kit.lab.throughput import load_scenario, throughput_model

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test process stops this one
    scenario = load_scenario("incident")
    config = json.loads(CONFIG.read_text())
    # The filler text (read-only, ~20 MB and 0.15 s each) is shared: one per process, not one per stand-in.
    fillers: dict = {}
    real_filler = lab_api.Filler
    lab_api.Filler = lambda **kw: fillers.get(repr(kw)) or fillers.setdefault(repr(kw), real_filler(**kw))
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    ports = []
    for i in range(n):
        fields = variant_fields(DRIFTED if i == drifted else BASE)
        engine = Engine(throughput_model(scenario, fields), fields, 460000, loop)
        app = LabApp(fields, engine, config, scenario.params, "0.5.11")
        app.up = True
        server = loop.run_until_complete(serve(app.handle, "127.0.0.1", 0))
        ports.append(server.sockets[0].getsockname()[1])
    lab_api.Filler = real_filler

    def stdin_closed() -> None:
        if not os.read(sys.stdin.fileno(), 4096):
            loop.stop()

    if stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode):
        loop.add_reader(sys.stdin.fileno(), stdin_closed)
    print(json.dumps({"ports": ports}), flush=True)
    loop.run_forever()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
