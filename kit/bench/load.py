"""The load driver: ``bench`` and ``bench_async`` (warmup, fixed concurrency or Poisson arrivals, recording).

Also what a caller needs around a run: ``resolve_url`` (a target to a URL, through an SSH
port forward when remote), ``run_sync`` (also inside Jupyter's running loop) and
``progress_for`` (a notebook widget or a terminal bar).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit._version import __version__
from kit.errors import BenchError

from .client import (
    Client,
    build_prompts,
    flush_cache,
    model_name,
    one_request,
    payload,
    prefix_reuse,
    server_info,
    unreachable,
)
from .config import API_PATHS, DEFAULT_PORT, READ_BUFSIZE, BenchConfig, RequestResult
from .results import BenchRun, RunWriter
from .server_pages import ServerPages
from .stream import fill_metrics

__all__ = ["TerminalProgress", "bench", "bench_async", "describe_endpoint", "progress_for", "resolve_url", "run_path",
           "run_sync"]


def run_path(cfg: BenchConfig) -> Path:
    """Where a run is written when no ``out`` is given: ``runs/bench-<time>-<api>-c<N>[-<label>].jsonl``."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tag = f"-{cfg.label}" if cfg.label else ""
    return Path("runs") / f"bench-{stamp}-{cfg.api}-c{cfg.concurrency}{tag}.jsonl"


async def bench_async(url: str, config: BenchConfig | None = None, *, out: str | os.PathLike | None = None,
                      progress: Callable[[RequestResult], None] | None = None, endpoint: str | None = None,
                      **options) -> BenchRun:
    """Run the load against ``url`` (``http://host:port``); see :func:`bench` for the options.

    ``endpoint`` names the server in error messages when ``url`` is a local port forward
    (``gpubox port 30000``), so they point at the server, not the tunnel. The server's own
    ``/metrics`` page is read before the first measured request, every
    ``server_metrics_interval`` seconds and after the last, and kept in the run file
    (kit/bench/server_pages.py).
    """
    import aiohttp

    cfg = config or BenchConfig(**options)
    base = url.rstrip("/")
    path = Path(out) if out is not None else run_path(cfg)
    total = cfg.warmup + cfg.requests
    records = build_prompts(cfg, total)
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    where = f"{endpoint} (through the SSH forward {base})" if endpoint else base
    async with aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE,
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        down = await unreachable(session, base, cfg.connect_timeout)
        if down:
            raise BenchError(f"nothing answers at {where}: {down}", hint=_DOWN_HINT)
        model = await model_name(session, base, cfg)
        flushed = await flush_cache(session, base) if cfg.flush_cache else None
        bodies = [json.dumps(payload(cfg, r, model)).encode() for r in records]
        client = Client.make(session, base + API_PATHS[cfg.api], cfg)
        await _warmup(client, bodies[:cfg.warmup], endpoint)
        run = BenchRun(cfg, base, [], _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                       server_info_before=await server_info(base), path=str(path),
                       kit_version=__version__)
        run.prefix_reuse = prefix_reuse(records)
        run.cache_flush = flushed
        pages = ServerPages(session, base, cfg.server_metrics_interval)
        await pages.first()  # before the clock: its time is nobody's wait
        writer = RunWriter(path)
        finished = False
        try:
            run.clock_origin_at = time.time()
            started = run.clock_origin_ns = client.origin_ns = time.perf_counter_ns()
            writer.header(run)
            pages.attach(writer)
            pages.start()
            await _drive(client, bodies[cfg.warmup:], lambda r: _record(run, writer, r, progress))
            run.duration_s = (time.perf_counter_ns() - started) / 1e9
            run.results.sort(key=lambda r: r.index)
            await pages.finish()
            run.server_info_after = await server_info(base)
            finished = True
        finally:
            pages.close()  # the pages are written however the run ended
            run.server_pages, run.server_metrics_problem = pages.pages, pages.problem
            run.server_metrics_failures = pages.failures
            if finished:
                writer.end(run.duration_s, run.server_info_after, pages.failures)
            writer.close()
    if run.results and all(r.error_kind == "connect" for r in run.results):
        path.unlink(missing_ok=True)  # the server went away before the run: no measurement to keep
        raise BenchError(f"no request reached {where}: {run.results[0].error}", hint=_DOWN_HINT)
    return run


_DOWN_HINT = ("start the server, or check the URL and --port (`curl URL/health`); for the lab, `sgl-kit lab status` "
              "says where it runs and `sgl-kit bench lab` finds it there. No run file was written.")


def _record(run: BenchRun, writer: RunWriter, result: RequestResult, progress) -> None:
    run.results.append(result)
    writer.request(result)
    if progress is not None:
        progress(result)


async def _warmup(client: Client, bodies: list[bytes], endpoint: str | None = None) -> None:
    if not bodies:
        return
    client.origin_ns = time.perf_counter_ns()
    done = [item[0] for item in await asyncio.gather(*(one_request(client, b, RequestResult(-1)) for b in bodies))]
    if not any(r.ok for r in done):
        first = done[0]
        where = f"{endpoint} (through the SSH forward {client.url})" if endpoint else str(client.url)
        raise BenchError(f"every warmup request to {where} failed; first: {first.error}",
                         hint="check the URL, --api and --port, and that the server is up (`curl URL/health`; "
                              "for the lab target, `sgl-kit lab up`)")


class _Recorder:
    """Finishes requests (metrics, file line, progress) one per loop turn, behind the network reads.

    In a batched server every stream gets its last chunk in the same step. Doing each
    request's bookkeeping at once would delay the timestamps of the streams still being
    read; one item per turn keeps that delay to one item's cost.
    """

    def __init__(self, on_done) -> None:
        self.on_done = on_done
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.ensure_future(self._run())

    def put(self, item) -> None:
        self.queue.put_nowait(item)

    async def _run(self) -> None:
        while True:
            result, stream, sent, end = await self.queue.get()
            try:
                fill_metrics(result, stream, sent, end)
                self.on_done(result)
            finally:
                self.queue.task_done()
            await asyncio.sleep(0)

    async def close(self) -> None:
        await self.queue.join()
        self.task.cancel()


async def _drive(client: Client, bodies: list[bytes], on_done) -> None:
    """Fixed concurrency: N workers pull the next request. Poisson rate: each starts at its scheduled time."""
    recorder = _Recorder(on_done)
    try:
        await _launch(client, bodies, recorder.put)
    finally:
        await recorder.close()


async def _launch(client: Client, bodies: list[bytes], put) -> None:
    cfg = client.cfg
    if cfg.rate is None:
        queue = iter(enumerate(bodies))

        async def worker() -> None:
            for index, body in queue:
                put(await one_request(client, body, RequestResult(index)))
                await asyncio.sleep(0)  # sending the next one waits behind reads that are already due

        await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, len(bodies)))))
        return
    rng = random.Random(cfg.seed + 1)
    slots = asyncio.Semaphore(cfg.concurrency)
    loop = asyncio.get_running_loop()
    origin = loop.time() - (time.perf_counter_ns() - client.origin_ns) / 1e9
    offset = 0.0

    async def scheduled(index: int, body: bytes, at: float) -> None:
        await asyncio.sleep(max(0.0, origin + at - loop.time()))
        async with slots:
            put(await one_request(client, body, RequestResult(index, scheduled_s=at)))

    tasks = []
    for index, body in enumerate(bodies):
        tasks.append(asyncio.ensure_future(scheduled(index, body, offset)))
        offset += rng.expovariate(cfg.rate)
    await asyncio.gather(*tasks)


def bench(target: Any = "local", *, server: Any = None, port: int | None = None,
          out: str | os.PathLike | None = None, progress: Any = "auto", config: BenchConfig | None = None,
          ssh_options: dict | None = None, **options) -> BenchRun:
    """Benchmark a server: ``bench("http://127.0.0.1:30000", concurrency=8, requests=64)``.

    ``target`` is a URL, a target string (``lab``, ``local``, ``ssh://user@host``, an ssh alias),
    or a :class:`kit.hosts.Host`; for the last two the server's ``port`` on that host is
    used (reached through an SSH port forward when remote; default 30000), and ``lab`` is the
    lab's server wherever it listens (:func:`kit.target.resolve_server`). ``server``, a server
    already found (kit.target.resolve_server), is measured at its URL, through its host's forward.
    ``ssh_options`` go to :func:`kit.target.connect`. Options are the fields of
    :class:`BenchConfig`. ``out`` is the JSONL path (default ``runs/bench-....jsonl``).
    ``progress``: ``"auto"`` (a widget in a notebook, tqdm in a terminal), ``None``, or a
    callable given each finished :class:`RequestResult`. ``kit.bench(...)`` is this function;
    ``sgl-kit bench`` calls it.
    """
    cfg = config or BenchConfig(**options)
    if server is not None:
        url, host, port, opened = server.url, server.host, server.port, False
    else:
        url, host = resolve_url(target, port=port, **(ssh_options or {}))
        opened = host is not None and not isinstance(target, _host_type())
        port = port or _port_of(url)
    bar = progress_for(progress, cfg)
    try:
        return run_sync(bench_async(url, cfg, out=out, progress=bar, endpoint=describe_endpoint(host, port)))
    except BenchError as exc:
        why = host.forward_failure(port or DEFAULT_PORT) if host is not None else None
        if why:  # the forward's own reason beats the HTTP client's "connection reset"
            raise BenchError(f"{exc.message}; the SSH forward: {why}", hint=exc.hint) from None
        raise
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()
        if opened:
            host.close()


def _host_type():
    from kit.hosts import Host

    return Host


def describe_endpoint(host: Any, port: int) -> str | None:
    """``user@gpubox:22 port 30000`` for a server reached through a forward; None for a direct URL."""
    if host is None or getattr(host, "name", "local") == "local":
        return None
    return f"{host.name} port {port}"


def resolve_url(target: Any, *, port: int | None = None, **ssh_options) -> tuple[str, Any]:
    """The HTTP base URL for a target, and the Host that holds any port forward (or None).

    A target kind that names its server by labels (``lab``) is resolved by
    :func:`kit.target.resolve_server`, so the URL is where that server runs (``port``, when given,
    must be its port); for any other target, ``port`` (default 30000) on its host."""
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        return target.rstrip("/"), None
    if port is not None and (not isinstance(port, int) or not 0 < port < 65536):
        raise BenchError(f"port must be 1..65535, not {port!r}", hint="pass the server's --port")
    from kit.target import connect, parse_target, resolve_server, target_kinds

    labelled = isinstance(target, str) and parse_target(target)["kind"] in target_kinds()
    host = target if isinstance(target, _host_type()) else connect(target, **ssh_options)
    if labelled:
        server = resolve_server(host, target, port=port)
        return server.url, host
    local_port = host.forward(DEFAULT_PORT if port is None else port)
    return f"http://127.0.0.1:{local_port}", host


def _port_of(url: str) -> int | None:
    from urllib.parse import urlsplit

    return urlsplit(url).port


def run_sync(coro):
    """asyncio.run, also from inside a running loop (Jupyter), by using a worker thread there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="kit-bench") as pool:
        return pool.submit(asyncio.run, coro).result()


class TerminalProgress:
    """tqdm on stderr; updated when a request finishes, never per chunk."""

    def __init__(self, total: int, desc: str) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="req", file=sys.stderr, dynamic_ncols=True)
        self.failed = 0
        self.tokens = 0
        self.started = time.perf_counter()

    def __call__(self, result: RequestResult) -> None:
        self.failed += not result.ok
        self.tokens += result.output_tokens
        elapsed = time.perf_counter() - self.started
        self.bar.set_postfix(failed=self.failed, tok_s=f"{self.tokens / elapsed:.0f}" if elapsed else "-",
                             refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def progress_for(progress: Any, cfg: BenchConfig):
    """The progress callback for ``progress``: ``"auto"`` picks a notebook widget, tqdm on a terminal, or None."""
    if progress != "auto":
        return progress
    from kit.display import ProgressWidget, in_notebook

    desc = f"bench {cfg.api} c={cfg.concurrency}"
    if in_notebook():
        return ProgressWidget(cfg.requests, desc)
    if sys.stderr.isatty():
        return TerminalProgress(cfg.requests, desc)
    return None
