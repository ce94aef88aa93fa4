"""``python -m kit.lab.launch_server <sglang flags>``: the lab's stand-in for sglang's server.

Started the way ``python -m sglang.launch_server`` is, with the same flags. It reads them
with the flag table of the real sglang source installed next to it, resolves them the way
that sglang would (the dry-run, or committed snapshots of it), logs in sglang's format,
and answers sglang's HTTP API with tokens at the speed of the scenario's throughput model
(``$SGL_KIT_LAB_SCENARIO``, default ``incident``). It runs no model and needs no GPU.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path

from kit.errors import KitError, ModelConfigError
from kit.server_args import format_server_args

from .api import LabApp
from .engine import Engine
from .http import new_event_loop, serve
from .launches import LabArgsError, LaunchArgs, effective_args_for, sglang_source
from .throughput import custom_all_reduce_runs, load_scenario, prefill_replay, throughput_model

log = logging.getLogger("kit.lab")
PROG = "launch_server.py"


class _UvicornFormatter(logging.Formatter):
    """uvicorn's `[time] INFO:     message`, as sglang configures it."""

    def format(self, record: logging.LogRecord) -> str:
        record.levelprefix = (record.levelname + ":").ljust(9)
        return super().format(record)


class _LogWriter:
    """Log lines go to stdout from a thread, so a slow disk never stalls token emission.

    Writing a line costs a system call, and on a machine busy writing to disk a write can
    block for tens of milliseconds. Formatting stays on the event loop; the bytes go to a
    queue that a background thread writes to file descriptor 1 in batches.
    """

    def __init__(self) -> None:
        self.lines: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._drain, name="lab-log", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            batch = [self.lines.get()]
            while True:
                try:
                    batch.append(self.lines.get_nowait())
                except queue.Empty:
                    break
            if None in batch:
                self._write([b for b in batch if b is not None])
                return
            self._write(batch)

    @staticmethod
    def _write(batch: list[str]) -> None:
        data = memoryview("".join(batch).encode("utf-8", "replace"))
        while data:
            data = data[os.write(1, data):]

    def close(self) -> None:
        self.lines.put(None)
        self.thread.join(5)


def _configure_logging(level: str) -> _LogWriter:
    # Log records here need no caller, thread or process: skipping them (the logging
    # HOWTO's "Optimization") halves the cost of the per-request access and prefill lines.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    writer = _LogWriter()
    datefmt = "%Y-%m-%d %H:%M:%S"
    formatters = {logging.getLogger(): logging.Formatter("[%(asctime)s] %(message)s", datefmt=datefmt),
                  logging.getLogger("kit.lab.scheduler"): logging.Formatter("[%(asctime)s TP0] %(message)s",
                                                                            datefmt=datefmt),
                  logging.getLogger("uvicorn"): _UvicornFormatter("[%(asctime)s] %(levelprefix)s %(message)s",
                                                                  datefmt=datefmt)}
    for logger, formatter in formatters.items():
        handler = _FormattedBy(writer, formatter)
        logger.handlers[:] = [handler]
        logger.propagate = logger is logging.getLogger()
    logging.getLogger().setLevel(getattr(logging, str(level).upper(), logging.INFO))
    return writer


class _FormattedBy(logging.Handler):
    """One logger's format, writing through the shared writer thread."""

    def __init__(self, writer: _LogWriter, formatter: logging.Formatter) -> None:
        super().__init__()
        self.writer = writer
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.lines.put(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def _model_config(fields: dict) -> dict:
    path = Path(str(fields.get("model_path"))) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"cannot read the model's config.json at {path}: {exc}",
                               hint="the lab serves a local model directory holding a config.json "
                                    "(sgl-kit lab up writes one under models/)") from None


def _startup_lines(resolution: LaunchArgs, fields: dict, scenario, model, version: str, config: dict,
                   chain=None) -> None:
    how = ("the dry-run" if resolution.method == "dry-run"
           else f"the dry-run's snapshot of the {resolution.variant!r} launch ({Path(resolution.source).name})")
    log.info(f"sgl-kit lab: a stand-in for sglang {version}. Arguments resolved by {how}. Tokens come from "
             f"the throughput model {scenario.name!r} ({model.expected_tok_s():.1f} tok/s for one stream): "
             f"a model, not a measurement. No GPU is used.")
    log.info(f"sglang version: {version}")
    log.info("server_args=" + format_server_args(fields))
    # The startup lines of a real 0.5.11 server on two A6000s, with that box's figures:
    # the first line above already says that no weights were loaded here.
    sched = logging.getLogger("kit.lab.scheduler")
    arch = (config.get("architectures") or ["?"])[0]
    sched.info("Init torch distributed begin.")
    sched.info("Load weight begin. avail mem=46.85 GB")
    sched.info(f"Load weight end. elapsed=61.37 s, type={arch}, dtype=torch.bfloat16, avail mem=21.30 GB, "
               f"mem usage=25.55 GB.")
    sched.info(f"max_total_num_tokens={scenario.params['model'].get('max_total_num_tokens', 460000)}, "
               f"chunked_prefill_size={fields.get('chunked_prefill_size')}, "
               f"max_prefill_tokens={fields.get('max_prefill_tokens')}, "
               f"max_running_requests={model.max_running}, "
               f"context_len={fields.get('context_length') or scenario.params['model']['context_length']}, "
               f"available_gpu_mem=6.35 GB")
    if model.piecewise_cuda_graph:
        # the lines real sglang logs when it captures the prefill graph (model_runner.init_piecewise_cuda_graphs),
        # with the stand-in's own figures: it captures nothing
        sched.info("Capture piecewise CUDA graph begin. avail mem=6.35 GB")
        sched.info("Capture piecewise CUDA graph end. Time elapsed: 0.00 s. mem usage=0.00 GB. avail mem=6.35 GB.")
        if model.prefill_graph_replays is False and chain is not None and chain.blocking is not None:
            log.info(f"sgl-kit lab: the prefill graph is captured but its gate refuses every prefill batch of this "
                     f"launch, so prefill runs eagerly ({chain.blocking.where}: `{chain.blocking.text}`)")


def _quiet_gc(loop: asyncio.AbstractEventLoop) -> None:
    """Keep garbage collection from stalling token emission.

    A full collection over the startup objects takes tens of milliseconds, far beyond the
    lab's one-millisecond emission budget. They are frozen out of collection, automatic
    collection is off, and young objects are collected on a short timer instead (a pause
    well under a millisecond), with a full pass once a minute.
    """
    gc.collect()
    gc.freeze()
    gc.disable()
    ticks = 0

    def collect() -> None:
        nonlocal ticks
        ticks += 1
        gc.collect(2 if ticks % 120 == 0 else 0)
        loop.call_later(0.5, collect)

    loop.call_later(0.5, collect)


def _raise_priority() -> str:
    """Ask the OS to run the lab as soon as a timer fires; emitting on time is its job.

    The lab's CPU use is modest, but on a busy machine a chunk is late mostly because the
    process waits for a core after its timer fires. With the privilege (root or
    CAP_SYS_NICE) it takes the lowest real-time round-robin priority, which the kernel
    caps at 95% of a core; else a nice value of -10; else nothing changes. Threads started
    later (the log writer) inherit it, so none of them holds the GIL while preempted.
    ``SGL_KIT_LAB_SCHED`` = ``rr`` (default), ``nice`` or ``none`` chooses.
    """
    wanted = os.environ.get("SGL_KIT_LAB_SCHED", "rr").lower()
    if wanted == "rr":
        try:
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
            return "SCHED_RR 1"
        except (OSError, AttributeError):
            pass
    if wanted in ("rr", "nice"):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -10)
            return "nice -10"
        except OSError:
            pass
    return "normal"


async def _run(app: LabApp, fields: dict) -> int:
    uvicorn = logging.getLogger("uvicorn.error")
    host, port = str(fields.get("host") or "127.0.0.1"), int(fields.get("port") or 30000)
    try:
        server = await serve(app.handle, host, port)
    except OSError as exc:
        uvicorn.error(f"[Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): "
                      f"{(exc.strerror or str(exc)).lower()}")
        return 1
    uvicorn.info(f"Started server process [{os.getpid()}]")
    uvicorn.info("Waiting for application startup.")
    uvicorn.info("Application startup complete.")
    uvicorn.info(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await asyncio.sleep(0.05)  # sglang's warmup request: the server is reachable but not yet healthy
    _quiet_gc(loop)
    app.up = True
    log.info("The server is fired up and ready to roll!")
    await stop.wait()
    uvicorn.info("Shutting down")
    server.close()
    for gen in list(app.engine.running) + list(app.engine.waiting):
        app.engine.cancel(gen)
    uvicorn.info(f"Finished server process [{os.getpid()}]")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        tree = sglang_source()
        resolution = effective_args_for(argv, tree)
        fields = resolution.fields
        scenario = load_scenario()
        config = _model_config(fields)
        replays, chain = prefill_replay(tree.root, fields, config)
        custom_ar = custom_all_reduce_runs(tree.root, scenario, fields) if scenario.params.get("allreduce") else None
        model = throughput_model(scenario, fields, prefill_replays=replays, custom_all_reduce=custom_ar)
    except (LabArgsError, KitError) as exc:
        sys.stderr.write(f"{PROG}: error: {exc.message}\n" + (f"  -> {exc.hint}\n" if exc.hint else ""))
        return 2
    scheduling = _raise_priority()  # before the log thread starts, so that it shares the priority
    writer = _configure_logging(str(fields.get("log_level") or "info"))
    version = tree.version or "?"
    _startup_lines(resolution, fields, scenario, model, version, config, chain)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    max_tokens = int(scenario.params["model"].get("max_total_num_tokens", 460000))
    engine = Engine(model, fields, max_tokens, loop)
    app = LabApp(fields, engine, config, scenario.params, version)
    app.scheduling = scheduling
    started = time.monotonic()
    try:
        return loop.run_until_complete(_run(app, fields))
    finally:
        log.debug("lab server ran for %.1f s", time.monotonic() - started)
        writer.close()
        loop.close()


if __name__ == "__main__":
    sys.exit(main())
