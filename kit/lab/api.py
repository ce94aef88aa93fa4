"""sglang 0.5.11's HTTP API, answered by the lab.

Formats follow the 0.5.11 source: ``srt/entrypoints/http_server.py`` (routes, health,
server_info, flush_cache), ``srt/managers/tokenizer_manager.py`` (the ``/generate`` output
and its ``meta_info``) and ``srt/entrypoints/openai/serving_chat.py`` /
``serving_completions.py`` (the OpenAI stream chunks and usage). JSON is compact, as
orjson writes it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .engine import Engine, Filler, Generation
from .http import Connection, Request, Response, json_response
from .metrics import prometheus_text

__all__ = ["LabApp"]

_DONE = b"data: [DONE]\n\n"
_FLUSHED = (b"Cache flushed.\nPlease check backend logs for more details. (When there are running or "
            b"waiting requests, the operation will not be performed.)\n")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def _bad_request(message: str, status: int = 400) -> Response:
    return json_response({"object": "error", "message": message, "type": "Bad Request", "param": None,
                          "code": status}, status)


@dataclass
class _Ask:
    """What a request asks for, whatever API it came through."""

    prompt: bytes
    prompt_tokens: int
    max_new_tokens: int | None
    ignore_eos: bool
    stream: bool
    rid: str


class LabApp:
    """Routes and formats; the timing lives in :class:`kit.lab.engine.Engine`."""

    def __init__(self, fields: Mapping[str, Any], engine: Engine, model_config: Mapping[str, Any],
                 scenario_params: Mapping[str, Any], version: str) -> None:
        self.fields = dict(fields)
        self.engine = engine
        self.model_config = model_config
        self.params = scenario_params
        self.version = version
        self.filler = Filler(vocab_size=int(scenario_params.get("model", {}).get("vocab_size", 248320)))
        self.up = False
        self.scheduling = "normal"  # the OS scheduling the server got (launch_server._raise_priority)
        self.served = str(fields.get("served_model_name") or fields.get("model_path"))
        self.context_len = int(fields.get("context_length") or scenario_params["model"]["context_length"])
        self.eos = int(scenario_params["model"].get("eos_token_id", 2))
        self.natural = scenario_params.get("natural_output_tokens") or [160, 640]
        self.weight_version = fields.get("weight_version") or "default"
        self.routes: dict[str, tuple[tuple[str, ...], Callable]] = {
            "/health": (("GET",), self.health),
            "/health_generate": (("GET",), self.health_generate),
            "/model_info": (("GET",), self.model_info),
            "/get_model_info": (("GET",), self.model_info),
            "/server_info": (("GET",), self.server_info),
            "/get_server_info": (("GET",), self.server_info),
            "/v1/models": (("GET",), self.models),
            "/flush_cache": (("GET", "POST"), self.flush_cache),
            "/generate": (("POST", "PUT"), self.generate),
            "/v1/chat/completions": (("POST",), self.chat),
            "/v1/completions": (("POST",), self.completions),
            "/metrics": (("GET",), self.metrics),
            "/lab/stats": (("GET",), self.lab_stats),
        }

    # -- routing ------------------------------------------------------------
    def handle(self, req: Request, conn: Connection) -> Response | None:
        self.engine.catch_up()
        route = self.routes.get(req.path)
        if route is None and req.path.startswith("/v1/models/"):
            return self.model_card(req.path[len("/v1/models/"):])
        if route is None or (req.path == "/metrics" and not self.fields.get("enable_metrics")):
            return json_response({"detail": "Not Found"}, 404)
        methods, func = route
        if req.method not in methods:
            return json_response({"detail": "Method Not Allowed"}, 405)
        return func(req, conn)

    # -- simple endpoints ---------------------------------------------------
    def health(self, req: Request, conn: Connection) -> Response | None:
        # http_server.py:508-527: Response(status_code=...), an empty body and no content-type
        return Response(200 if self.up else 503, b"", "")

    def health_generate(self, req: Request, conn: Connection) -> Response | None:
        if not self.up:
            return Response(503, b"", "")
        conn.hold()
        sink = _HealthSink(req, conn)
        self._run(_Ask(b"", 1, 1, True, False, f"HEALTH_CHECK_{time.time()}"), sink, conn)
        return None

    def model_info(self, req: Request, conn: Connection) -> Response:
        cfg = self.model_config
        vision = "vision_config" in cfg
        return json_response({
            "model_path": self.fields.get("model_path"), "tokenizer_path": self.fields.get("tokenizer_path"),
            "is_generation": True, "preferred_sampling_params": self.fields.get("preferred_sampling_params"),
            "weight_version": self.weight_version, "has_image_understanding": vision,
            "has_audio_understanding": "audio_config" in cfg, "model_type": cfg.get("model_type"),
            "architectures": cfg.get("architectures"),
        })

    def server_info(self, req: Request, conn: Connection) -> Response:
        state = dict(self.fields)
        state["last_gen_throughput"] = self.engine.last_gen_throughput
        # Figures a real server on two A6000s would report (GB); the lab itself holds no GPU memory.
        state["memory_usage"] = {"weight": 25.55, "kvcache": 14.2, "token_capacity": self.engine.max_total_tokens,
                                 "graph": 0.61}
        state["effective_max_running_requests_per_dp"] = self.engine.model.max_running
        accept = self.engine.avg_spec_accept_length()
        if self.fields.get("speculative_algorithm") and accept is not None:
            state["avg_spec_accept_length"] = accept
        return json_response({**self.fields, "status": "ready", "max_total_num_tokens": self.engine.max_total_tokens,
                              "max_req_input_len": self.context_len - 1, "internal_states": [state],
                              "version": self.version})

    def models(self, req: Request, conn: Connection) -> Response:
        return json_response({"object": "list", "data": [self._card(self.served)]})

    def model_card(self, name: str) -> Response:
        if name != self.served:
            return json_response({"error": {"message": f"The model '{name}' does not exist",
                                            "type": "invalid_request_error", "param": "model",
                                            "code": "model_not_found"}}, 404)
        return json_response(self._card(name))

    def _card(self, name: str) -> dict:
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name,
                "parent": None, "max_model_len": self.context_len}

    def flush_cache(self, req: Request, conn: Connection) -> Response:
        if self.engine.flush_cache():
            return Response(200, _FLUSHED, "text/plain; charset=utf-8")
        return Response(400, b"Flush cache failed.\n", "text/plain; charset=utf-8")

    def metrics(self, req: Request, conn: Connection) -> Response:
        labels = {"model_name": self.served, "engine_type": "unified"}
        body = prometheus_text(self.engine, labels)
        return Response(200, body.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def lab_stats(self, req: Request, conn: Connection) -> Response:
        """Not an sglang route: how punctually the lab emitted (benchmarks/lab_load.py)."""
        stats = self.engine.stats.summary()
        stats.update(running=len(self.engine.running), waiting=len(self.engine.waiting),
                     aborted=self.engine.counters["aborted"], completed=self.engine.counters["requests"],
                     scheduling=self.scheduling)
        if req.query.get("reset"):
            self.engine.stats.reset()



        return json_response(stats)

    # -- generation ---------------------------------------------------------
    def generate(self, req: Request, conn: Connection) -> Response | None:
        try:
            body = req.json()
            ask = self._native_ask(body)
        except (ValueError, TypeError, KeyError) as exc:
            return _bad_request(str(exc))
        incremental = bool(self.fields.get("incremental_streaming_output"))
        sink = _NativeSink(self, req, conn, ask.stream, incremental)
        return self._start(ask, sink, conn)

    def chat(self, req: Request, conn: Connection) -> Response | None:
        if not _is_json(req):
            return _bad_request("Unsupported Media Type: Only 'application/json' is allowed")
        try:
            body = req.json()
            ask = self._chat_ask(body)
        except (ValueError, TypeError, KeyError) as exc:
            return _bad_request(str(exc))
        sink = _OpenAISink(self, req, conn, body, chat=True)
        return self._start(ask, sink, conn)

    def completions(self, req: Request, conn: Connection) -> Response | None:
        if not _is_json(req):
            return _bad_request("Unsupported Media Type: Only 'application/json' is allowed")
        try:
            body = req.json()
            prompt = body["prompt"]
            if not isinstance(prompt, (str, list)) or (isinstance(prompt, list) and prompt and
                                                       not isinstance(prompt[0], int)):
                raise ValueError("the lab serves one prompt per request (a string or a list of token ids)")
            ask = self._ask(prompt, body.get("max_tokens", 16), body.get("ignore_eos", False),
                            body.get("stream", False), None)
        except (ValueError, TypeError, KeyError) as exc:
            return _bad_request(str(exc))
        sink = _OpenAISink(self, req, conn, body, chat=False)
        return self._start(ask, sink, conn)

    def _native_ask(self, body: Mapping[str, Any]) -> _Ask:
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        text, ids = body.get("text"), body.get("input_ids")
        if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
            raise ValueError("the lab serves one prompt per request; send batches as separate requests")
        if text is None and ids is None:
            raise ValueError("Either text, input_ids or input_embeds should be provided.")
        params = body.get("sampling_params") or {}
        return self._ask(text if text is not None else ids, params.get("max_new_tokens", 128),
                         params.get("ignore_eos", False), body.get("stream", False), body.get("rid"))

    def _chat_ask(self, body: Mapping[str, Any]) -> _Ask:
        messages = body.get("messages")
        if not messages:
            raise ValueError("Messages cannot be empty.")
        # Qwen's chat template, so prompt token counts look like the real server's.
        parts = [f"<|im_start|>{m.get('role', 'user')}\n{_content(m.get('content'))}<|im_end|>\n" for m in messages]
        prompt = "".join(parts) + "<|im_start|>assistant\n"
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        return self._ask(prompt, limit, body.get("ignore_eos", False), body.get("stream", False), None)

    def _ask(self, prompt, max_new, ignore_eos, stream, rid) -> _Ask:
        if isinstance(prompt, list):
            data = b",".join(str(int(t)).encode() for t in prompt)
            n = len(prompt)
        else:
            data = str(prompt).encode()
            n = max(1, (len(data) + 3) // 4)  # ~4 bytes per token, as for Qwen's tokenizer on English
        if n >= self.context_len:
            raise ValueError(f"The input ({n} tokens) is longer than the model's context length "
                             f"({self.context_len} tokens).")
        if max_new is not None and (not isinstance(max_new, int) or max_new < 0):
            raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new!r}")
        return _Ask(data, n, max_new, bool(ignore_eos), bool(stream), str(rid or uuid.uuid4().hex))

    def _start(self, ask: _Ask, sink, conn: Connection) -> Response | None:
        if not self.up:
            return json_response({"detail": "the server is starting"}, 503)
        if ask.stream:
            conn.start_stream(sink.request)
        else:
            conn.hold()
        self._run(ask, sink, conn)
        return None

    def _run(self, ask: _Ask, sink, conn: Connection) -> None:
        digest = hashlib.blake2b(ask.prompt, digest_size=8).digest()
        seed = int.from_bytes(digest, "big")
        target, finish = self._length(ask, seed)
        cached = self.engine.cache.match_and_insert(ask.prompt, ask.prompt_tokens) if ask.prompt else 0
        gen = Generation(ask.rid, ask.prompt_tokens, cached, target, finish, sink, seed, seed % 4096)
        conn.on_close.append(lambda: self.engine.cancel(gen))
        self.engine.submit(gen)

    def _length(self, ask: _Ask, seed: int) -> tuple[int, str]:
        """How many tokens it will produce, and whether it ends by length or by EOS."""
        room = min(self.filler.max_tokens, self.context_len - ask.prompt_tokens)
        limit = room if ask.max_new_tokens is None else min(ask.max_new_tokens, room)
        if ask.ignore_eos:
            return max(1, limit), "length"
        low, high = self.natural
        natural = low + seed % max(1, high - low + 1)
        return (natural, "stop") if natural < limit else (max(1, limit), "length")

    def finish_reason(self, gen: Generation) -> dict | None:
        if gen.state != "done":
            return None
        if gen.finish == "stop":
            return {"type": "stop", "matched": self.eos}
        return {"type": "length", "length": gen.target}


def _is_json(req: Request) -> bool:
    return req.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


def _content(content) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


# --------------------------------------------------------------------------- sinks


class _NativeSink:
    """``/generate``: SSE ``data: {text, output_ids, meta_info}`` events, or one JSON at the end.

    Events are assembled from bytes: the filler text is plain ASCII that needs no JSON
    escaping, and the fixed parts of ``meta_info`` are rendered once per request.
    """

    def __init__(self, app: LabApp, req: Request, conn: Connection, stream: bool, incremental: bool) -> None:
        self.app, self.request, self.conn = app, req, conn
        self.stream, self.incremental = stream, incremental
        self.sent = 0
        self.meta_head = b""

    def chunk(self, gen: Generation, new_tokens: int, finished: bool) -> None:
        if not self.stream:
            if finished:
                self.conn.respond(self.request, Response(200, self._body(gen, 0, _dumps(self._meta(gen)))))
            return
        if finished:
            meta = _dumps(self._meta(gen))
        else:
            meta = self._running_meta(gen)
        start = self.sent if self.incremental else 0
        self.sent = gen.produced
        data = b"data: " + self._body(gen, start, meta) + b"\n\n"
        self.conn.write(data + _DONE if finished else data)
        if finished:
            self.conn.end_stream()

    def _running_meta(self, gen: Generation) -> bytes:
        if not self.meta_head:
            self.meta_head = (b'{"id":' + _dumps(gen.rid) + b',"finish_reason":null,"prompt_tokens":%d,'
                              b'"weight_version":%b,"total_retractions":0,"reasoning_tokens":0,'
                              b'"completion_tokens":' % (gen.prompt_tokens, _dumps(self.app.weight_version)))
            return self.meta_head + b'%d,"cached_tokens":%d,"dp_rank":null,"response_sent_to_client_ts":%r}' % (
                gen.produced, gen.cached_tokens, time.time())
        return self.meta_head + b'%d,"cached_tokens":%d,"dp_rank":null}' % (gen.produced, gen.cached_tokens)

    def _body(self, gen: Generation, start: int, meta: bytes) -> bytes:
        a, f = gen.start_word, self.app.filler
        return (b'{"text":"' + f.text(a + start, a + gen.produced) + b'","output_ids":['
                + f.ids_json(a + start, a + gen.produced) + b'],"meta_info":' + meta + b"}")

    def _meta(self, gen: Generation) -> dict:
        app = self.app
        meta = {"id": gen.rid, "finish_reason": app.finish_reason(gen), "prompt_tokens": gen.prompt_tokens,
                "weight_version": app.weight_version, "total_retractions": 0, "reasoning_tokens": 0,
                "completion_tokens": gen.produced, "cached_tokens": gen.cached_tokens,
                # tokenizer_manager.py:1716-1717: one dp rank per request, None without data-parallel attention
                "dp_rank": None}
        if not self.sent:
            meta["response_sent_to_client_ts"] = time.time()
        meta["e2e_latency"] = gen.e2e_latency
        if app.engine.model.speculative and gen.rounds:
            meta.update(_spec_meta(gen, app.engine.model.draft_tokens))
        return meta


def _spec_meta(gen: Generation, draft_tokens: int) -> dict:
    proposed = gen.rounds * max(0, draft_tokens - 1)
    return {"spec_accept_rate": gen.accepted_drafts / proposed if proposed else 0.0,
            "spec_accept_length": gen.produced / gen.rounds, "spec_accepted_drafts": gen.accepted_drafts,
            "spec_proposed_drafts": proposed, "spec_verify_ct": gen.rounds,
            "spec_accept_histogram": list(gen.histogram)}


class _OpenAISink:
    """``/v1/chat/completions`` and ``/v1/completions``: chunks with deltas, usage, ``[DONE]``."""

    def __init__(self, app: LabApp, req: Request, conn: Connection, body: Mapping[str, Any], chat: bool) -> None:
        self.app, self.request, self.conn, self.chat = app, req, conn, chat
        self.model = str(body.get("model") or "default")
        self.stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        default_usage = bool(app.fields.get("stream_response_default_include_usage"))
        self.include_usage = bool(options.get("include_usage")) or default_usage if options else default_usage
        self.continuous = bool(options.get("continuous_usage_stats"))
        self.created = int(time.time())
        self.sent = 0
        self.head = b""

    def chunk(self, gen: Generation, new_tokens: int, finished: bool) -> None:
        if not self.stream:
            if finished:
                self.conn.respond(self.request, json_response(self._final(gen)))
            return
        first = self.sent == 0
        delta = self._text(gen, self.sent)
        self.sent = gen.produced
        if not finished:
            data = self._fast_delta(gen, delta)
            self.conn.write(self._role(gen) + data if first and self.chat else data)
            return
        out = [self._role(gen)] if first and self.chat else []
        reason = self.app.finish_reason(gen)
        out.append(self._delta_chunk(gen, delta.decode(), reason))
        if self.chat:
            out.append(self._chat_chunk(gen, {"reasoning_content": None}, reason))
        if self.include_usage:
            out.append(self._usage_chunk(gen))
        out.append(_DONE)
        self.conn.write(b"".join(out))
        self.conn.end_stream()

    def _role(self, gen: Generation) -> bytes:
        return self._chat_chunk(gen, {"reasoning_content": None, "role": "assistant", "content": ""})

    def _fast_delta(self, gen: Generation, delta: bytes) -> bytes:
        """A content chunk with no finish reason, from bytes (the text needs no escaping)."""
        if not self.head:
            kind = b"chat.completion.chunk" if self.chat else b"text_completion"
            self.head = b'data: {"id":' + _dumps(gen.rid) + b',"object":"' + kind + b'","created":'
            opening = b'"delta":{"reasoning_content":null,"content":"' if self.chat else b'"text":"'
            self.head2 = b',"model":' + _dumps(self.model) + b',"choices":[{"index":0,' + opening
            self.tail = b'"' + (b"}" if self.chat else b"") + b',"logprobs":null,"finish_reason":null,"matched_stop":null}]'
        created = int(time.time()) if self.chat else self.created
        if self.continuous:
            usage = (b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
                     b'"prompt_tokens_details":null,"reasoning_tokens":0}}\n\n'
                     % (gen.prompt_tokens, gen.prompt_tokens + gen.produced, gen.produced))
        else:
            usage = b"}\n\n" if self.chat else b',"usage":null}\n\n'
        return self.head + str(created).encode() + self.head2 + delta + self.tail + usage

    def _text(self, gen: Generation, start: int) -> bytes:
        a = gen.start_word
        return self.app.filler.text(a + start, a + gen.produced)

    def _usage(self, gen: Generation) -> dict:
        return {"prompt_tokens": gen.prompt_tokens, "total_tokens": gen.prompt_tokens + gen.produced,
                "completion_tokens": gen.produced, "prompt_tokens_details": None, "reasoning_tokens": 0}

    def _delta_chunk(self, gen: Generation, delta: str, reason: dict | None) -> bytes:
        usage = self._usage(gen) if self.continuous else None
        if self.chat:
            return self._chat_chunk(gen, {"reasoning_content": None, "content": delta}, None, usage)
        choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason and reason["type"],
                  "matched_stop": reason.get("matched") if reason else None}
        return self._event({"id": gen.rid, "object": "text_completion", "created": self.created,
                            "model": self.model, "choices": [choice], "usage": usage})

    def _chat_chunk(self, gen: Generation, delta: dict, reason: dict | None = None, usage=None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason and reason["type"],
                  "matched_stop": reason.get("matched") if reason else None}
        chunk = {"id": gen.rid, "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": self.model, "choices": [choice]}
        if usage is not None:
            chunk["usage"] = usage
        return self._event(chunk)

    def _usage_chunk(self, gen: Generation) -> bytes:
        usage = self._usage(gen)
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        if not self.chat:
            usage.pop("prompt_tokens_details")  # serving_completions dumps with exclude_none
        return self._event({"id": gen.rid, "object": kind, "created": int(time.time()), "model": self.model,
                            "choices": [], "usage": usage})

    @staticmethod
    def _event(obj: dict) -> bytes:
        return b"data: " + _dumps(obj) + b"\n\n"

    def _final(self, gen: Generation) -> dict:
        reason = self.app.finish_reason(gen) or {}
        text = self._text(gen, 0).decode()
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                              "tool_calls": None},
                      "logprobs": None, "finish_reason": reason.get("type"), "matched_stop": reason.get("matched")}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason.get("type"),
                      "matched_stop": reason.get("matched")}
            kind = "text_completion"
        return {"id": gen.rid, "object": kind, "created": self.created, "model": self.model, "choices": [choice],
                "usage": self._usage(gen), "metadata": {"weight_version": self.app.weight_version}}


class _HealthSink:
    def __init__(self, req: Request, conn: Connection) -> None:
        self.request, self.conn = req, conn

    def chunk(self, gen: Generation, new_tokens: int, finished: bool) -> None:
        if finished:
            self.conn.respond(self.request, Response(200, b"", ""))
