"""A reference server for measuring benchmark clients: SGLang 0.5.11's streaming formats on an exact schedule.

It answers ``/generate`` (SSE, ``meta_info.completion_tokens`` and, on the last chunk,
``spec_verify_ct``/``spec_accept_length``), ``/v1/chat/completions`` and ``/v1/completions``
(with ``stream_options.include_usage`` and ``continuous_usage_stats``), ``/v1/models``,
``/server_info`` and ``/health``, in the shapes of sglang 0.5.11's ``http_server.py``,
``tokenizer_manager.py``, ``serving_chat.py`` and ``serving_completions.py``.

The schedule is the point. The first chunk goes out ``ttft`` seconds after the request
arrives. Later chunks carry several tokens, like speculative decoding's verify steps
(MTP), and each leaves when its last token is due at exactly ``rate`` tokens per second
counted from the first chunk. So the true decode rate of every request is ``rate``,
whatever the chunking. The server also records when each chunk actually left
(``time.perf_counter_ns``, the same clock as any process on this machine), so a
benchmark can be compared with what really happened, not only with what was planned:
``GET /ref/log``.

A prompt containing ``[[fault:KIND]]`` makes that request misbehave:

- ``500``: answer HTTP 500 before streaming;
- ``disconnect``: stream some chunks, then drop the connection;
- ``stall``: stream some chunks, then send nothing for ``stall_s`` seconds;
- ``malformed``: send an SSE event whose data is cut-off JSON;
- ``backwards``: the token count goes down mid-stream;
- ``nocounts``: omit ``completion_tokens`` / ``usage`` (a server that gives no counts);
- ``finalusage``: OpenAI APIs only: usage only in the final chunk, never continuous;
- ``nodone``: end the stream cleanly after some chunks, without a finish reason or ``[DONE]``;
- ``held``: hold every chunk after the first until the last is due, then send them in one write (as a
  buffering proxy, or a server whose writer fell behind, would): the decode's arrival times are gone.

Run it standalone: ``python tests/reference_server.py --port 0 --rate 62.5``; it prints
``listening on http://127.0.0.1:PORT`` once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from aiohttp import web

FAULT = re.compile(r"\[\[fault:([a-z0-9]+)\]\]")
MODEL = "reference-model"


@dataclass
class Schedule:
    """How the server streams: the true decode rate and the shape of chunks."""

    rate: float = 62.5  # tokens per second after the first chunk
    ttft: float = 0.05  # seconds from arrival to the first chunk
    chunks: tuple[int, ...] = (1, 3, 4, 2, 4, 1, 3)  # decode chunk sizes, cycled (MTP accept lengths)
    first_chunk: int = 1  # tokens in the first chunk (sglang's prefill emits one)
    eos_at: int | None = None  # without ignore_eos, stop after this many tokens
    stall_s: float = 30.0  # how long a ``stall`` fault sends nothing
    fault_after: int = 3  # chunks sent before a mid-stream fault
    incremental: bool = False  # sglang's --incremental-streaming-output


@dataclass
class RequestLog:
    """What the server really did for one request (perf_counter_ns clock)."""

    rid: str
    api: str
    arrived_ns: int
    planned_tokens: int
    fault: str | None
    sent_ns: list[int] = field(default_factory=list)
    sent_tokens: list[int] = field(default_factory=list)  # tokens in each token-bearing chunk

    def to_dict(self) -> dict:
        decode_tokens = sum(self.sent_tokens[1:])
        span = (self.sent_ns[-1] - self.sent_ns[0]) / 1e9 if len(self.sent_ns) > 1 else 0.0
        return {
            "rid": self.rid,
            "api": self.api,
            "arrived_ns": self.arrived_ns,
            "fault": self.fault,
            "planned_tokens": self.planned_tokens,
            "sent_ns": self.sent_ns,
            "sent_tokens": self.sent_tokens,
            "output_tokens": sum(self.sent_tokens),
            "actual_decode_tok_s": decode_tokens / span if span > 0 else None,
        }


class ReferenceServer:
    """The aiohttp application plus its bookkeeping; start it with :meth:`start_in_thread` or ``main``."""

    def __init__(self, schedule: Schedule | None = None, api_key: str | None = None) -> None:
        self.schedule = schedule or Schedule()
        # sglang's /server_info carries every ServerArgs field, its api_key among them (0.5.11 does not mask
        # it); this server only reports it, it does not check requests for it
        self.api_key = api_key
        self.log: list[RequestLog] = []
        self._counter = itertools.count()
        self._verify_total = 0
        self._tokens_total = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # -- app ------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/server_info", self._server_info)
        app.router.add_get("/health", self._health)
        app.router.add_get("/ref/log", self._ref_log)
        app.router.add_post("/ref/reset", self._ref_reset)
        return app

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.port

    def start_in_thread(self) -> ReferenceServer:
        """Serve from a daemon thread with its own event loop (for tests)."""
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True, name="reference-server")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("reference server did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> ReferenceServer:
        return self.start_in_thread()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- small endpoints --------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": MODEL, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                "root": MODEL, "parent": None, "max_model_len": 32768}
        return web.json_response({"object": "list", "data": [card]})

    async def _server_info(self, request: web.Request) -> web.Response:
        s = self.schedule
        lifetime = self._tokens_total / self._verify_total if self._verify_total else None
        return web.json_response({
            "model_path": MODEL, "served_model_name": MODEL, "tp_size": 1,
            "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
            "speculative_num_draft_tokens": 4, "incremental_streaming_output": s.incremental,
            "stream_response_default_include_usage": False,
            "internal_states": [{"avg_spec_accept_length": lifetime, "last_gen_throughput": s.rate}],
            "version": "0.5.11-reference", "api_key": self.api_key, "admin_api_key": None,
            "reference_schedule": {"rate": s.rate, "ttft": s.ttft, "chunks": list(s.chunks),
                                   "first_chunk": s.first_chunk},
        })

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _ref_log(self, request: web.Request) -> web.Response:
        return web.json_response({"schedule": {"rate": self.schedule.rate, "ttft": self.schedule.ttft},
                                  "requests": [r.to_dict() for r in self.log]})

    async def _ref_reset(self, request: web.Request) -> web.Response:
        self.log.clear()
        return web.json_response({"ok": True})

    # -- the schedule -------------------------------------------------------------
    def _plan(self, max_tokens: int, ignore_eos: bool) -> list[int]:
        """Token counts of each chunk for one request; the first is the prefill chunk."""
        s = self.schedule
        total = max(1, int(max_tokens))
        if not ignore_eos and s.eos_at is not None:
            total = min(total, s.eos_at)
        plan = [min(s.first_chunk, total)]
        sizes = itertools.cycle(s.chunks[next(self._counter) % len(s.chunks):] + s.chunks)
        while sum(plan) < total:
            plan.append(min(next(sizes), total - sum(plan)))
        return plan

    async def _stream(self, request: web.Request, api: str, body: dict, prompt: str, max_tokens: int,
                      ignore_eos: bool, render) -> web.StreamResponse:
        """Stream chunks on schedule; ``render(state)`` turns one step into SSE bytes."""
        arrived = time.perf_counter_ns()
        loop = asyncio.get_running_loop()
        t_arrived = loop.time()
        fault = _fault(prompt)
        rid = uuid.uuid4().hex
        plan = self._plan(max_tokens, ignore_eos)
        record = RequestLog(rid, api, arrived, sum(plan), fault)
        self.log.append(record)
        if fault == "500":
            return web.json_response({"object": "error", "message": "reference server: injected failure",
                                      "type": "InternalServerError", "param": None, "code": 500}, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        s = self.schedule
        t_first = t_arrived + s.ttft
        sent = 0
        decode_sent = 0
        held: list[bytes] = []
        for index, tokens in enumerate(plan):
            if index == 0:
                due = t_first
            else:
                decode_sent += tokens
                due = t_first + decode_sent / s.rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            sent += tokens
            final = index == len(plan) - 1
            state = _Step(rid, index, tokens, sent, final, len(plan) - 1, body, prompt, fault, s.incremental)
            if fault in ("disconnect", "stall", "malformed", "nodone") and index == s.fault_after:
                return await self._misbehave(request, response, fault, render, state)
            if fault == "held" and index > 0:
                held.append(render(state))
                record.sent_tokens.append(tokens)
                if final:
                    await response.write(b"".join(held))
                    record.sent_ns += [time.perf_counter_ns()] * len(held)
                continue
            await response.write(render(state))
            record.sent_ns.append(time.perf_counter_ns())
            record.sent_tokens.append(tokens)
        self._verify_total += len(plan) - 1
        self._tokens_total += sent
        trailer = render(_Step(rid, -1, 0, sent, True, len(plan) - 1, body, prompt, fault, s.incremental))
        if trailer:  # an empty write would end the chunked body early
            await response.write(trailer)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _misbehave(self, request, response, fault: str, render, state) -> web.StreamResponse:
        if fault == "disconnect":
            # Drop the TCP connection with the chunked body unfinished, as a crashed server would.
            request.transport.abort()
            return response
        if fault == "stall":
            await asyncio.sleep(self.schedule.stall_s)
            request.transport.abort()
            return response
        if fault == "nodone":
            await response.write_eof()  # a clean end, but before the server said it was done
            return response
        await response.write(b'data: {"text": "cut", "meta_info": {"completion_tok\n\n')
        await response.write(render(state))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # -- the three streaming APIs ---------------------------------------------------
    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        params = body.get("sampling_params") or {}
        prompt = body.get("text") if isinstance(body.get("text"), str) else ""
        if not body.get("stream"):
            return web.json_response({"error": {"message": "the reference server only streams"}}, status=400)
        return await self._stream(request, "generate", body, prompt, params.get("max_new_tokens", 128),
                                  bool(params.get("ignore_eos")), _render_generate)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") or []
        prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        return await self._stream(request, "chat", body, prompt, _openai_max(body), bool(body.get("ignore_eos")),
                                  _render_chat)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt") if isinstance(body.get("prompt"), str) else ""
        return await self._stream(request, "completions", body, prompt, _openai_max(body),
                                  bool(body.get("ignore_eos")), _render_completions)


@dataclass
class _Step:
    rid: str
    index: int  # -1: the trailer after the last token chunk
    tokens: int
    sent: int  # cumulative completion tokens
    final: bool
    verify_ct: int
    body: dict
    prompt: str
    fault: str | None
    incremental: bool

    def count(self) -> int:
        # The "backwards" fault reports a smaller total once, mid-stream.
        if self.fault == "backwards" and self.index == 3:
            return max(0, self.sent - self.tokens - 2)
        return self.sent


def _fault(prompt: str) -> str | None:
    match = FAULT.search(prompt or "")
    return match.group(1) if match else None


def _openai_max(body: dict) -> int:
    return body.get("max_completion_tokens") or body.get("max_tokens") or 128


def _word(i: int) -> str:
    return f" t{i}"


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _render_generate(step: _Step) -> bytes:
    if step.index < 0:
        return b""  # /generate has no trailer: the last chunk carries finish_reason
    first = step.sent - step.tokens
    new_ids = list(range(1000 + first, 1000 + step.sent))
    meta = {"id": step.rid, "finish_reason": None, "prompt_tokens": max(1, len(step.prompt) // 4),
            "weight_version": "default", "total_retractions": 0}
    if step.fault != "nocounts":
        meta.update({"reasoning_tokens": 0, "completion_tokens": step.count(), "cached_tokens": 0})
    if step.final:
        meta["finish_reason"] = {"type": "length", "length": step.sent}
        meta["e2e_latency"] = 0.0
        if step.verify_ct and step.fault != "nocounts":
            meta.update({"spec_accept_rate": (step.sent - step.verify_ct) / (3 * step.verify_ct),
                         "spec_accept_length": step.sent / step.verify_ct,
                         "spec_accepted_drafts": step.sent - step.verify_ct,
                         "spec_proposed_drafts": 3 * step.verify_ct,
                         "spec_verify_ct": step.verify_ct})
    if step.incremental:
        text = "".join(_word(i) for i in range(first, step.sent))
        ids = new_ids
    else:
        text = "".join(_word(i) for i in range(step.sent))
        ids = list(range(1000, 1000 + step.sent))
    return _sse({"text": text, "output_ids": ids, "meta_info": meta})


def _usage(step: _Step) -> dict:
    prompt_tokens = max(1, len(step.prompt) // 4)
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + step.count(),
            "completion_tokens": step.count(), "prompt_tokens_details": None, "reasoning_tokens": 0}


def _usage_wanted(step: _Step) -> tuple[bool, bool]:
    options = step.body.get("stream_options") or {}
    include, continuous = bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))
    if step.fault == "nocounts":
        return False, False
    if step.fault == "finalusage":
        return include or continuous, False
    return include, continuous


def _chat_chunk(step: _Step, delta: dict, finish: str | None, usage: dict | None) -> bytes:
    choice = {"index": 0, "delta": {"reasoning_content": None, **delta}, "logprobs": None,
              "finish_reason": finish, "matched_stop": None}
    chunk = {"id": step.rid, "object": "chat.completion.chunk", "created": int(time.time()),
             "model": step.body.get("model", MODEL), "choices": [choice]}
    if usage is not None:
        chunk["usage"] = usage
    return _sse(chunk)


def _render_chat(step: _Step) -> bytes:
    include, continuous = _usage_wanted(step)
    if step.index < 0:
        out = _chat_chunk(step, {}, "length", None)
        if include:
            out += _sse({"id": step.rid, "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": step.body.get("model", MODEL), "choices": [], "usage": _usage(step)})
        return out
    first = step.sent - step.tokens
    out = b""
    if step.index == 0:
        out += _chat_chunk(step, {"role": "assistant", "content": ""}, None, None)
    text = "".join(_word(i) for i in range(first, step.sent))
    return out + _chat_chunk(step, {"content": text}, None, _usage(step) if continuous else None)


def _render_completions(step: _Step) -> bytes:
    include, continuous = _usage_wanted(step)
    if step.index < 0:
        if not include:
            return b""
        return _sse({"id": step.rid, "object": "text_completion", "created": int(time.time()),
                     "model": step.body.get("model", MODEL), "choices": [], "usage": _usage(step)})
    first = step.sent - step.tokens
    choice = {"index": 0, "text": "".join(_word(i) for i in range(first, step.sent)), "logprobs": None,
              "finish_reason": "length" if step.final else None, "matched_stop": None}
    return _sse({"id": step.rid, "object": "text_completion", "created": int(time.time()),
                 "model": step.body.get("model", MODEL), "choices": [choice],
                 "usage": _usage(step) if continuous else None})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=float, default=Schedule.rate)
    parser.add_argument("--ttft", type=float, default=Schedule.ttft)
    parser.add_argument("--chunks", default=",".join(map(str, Schedule.chunks)),
                        help="decode chunk sizes, cycled (default: %(default)s)")
    parser.add_argument("--first-chunk", type=int, default=1)
    parser.add_argument("--eos-at", type=int, default=None)
    parser.add_argument("--incremental", action="store_true")
    parser.add_argument("--api-key", default=None, help="reported in /server_info (not checked)")
    args = parser.parse_args(argv)
    schedule = Schedule(rate=args.rate, ttft=args.ttft, chunks=tuple(int(c) for c in args.chunks.split(",")),
                        first_chunk=args.first_chunk, eos_at=args.eos_at, incremental=args.incremental)
    server = ReferenceServer(schedule, api_key=args.api_key)

    async def serve() -> None:
        port = await server.start(args.port)
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
