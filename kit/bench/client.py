"""The HTTP side: the per-run client, one streamed request, server look-ups, prompts and request bodies.

``aiohttp`` is imported inside the functions that use it, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import BenchError

from .config import BenchConfig, RequestResult
from .stream import RequestFailure, StreamParser, snip

__all__ = ["Client", "build_prompts", "get_json", "model_name", "one_request", "payload", "server_info",
           "unreachable"]


@dataclass
class Client:
    """What every request of a run shares, built once so that sending costs little."""

    session: Any
    url: Any  # a yarl.URL, parsed once
    cfg: BenchConfig
    timeout: Any
    origin_ns: int = 0  # the run's start on the perf_counter_ns clock

    @classmethod
    def make(cls, session, url: str, cfg: BenchConfig) -> Client:
        import aiohttp
        import yarl

        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout, sock_connect=cfg.connect_timeout,
                                        sock_read=cfg.stall_timeout)
        return cls(session, yarl.URL(url), cfg, timeout)


_JSON = {"Content-Type": "application/json"}


async def one_request(client: Client, body: bytes,
                      result: RequestResult) -> tuple[RequestResult, StreamParser, int, int]:
    """Stream one request; returns what ``fill_metrics`` needs, so the bookkeeping can run later."""
    cfg = client.cfg
    stream = StreamParser(cfg.api)
    sent = time.perf_counter_ns()
    result.start_s = (sent - client.origin_ns) / 1e9
    if result.scheduled_s is not None:
        result.wait_s = max(0.0, result.start_s - result.scheduled_s)
    end = sent
    try:
        async with client.session.post(client.url, data=body, headers=_JSON, timeout=client.timeout) as response:
            result.status = response.status
            if response.status != 200:
                text = await response.content.read(2048)
                raise RequestFailure("http",
                                     f"HTTP {response.status} {response.reason or ''}: {snip(text, 300)}".strip())
            async for data in response.content.iter_any():
                end = time.perf_counter_ns()
                stream.feed(data, end)
                if stream.done:
                    # Let streams whose bytes arrived with ours take their timestamps before this
                    # request's bookkeeping runs: in a batched server they all finish in the same step.
                    await asyncio.sleep(0)
                    await _drain(response)
                    break
            else:
                end = time.perf_counter_ns()
                stream.close(end)
        if not stream.done and stream.finish_reason is None:
            raise RequestFailure("incomplete", "the stream ended before the server said it was done "
                                         f"(no finish reason, no [DONE]) after {_got(stream)}")
        result.ok = True
    except RequestFailure as exc:
        result.error_kind, result.error = exc.kind, exc.message
    except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded row, the run goes on
        result.error_kind, result.error = _classify(exc, cfg, stream)
    if not result.ok:
        end = time.perf_counter_ns()
    return result, stream, sent, end


async def _drain(response) -> None:
    """Read the end of the body after [DONE], so the pooled connection can be reused."""
    if response.content.at_eof():
        return
    try:
        await asyncio.wait_for(response.content.read(), timeout=1.0)
    except Exception:  # noqa: BLE001 - the request is complete; a lost connection costs only reuse
        response.close()


def _got(stream: StreamParser) -> str:
    return f"{len(stream.times)} chunk(s), {stream.last_count or len(stream.times)} token(s)"


def _classify(exc: Exception, cfg: BenchConfig, stream: StreamParser) -> tuple[str, str]:
    """Name a transport failure in words a person can act on."""
    import aiohttp

    detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect", f"could not connect within {cfg.connect_timeout:g} s ({detail})"
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return "stall", f"stalled: no data for {cfg.stall_timeout:g} s after {_got(stream)}"
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", f"request took longer than {cfg.request_timeout} s after {_got(stream)}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect", f"could not connect: {detail}"
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                        aiohttp.ClientOSError, ConnectionError)):
        return "disconnected", f"connection closed mid-stream after {_got(stream)} ({detail})"
    if isinstance(exc, aiohttp.ClientError):
        return "client", detail
    return "client", f"unexpected {detail}"


# -- server look-ups ------------------------------------------------------------------


async def server_info(url: str, timeout: float = 10.0) -> dict:
    """The server's /server_info (kit.target.get_server_info, its keys masked), asked in a thread so the
    loop goes on; a failure comes back as ``{"error": ...}`` instead of raising: the run is kept without it."""
    from kit.errors import HostError
    from kit.target import get_server_info

    try:
        return await asyncio.to_thread(get_server_info, url, timeout=timeout)
    except HostError as err:
        return {"error": err.message}


async def get_json(session, url: str, timeout: float = 10.0) -> dict | None:
    """GET a JSON document; a failure comes back as ``{"error": ...}`` instead of raising."""
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                return {"error": f"HTTP {response.status} from {url}"}
            from kit._secrets import mask_named  # a key-named value in any answer is never kept in a run file

            return mask_named(await response.json(content_type=None))
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc} ({url})"}


async def unreachable(session, base: str, timeout: float) -> str | None:
    """Why nothing answers HTTP at ``base`` (refused, no route, closed at once: an SSH forward whose server is
    down), or None when something does, whatever its status. Only the connection must come within
    ``timeout``; an answer that is slow to come is not a dead server (the run will tell)."""
    import aiohttp

    try:
        async with session.get(base + "/v1/models", timeout=aiohttp.ClientTimeout(sock_connect=timeout,
                                                                                 total=max(timeout, 30.0))) as resp:
            resp.release()
            return None
    except aiohttp.ConnectionTimeoutError:
        return f"no connection within {timeout:g} s"
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        return f"{type(exc).__name__}: {exc}".rstrip(": ")
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None  # connected: it answers, slowly or oddly, and the run will say how


async def flush_cache(session, base: str, timeout: float = 30.0) -> str:
    """POST ``/flush_cache`` (sglang's endpoint, ``entrypoints/http_server.py``): "flushed", or why not (a
    server without the endpoint, or one that refused while requests were running)."""
    import aiohttp

    try:
        async with session.post(base + "/flush_cache", timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            text = (await resp.text())[:200].strip()
            return "flushed" if resp.status == 200 else f"not flushed: {base}/flush_cache answered {resp.status} {text}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return f"not flushed: {base}/flush_cache: {type(exc).__name__}: {exc}".rstrip(": ")


async def model_name(session, base: str, cfg: BenchConfig) -> str | None:
    """The OpenAI ``model`` to send: the configured one, else the first of ``/v1/models`` (None for native)."""
    if cfg.model or cfg.api == "native":
        return cfg.model
    models = await get_json(session, base + "/v1/models")
    try:
        return models["data"][0]["id"]
    except (KeyError, IndexError, TypeError):
        return None


# -- prompts and payloads -------------------------------------------------------------

_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but "
          "have an they you were her she there been one all we their has would when if so no what up out "
          "who them some could more into time only new its then than first other also two any may over "
          "like these well way even after most such made where through back years much before good great").split()


def build_prompts(cfg: BenchConfig, count: int) -> list[dict]:
    """Prompt records built before the clock starts: ``{"prompt"|"messages": ..., "max_tokens": ...}``."""
    if cfg.prompts_file:
        records = _read_prompts(Path(cfg.prompts_file))
        return [records[i % len(records)] for i in range(count)]
    rng = random.Random(cfg.seed)
    out = []
    for _ in range(count):
        n = rng.randint(cfg.input_len_min, cfg.input_len) if cfg.input_len_min else cfg.input_len
        out.append({"prompt": " ".join(rng.choice(_WORDS) for _ in range(n))})
    return out


def prefix_reuse(records: list[dict]) -> dict:
    """How much of the prompts an earlier prompt's beginning covers, as the prefix cache could reuse it:
    ``share`` = the characters each prompt shares with the longest matching start of any earlier one, over all
    prompt characters (characters stand in for tokens: the tokenizer is the server's). In sorted order the
    longest common prefix with any earlier prompt is with a neighbour, so this is n log n plus the inserts."""
    import bisect
    import os.path

    seen: list[str] = []
    shared = total = 0
    for r in records:
        text = r["prompt"] if isinstance(r.get("prompt"), str) else json.dumps(r.get("messages", r), sort_keys=True)
        at = bisect.bisect_left(seen, text)
        best = max((len(os.path.commonprefix([text, seen[j]])) for j in (at - 1, at) if 0 <= j < len(seen)),
                   default=0)
        shared, total = shared + best, total + len(text)
        seen.insert(at, text)
    return {"share": shared / total if total else 0.0, "prompts": len(records),
            "basis": "characters of each prompt that an earlier prompt of the run begins with, over all prompt "
                     "characters"}


def _read_prompts(path: Path) -> list[dict]:
    if not path.is_file():
        raise BenchError(f"no prompts file at {path}", hint="give a JSONL file, one prompt per line")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise BenchError(f"{path}:{number} is not JSON ({exc})",
                             hint='write one JSON value per line: "text", {"prompt": "..."} or '
                                  '{"messages": [...]}') from None
        records.append(_prompt_record(item, f"{path}:{number}"))
    if not records:
        raise BenchError(f"{path} holds no prompts", hint="write one JSON prompt per line")
    return records


def _prompt_record(item: Any, where: str) -> dict:
    if isinstance(item, str):
        return {"prompt": item}
    if isinstance(item, dict):
        record = {}
        text = item.get("prompt", item.get("text"))
        if isinstance(text, str):
            record["prompt"] = text
        elif isinstance(item.get("messages"), list):
            record["messages"] = item["messages"]
        else:
            raise BenchError(f"{where} has no prompt", hint='use {"prompt": "..."} or {"messages": [...]}')
        if isinstance(item.get("max_tokens"), int) and item["max_tokens"] > 0:
            record["max_tokens"] = item["max_tokens"]
        return record
    raise BenchError(f"{where} is neither a string nor an object", hint='use {"prompt": "..."}')


def payload(cfg: BenchConfig, record: dict, model: str | None) -> dict:
    max_tokens = record.get("max_tokens", cfg.max_tokens)
    if cfg.api == "openai":
        messages = record.get("messages") or [{"role": "user", "content": record["prompt"]}]
        body = {"model": model or "default", "messages": messages, "max_tokens": max_tokens, "stream": True,
                "temperature": cfg.temperature, "ignore_eos": cfg.ignore_eos,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    else:
        text = record.get("prompt")
        if text is None:
            text = "\n".join(str(m.get("content", "")) for m in record["messages"] if isinstance(m, dict))
        if cfg.api == "native":
            body = {"text": text, "stream": True,
                    "sampling_params": {"max_new_tokens": max_tokens, "temperature": cfg.temperature,
                                        "ignore_eos": cfg.ignore_eos}}
        else:
            body = {"model": model or "default", "prompt": text, "max_tokens": max_tokens, "stream": True,
                    "temperature": cfg.temperature, "ignore_eos": cfg.ignore_eos,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    body.update(cfg.extra_body)
    return body
