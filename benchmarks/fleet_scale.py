"""How long `fleet args` takes to read many replicas: one by one, against fanned out.

N lab stand-ins (sglang's HTTP API from ``kit.lab``: ``/server_info``, ``/metrics``, ...) listen on
loopback, all in ONE helper process (this file run with ``--serve``) so that the process measuring is not
the one answering. All run the incident's ``new`` launch but one, which runs ``fixed`` (4 launch fields
differ): the drift must list that replica first. Every member is HTTP only (no process read, no hardware),
so each replica costs one ``GET /server_info`` and its parsing.

Measured, each the median of ``--repeat`` runs, seconds from start to answer:

- one by one: the same question per replica, one after the other -- the CLI ``sgl-kit fleet args URL
  --http-only`` as one process per replica when the CLI has ``fleet`` (else ``fleet_args`` of a one-member
  fleet per replica, in this process), and in this process ``fleet_args(fleet, concurrency=1)``;
- fan-out: one ``sgl-kit fleet args URL1 ... URLN --http-only --concurrency 8`` (when the CLI has it) and,
  in this process, ``fleet_args(fleet, concurrency=8)`` and ``16``.

Loopback adds no network delay, so there the reading process's CPU is the limit (the ``cpu s``
column: this process's, or the CLI processes'). Real replicas are a network round trip away; a second table
(``--latency-ms``, default 50, 0 to skip) asks the same stand-ins on second ports whose answers are held
that long, which is what fanning out saves. Printed: seconds, replicas/s, failures, and whether the
drifted replica is listed first (exit 1 if it is not, in any run that compares all replicas). The helper is
stopped at exit, on Ctrl-C too.

    .venv/bin/python benchmarks/fleet_scale.py [--replicas 64] [--repeat 1] [--latency-ms 50] [--no-cli-each]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASE, DRIFTED = "new", "fixed"  # the incident's launches (kit/data/resolved); they differ in 4 launch fields


# -- the helper process: N stand-ins on one event loop -------------------------------------------------

def _serve(n: int, drifted: int, latency_ms: float) -> None:
    """Serve ``n`` lab stand-ins on 127.0.0.1 (free ports), replica ``drifted`` from another launch, each
    also on a second port whose answers are held ``latency_ms`` (when > 0); print ``{"ports": [...],
    "far_ports": [...]}`` as one line, then serve until SIGTERM or until stdin closes (the parent is gone)."""
    import asyncio

    import kit
    import kit.lab.api as lab_api
    from kit.lab.api import LabApp
    from kit.lab.engine import Engine
    from kit.lab.http import new_event_loop, serve
    from kit.lab.launches import load_launches
    from kit.lab.throughput import load_scenario, throughput_model

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops this process
    launches = {x.variant: dict(x.fields) for x in load_launches("0.5.11")}
    scenario = load_scenario("incident")
    config = json.loads((Path(kit.__file__).parent / "data" / "lab" / "Qwen3.6-27B" / "config.json").read_text())
    # The filler text (read-only, ~20 MB and 0.15 s each) is shared: one per process, not per stand-in.
    fillers: dict = {}
    real_filler = lab_api.Filler
    lab_api.Filler = lambda **kw: fillers.get(repr(kw)) or fillers.setdefault(repr(kw), real_filler(**kw))
    loop = new_event_loop()
    asyncio.set_event_loop(loop)

    def held(handle):
        def answer_later(req, conn):
            response = handle(req, conn)
            if response is not None:
                conn.hold()
                loop.call_later(latency_ms / 1000, conn.respond, req, response)
            return None
        return answer_later

    def listen(handle) -> int:
        return loop.run_until_complete(serve(handle, "127.0.0.1", 0)).sockets[0].getsockname()[1]

    ports, far_ports = [], []
    for i in range(n):
        fields = launches[DRIFTED if i == drifted else BASE]
        engine = Engine(throughput_model(scenario, fields), fields, 460000, loop)  # as tests' AppServer does
        app = LabApp(fields, engine, config, scenario.params, "0.5.11")
        app.up = True
        ports.append(listen(app.handle))
        if latency_ms > 0:
            far_ports.append(listen(held(app.handle)))
    lab_api.Filler = real_filler

    def stdin_closed() -> None:
        if not os.read(sys.stdin.fileno(), 4096):
            loop.stop()

    if stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode):  # started by start_helper: stdin is its pipe
        loop.add_reader(sys.stdin.fileno(), stdin_closed)
    print(json.dumps({"ports": ports, "far_ports": far_ports, "drifted": drifted}), flush=True)
    loop.run_forever()


def start_helper(n: int, drifted: int, latency_ms: float) -> tuple[subprocess.Popen, dict]:
    """The helper process and what it printed (its ports in replica order)."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", str(n), "--drifted",
                             str(drifted), "--latency-ms", str(latency_ms)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        stop_helper(proc)
        raise SystemExit(f"the helper process ended before serving (exit {proc.returncode})")
    return proc, json.loads(line)


def stop_helper(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    for stream in (proc.stdin, proc.stdout):
        if stream:
            stream.close()


# -- the measurements -----------------------------------------------------------------------------------

def _cli() -> list[str] | None:
    """``sgl-kit`` when it has ``fleet args ... --http-only`` (the owner was still adding it), else None."""
    exe = ROOT / ".venv" / "bin" / "sgl-kit"
    cmd = [str(exe)] if exe.exists() else [shutil.which("sgl-kit") or ""]
    if not cmd[0]:
        return None
    res = subprocess.run([*cmd, "fleet", "args", "--help"], capture_output=True, text=True, timeout=60)
    return cmd if res.returncode == 0 and "--http-only" in res.stdout else None


def _first_named(text: str, names: list[str]) -> str | None:
    """The replica whose name appears first in ``text`` (a name not followed by another digit)."""
    best = None
    for name in names:
        hit = re.search(re.escape(name) + r"(?!\d)", text)
        if hit and (best is None or hit.start() < best[0]):
            best = (hit.start(), name)
    return best[1] if best else None


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def run_api(fleet, concurrency: int) -> dict:
    from kit.fleet import fleet_args

    t0, c0 = time.perf_counter(), time.process_time()
    res = fleet_args(fleet, concurrency=concurrency, timeout=60, hardware=False, progress=None)
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
            "failures": len(res.run.failures), "answered": len(res.run.results),
            "first": res.drift.order()[0] if res.drift.facts else None}


def run_api_each(fleet) -> dict:
    """A one-member fleet per replica, one after the other (no drift: each run sees one replica)."""
    from kit.fleet import Fleet, fleet_args

    t0, c0 = time.perf_counter(), time.process_time()
    answered = failures = 0
    for m in fleet.members:
        res = fleet_args(Fleet([m]), concurrency=1, timeout=60, hardware=False, progress=None)
        answered += len(res.run.results)
        failures += len(res.run.failures)
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "failures": failures,
            "answered": answered, "first": None}


def run_cli_each(cli: list[str], fleet) -> dict:
    t0, c0 = time.perf_counter(), _children_cpu()
    failures = 0
    for m in fleet.members:
        res = subprocess.run([*cli, "fleet", "args", m.url, "--http-only"], capture_output=True, text=True,
                             timeout=120)
        failures += res.returncode != 0 or bool(re.search(r"^\s*! ", res.stdout, flags=re.M))
    return {"seconds": time.perf_counter() - t0, "cpu": _children_cpu() - c0, "failures": failures,
            "answered": len(fleet) - failures, "first": None}


def run_cli_fanout(cli: list[str], fleet, concurrency: int) -> dict:
    t0, c0 = time.perf_counter(), _children_cpu()
    res = subprocess.run([*cli, "fleet", "args", *[m.url for m in fleet.members], "--http-only",
                          "--concurrency", str(concurrency)], capture_output=True, text=True, timeout=300)
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - c0
    failed = len(re.findall(r"^\s*! ", res.stdout, flags=re.M))  # the summary's "  ! replica: why" lines
    if res.returncode != 0 and not failed:
        failed = len(fleet)
        sys.stderr.write(f"sgl-kit fleet args exited {res.returncode}:\n{res.stderr[-2000:]}\n")
    return {"seconds": seconds, "cpu": cpu, "failures": failed, "answered": len(fleet) - failed,
            "first": _first_named(res.stdout, fleet.names())}


def measure(ways: list, repeat: int, n: int, want: str) -> list[dict]:
    rows = []
    for kind, how, conc, fn in ways:
        runs = [fn() for _ in range(repeat)]
        secs = statistics.median(r["seconds"] for r in runs)
        firsts = {r["first"] for r in runs}
        rows.append({"kind": kind, "how": how, "conc": conc, "seconds": secs, "rate": n / secs,
                     "cpu": statistics.median(r["cpu"] for r in runs),
                     "failures": max(r["failures"] for r in runs), "answered": min(r["answered"] for r in runs),
                     "first": None if firsts == {None} else firsts == {want}})
    return rows


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'way':<11} {'how':<28} {'conc':>4} {'seconds':>8} {'replicas/s':>10} {'cpu s':>6} {'answered':>8} "
          f"{'failures':>8}  {'x':>6}  drifted first")
    base = rows[0]["seconds"]
    for r in rows:
        first = "n/a (one replica a run)" if r["first"] is None else "yes" if r["first"] else "NO"
        print(f"{r['kind']:<11} {r['how']:<28} {r['conc']:>4} {r['seconds']:>8.2f} {r['rate']:>10.1f} "
              f"{r['cpu']:>6.2f} {r['answered']:>8} {r['failures']:>8}  {base / r['seconds']:>5.1f}x  {first}")


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each way; the median is printed")
    ap.add_argument("--latency-ms", type=float, default=50.0,
                    help="a second table with each answer held this long (0: loopback only)")
    ap.add_argument("--no-cli-each", action="store_true",
                    help="skip the CLI-process-per-replica row (about 0.8 s of CPU per replica; the longest "
                         "part of the run): time a one-member fleet_args per replica instead")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--drifted", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        _serve(args.serve, args.drifted, args.latency_ms)
        return 0
    if args.replicas < 3:
        ap.error("--replicas must be 3 or more (one of them drifts from the majority)")
    if args.repeat < 1:
        ap.error("--repeat must be 1 or more")

    from kit.fleet import Fleet, Member, fleet_args

    n = args.replicas
    drifted = (2 * n) // 3  # not first in the listing, so "first in the drift" means the drift put it there
    started = time.perf_counter()
    proc, served = start_helper(n, drifted, args.latency_ms)
    signal.signal(signal.SIGTERM, _interrupt)  # a CI's timeout stops the helper too (the finally below)
    try:
        def fleet_of(ports: list[int]) -> Fleet:
            return Fleet([Member(name=f"127.0.0.1:{p}", url=f"http://127.0.0.1:{p}", target=None, port=p)
                          for p in ports])

        fleet = fleet_of(served["ports"])
        want = fleet.members[drifted].name
        cli = _cli()
        print(f"{n} stand-ins up in {time.perf_counter() - started:.1f} s in one helper process (pid {proc.pid})")
        print(f"replicas {n}, all HTTP only; drifted: replica {drifted + 1}, {want} (launch {DRIFTED!r}, the "
              f"others {BASE!r}); cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}; repeat "
              f"{args.repeat} (median); Python {sys.version.split()[0]}")
        print("CLI: " + (f"{cli[0]} fleet args ... --http-only" if cli else
                         "`sgl-kit fleet args` not there: the first row times fleet_args of a one-member "
                         "fleet per replica in this process instead"))
        # the imports fleet_args makes on first use, not timed in the first row
        fleet_args(Fleet(fleet.members[:1]), concurrency=1, timeout=60, hardware=False, progress=None)

        def ways_for(f: Fleet, per_process: bool) -> list:
            ways = []
            if cli and per_process and not args.no_cli_each:
                ways.append(("one by one", "CLI, a process per replica", 1, lambda: run_cli_each(cli, f)))
            else:
                ways.append(("one by one", "API, a 1-member fleet each", 1, lambda: run_api_each(f)))
            ways.append(("one by one", "API fleet_args", 1, lambda: run_api(f, 1)))
            if cli:
                ways.append(("fan-out", "CLI, one process", 8, lambda: run_cli_fanout(cli, f, 8)))
            ways.append(("fan-out", "API fleet_args", 8, lambda: run_api(f, 8)))
            ways.append(("fan-out", "API fleet_args", 16, lambda: run_api(f, 16)))
            return ways

        tables = [("loopback (no network delay)", measure(ways_for(fleet, True), args.repeat, n, want))]
        if served["far_ports"]:
            far = fleet_of(served["far_ports"])
            tables.append((f"each answer held {args.latency_ms:g} ms (a replica a round trip away)",
                           measure(ways_for(far, False), args.repeat, n, far.members[drifted].name)))
        for title, rows in tables:
            print_table(title, rows)
        print(f"\nx: speed-up over the table's first row; cpu s: this process's CPU time (CLI rows: the CLI "
              f"processes'); whole run {time.perf_counter() - started:.1f} s")
        bad = [(title, r) for title, rows in tables for r in rows if r["first"] is False]
        if bad:
            print("FAIL: the drifted replica was not listed first in: "
                  + "; ".join(f"{title}: {r['how']} x{r['conc']}" for title, r in bad))
            return 1
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_helper(proc)


if __name__ == "__main__":
    sys.exit(main())
