"""One request's SSE stream, parsed: token chunks with arrival times, and the metrics computed from them.

Token counts come from the server (``meta_info.completion_tokens`` on ``/generate``,
``usage.completion_tokens`` on the OpenAI API); where it gives none, the fallback is
explicit and flagged on the result.
"""

from __future__ import annotations

import json
from typing import Any

from kit._text import clip

from .config import RequestResult

__all__ = ["RequestFailure", "StreamParser", "fill_metrics", "judge_decode", "native_tail", "snip"]


class RequestFailure(Exception):
    """Why one request failed, raised while reading it and recorded on its row (``error_kind``, ``error``).

    It never leaves the run (the run goes on and the failure is data), so it is not a ``KitError``.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class StreamParser:
    """Turns SSE bytes into token chunks with arrival times; parsing is the only work per event."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.pending = b""
        self.data: list[bytes] = []
        self.times: list[int] = []
        self.tokens: list[int | None] = []  # None: the server gave no count for this chunk
        self.last_count = 0
        self.final_total: int | None = None
        self.done = False
        self.finish_reason: str | None = None
        self.spec_verify_ct: int | None = None
        self.spec_accept_length: float | None = None
        self.prompt_tokens: int | None = None
        self.server_id: str | None = None
        self.last_text = ""

    def feed(self, data: bytes, now: int) -> None:
        buf = self.pending + data
        lines = buf.split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            self._line(line, now)
            if self.done:
                return

    def close(self, now: int) -> None:
        if self.pending.strip():
            self._line(self.pending, now)
        self.pending = b""
        if self.data:
            self._dispatch(now)

    def _line(self, line: bytes, now: int) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self.data:
                self._dispatch(now)
            return
        if line.startswith(b":"):
            return  # an SSE comment (keep-alive)
        name, colon, value = line.partition(b":")
        if not colon or name not in (b"data", b"event", b"id", b"retry"):
            raise RequestFailure("malformed", f"malformed SSE: line is not an SSE field: {snip(line)}")
        if name == b"data":
            self.data.append(value[1:] if value.startswith(b" ") else value)

    def _dispatch(self, now: int) -> None:
        payload = b"\n".join(self.data)
        self.data = []
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        event = native_tail(payload) if self.api == "native" and len(payload) > _FAST_PARSE_BYTES else None
        if event is not None:
            self._native(event, now)
            return
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise RequestFailure("malformed", f"malformed SSE: data is not JSON ({exc.msg}): {snip(payload)}") from None
        if not isinstance(event, dict):
            raise RequestFailure("malformed", f"malformed SSE: data is not a JSON object: {snip(payload)}")
        if "error" in event:
            raise RequestFailure("server_error", f"server error in stream: {_error_text(event['error'])}")
        if self.api == "native":
            self._native(event, now)
        else:
            self._openai(event, now)

    def _count(self, value: Any, where: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RequestFailure("malformed", f"malformed SSE: {where} is {value!r}, not a token count")
        if value < self.last_count:
            raise RequestFailure("count_backwards",
                           f"{where} went backwards: {value} after {self.last_count} (chunk {len(self.times) + 1})")
        delta = value - self.last_count
        self.last_count = value
        return delta

    def _native(self, event: dict, now: int) -> None:
        meta = event.get("meta_info")
        if not isinstance(meta, dict):
            raise RequestFailure("malformed", "malformed SSE: /generate event without meta_info")
        self.server_id = meta.get("id", self.server_id)
        self.prompt_tokens = meta.get("prompt_tokens", self.prompt_tokens)
        if "completion_tokens" in meta:
            delta = self._count(meta["completion_tokens"], "meta_info.completion_tokens")
            if delta:
                self.times.append(now)
                self.tokens.append(delta)
        else:
            text = event.get("text") or ""
            if text and text != self.last_text:
                self.times.append(now)
                self.tokens.append(None)
            self.last_text = text
        if "spec_verify_ct" in meta:
            self.spec_verify_ct = meta["spec_verify_ct"]
        if "spec_accept_length" in meta:
            self.spec_accept_length = meta["spec_accept_length"]
        self._finish(meta.get("finish_reason"))

    def _openai(self, event: dict, now: int) -> None:
        self.server_id = event.get("id", self.server_id)
        choices = event.get("choices") or []
        usage = event.get("usage")
        count = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
        if not choices:
            if count is not None:  # the closing usage chunk: a total, not a chunk of tokens
                if count < self.last_count:
                    self._count(count, "usage.completion_tokens")
                self.final_total = count
            return
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if self.api == "openai":
            delta = choice.get("delta") or {}
            content = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        else:
            content = choice.get("text") or ""
        if count is not None:
            new = self._count(count, "usage.completion_tokens")
            if new:
                self.times.append(now)
                self.tokens.append(new)
        elif content:
            self.times.append(now)
            self.tokens.append(None)
        self._finish(choice.get("finish_reason"))

    def _finish(self, reason: Any) -> None:
        if isinstance(reason, dict):
            kind = reason.get("type")
            if kind == "abort":
                raise RequestFailure("server_error", f"server aborted the request: {reason.get('message', reason)}")
            self.finish_reason = str(kind)
        elif reason:
            self.finish_reason = str(reason)


_FAST_PARSE_BYTES = 1024  # below this a full parse costs about the same
_META_KEY = b'"meta_info":'
_DECODER = json.JSONDecoder()


def native_tail(payload: bytes) -> dict | None:
    """Only ``meta_info`` of a large /generate event, without parsing its text and output_ids.

    Without --incremental-streaming-output, sglang repeats the whole text and every output
    id in each event, so parsing them all costs O(n) per chunk and O(n^2) per request.
    ``meta_info`` is the event's last key, and its key cannot occur inside a JSON string
    (a quote there is escaped), so it is found from the end. Anything unexpected returns
    None and the caller parses the whole event, which also catches malformed data.
    """
    at = payload.rfind(_META_KEY)
    if at < 0 or not payload.startswith(b"{"):
        return None
    try:
        tail = payload[at + len(_META_KEY):].decode()
        start = len(tail) - len(tail.lstrip())
        meta, end = _DECODER.raw_decode(tail, start)
    except ValueError:
        return None
    if tail[end:].strip() != "}" or not isinstance(meta, dict) or "completion_tokens" not in meta:
        return None
    return {"meta_info": meta}


def snip(data: bytes | str, n: int = 120) -> str:
    """At most ``n`` characters of ``data`` for an error message, so one huge body cannot flood the run file."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return clip(text, n)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def fill_metrics(result: RequestResult, stream: StreamParser, sent_ns: int, end_ns: int) -> None:
    """Per-request metrics from the chunk arrivals, computed after the stream, off the timed path."""
    result.e2e_s = (end_ns - sent_ns) / 1e9
    result.finish_reason = stream.finish_reason
    result.spec_verify_ct = stream.spec_verify_ct
    result.spec_accept_length = stream.spec_accept_length
    result.prompt_tokens = stream.prompt_tokens
    result.server_id = stream.server_id
    tokens = _resolve_counts(result, stream)
    if not tokens:
        return
    times = stream.times
    result.chunk_t_ms = [round((t - sent_ns) / 1e6, 4) for t in times]
    result.chunk_tokens = tokens
    result.chunks = len(tokens)
    result.ttft_s = (times[0] - sent_ns) / 1e9
    result.output_tokens = round(sum(tokens))
    result.first_chunk_tokens = round(tokens[0])
    result.tokens_per_chunk = sum(tokens) / len(tokens)
    decode_tokens = sum(tokens) - tokens[0]
    decode_s = (times[-1] - times[0]) / 1e9
    result.decode_tokens = round(decode_tokens)
    result.decode_s = decode_s
    result.reads = len(set(times))
    judge_decode(result)


def judge_decode(result: RequestResult) -> None:
    """The request's decode rate and latencies between tokens, when its arrival times show the decode.

    The rate is the tokens after the first chunk over the time from the first chunk to the last, so it
    is only as good as the arrival times. When the decode tokens arrive at once, because the client read
    many events in one go (a busy client, or a proxy that buffers) or the server sent many steps' tokens
    in one event (sglang streams the latest output when its reader lags), the span shrinks to almost
    nothing and the rate grows without bound (255 tokens in 1.5 ms: 170,000 tok/s). So a request
    has a decode rate only when its decode tokens arrived at two or more instants after the first chunk
    and no single instant brought more than half of them; otherwise ``decode_note`` says what arrived
    when, and the request stays out of ``decode_tok_s`` and the latencies between tokens (it still counts
    as a success, with its tokens, time to first token and end-to-end time). A request of one or two
    decode tokens is therefore left out too: its decode is not seen in enough arrivals to be a rate.
    """
    result.decode_tok_s = result.itl_token_ms = result.itl_chunk_ms = None
    times, tokens = result.chunk_t_ms, result.chunk_tokens
    decode = sum(tokens) - tokens[0] if tokens else 0
    if decode <= 0:
        result.decode_note = None
        return
    at: dict[float, float] = {}
    events: dict[float, int] = {}
    for t, k in zip(times[1:], tokens[1:], strict=True):
        at[t] = at.get(t, 0) + k
        events[t] = events.get(t, 0) + 1
    when, most = max(at.items(), key=lambda item: item[1])
    later = sum(1 for t in at if t != times[0])
    if later >= 2 and most * 2 <= decode:
        result.decode_note = None
        span = result.decode_s or (times[-1] - times[0]) / 1e3  # seconds (from the clock's ns when measured here)
        result.decode_tok_s = decode / span
        result.itl_token_ms = span * 1e3 / decode
        result.itl_chunk_ms = span * 1e3 / (len(tokens) - 1)
        return
    where = "with the first token" if when == times[0] else f"{when - times[0]:.1f} ms after the first token"
    result.decode_note = (f"{most:g} of its {decode:g} decode tokens arrived at one instant, {where} "
                          f"({events[when]} event(s) in one read; {len(set(times))} reads for {len(times)} events "
                          "in all)")


def _resolve_counts(result: RequestResult, stream: StreamParser) -> list:
    """Token counts per chunk; where the server gave none, an explicit, flagged fallback."""
    tokens = stream.tokens
    if all(t is not None for t in tokens):
        if stream.final_total is not None and tokens and stream.final_total != sum(tokens):
            result.count_note = (f"the closing usage said {stream.final_total} tokens, the chunks "
                                 f"added up to {sum(tokens)}")
        return list(tokens)
    if stream.final_total is not None and stream.final_total >= len(tokens):
        # Only a total: one token assumed in the first chunk, the rest spread evenly.
        result.count_source = "server-total"
        result.count_note = ("the server sent usage only at the end (no continuous_usage_stats): total from "
                             "the server, 1 token assumed in the first chunk, the rest spread over later chunks")
        if len(tokens) == 1:
            return [stream.final_total]
        rest = (stream.final_total - 1) / (len(tokens) - 1)
        return [1] + [rest] * (len(tokens) - 1)
    result.count_source = "chunks"
    where = "meta_info.completion_tokens" if stream.api == "native" else "usage.completion_tokens"
    result.count_note = (f"the server sent no {where}: counted one token per chunk, which undercounts when a "
                         "chunk carries several tokens (speculative decoding)")
    return [t if t is not None else 1 for t in tokens]
