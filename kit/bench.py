"""Streaming load against SGLang's ``/generate`` or the OpenAI API; per-request metrics; A/B comparison.

What this client does that common benchmark clients get wrong:

- Token counts come from the server, per chunk: deltas of ``meta_info.completion_tokens``
  on ``/generate``, and of ``usage.completion_tokens`` with ``continuous_usage_stats`` on
  the OpenAI API. Nothing is tokenized on the client. When the server gives no counts,
  the request is flagged (``count_source``) and the reason recorded; the fallback is never
  silent.
- A chunk under speculative decoding (MTP/EAGLE) carries several tokens. Latency between
  tokens is the chunk's gap split over its tokens, and the gap per chunk is kept too.
- Decode tok/s of a request is the tokens after the first chunk over the time after the
  first chunk, so tokens that arrived before the clock started are not counted.
- One pooled ``aiohttp`` session with a large read buffer and ``perf_counter_ns``
  timestamps taken as each read returns. Per event there is one ``json.loads`` (for a
  large ``/generate`` event, of its ``meta_info`` only); each request's bookkeeping waits
  until the reads that are already due have been timestamped.
- The time a request waited for its scheduled start or a concurrency slot is recorded
  (``wait_s``), not hidden.
- Speculative accept length is scoped to the run: sum of completion tokens over sum of
  ``spec_verify_ct`` of its requests, not the server's lifetime average.

Results are written as JSONL as each request finishes, so a crash loses nothing that
finished. ``compare(a, b)`` puts a bootstrap confidence interval on the difference in
mean per-request decode tok/s.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import html
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import KitError

__all__ = [
    "BenchConfig",
    "BenchError",
    "BenchRun",
    "Comparison",
    "RequestResult",
    "bench",
    "bench_async",
    "compare",
    "resolve_url",
]

API_PATHS = {"native": "/generate", "openai": "/v1/chat/completions", "completions": "/v1/completions"}
_API_ALIASES = {"generate": "native", "sglang": "native", "chat": "openai", "openai-chat": "openai",
                "openai-completions": "completions"}
DEFAULT_PORT = 30000
READ_BUFSIZE = 16 * 1024 * 1024  # vLLM's 64 KiB default collapsed throughput at long contexts
_FORMAT = 1
_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but "
          "have an they you were her she there been one all we their has would when if so no what up out "
          "who them some could more into time only new its then than first other also two any may over "
          "like these well way even after most such made where through back years much before good great").split()


class BenchError(KitError):
    """A benchmark could not run at all (bad options, unreachable target, unreadable run file)."""


# -- configuration and results ---------------------------------------------------------


@dataclass
class BenchConfig:
    """Everything that decides what load is sent. Stored at the top of every run file."""

    api: str = "native"
    concurrency: int = 1
    requests: int = 16
    rate: float | None = None  # Poisson arrivals per second; None: fixed concurrency
    warmup: int = 1
    max_tokens: int = 256
    ignore_eos: bool = True
    input_len: int = 128  # prompt length in words (about one token each)
    input_len_min: int | None = None  # random lengths in [input_len_min, input_len]
    prompts_file: str | None = None  # JSONL of prompts; overrides input_len
    model: str | None = None  # OpenAI "model"; default: the first of /v1/models
    temperature: float = 0.0
    stall_timeout: float = 60.0  # no bytes for this long ends a request as stalled
    request_timeout: float | None = None  # whole-request limit
    connect_timeout: float = 10.0
    seed: int = 0
    label: str | None = None
    extra_body: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.api = _API_ALIASES.get(self.api, self.api)
        if self.api not in API_PATHS:
            raise BenchError(f"unknown api {self.api!r}", hint="use native (/generate), openai (chat) or completions")
        for name in ("concurrency", "requests", "max_tokens", "input_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise BenchError(f"{name} must be a positive integer, not {getattr(self, name)!r}",
                                 hint=f"pass {name}=1 or more")
        if self.warmup < 0:
            raise BenchError(f"warmup must be 0 or more, not {self.warmup}", hint="pass warmup=0 to skip it")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise BenchError(f"rate must be a positive number of requests per second, not {self.rate!r}",
                             hint="leave rate=None for fixed concurrency")
        if self.input_len_min is not None and not 1 <= self.input_len_min <= self.input_len:
            raise BenchError(f"input_len_min={self.input_len_min} is outside 1..input_len={self.input_len}",
                             hint="give input_len_min <= input_len")
        if not self.stall_timeout > 0:
            raise BenchError("stall_timeout must be positive", hint="e.g. stall_timeout=60")


@dataclass
class RequestResult:
    """One request as measured. Times in seconds from the run's start unless named otherwise."""

    index: int
    ok: bool = False
    error_kind: str | None = None  # http, disconnected, stall, timeout, malformed, count_backwards, ...
    error: str | None = None
    status: int | None = None
    scheduled_s: float | None = None  # when the load plan wanted it sent (Poisson mode)
    start_s: float = 0.0  # when it was sent
    wait_s: float = 0.0  # start - scheduled: launcher drift plus waiting for a concurrency slot
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    first_chunk_tokens: int | None = None
    decode_tokens: int | None = None
    decode_s: float | None = None
    decode_tok_s: float | None = None
    chunks: int = 0  # chunks that carried tokens
    tokens_per_chunk: float | None = None
    itl_token_ms: float | None = None  # mean latency between tokens (chunk gaps split per token)
    itl_chunk_ms: float | None = None  # mean gap between chunks
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    count_source: str = "server"  # server | server-total | chunks
    count_note: str | None = None
    server_id: str | None = None
    chunk_t_ms: list = field(default_factory=list)  # arrival of each token chunk, ms after the request was sent
    chunk_tokens: list = field(default_factory=list)  # tokens in each (server counts unless count_source says)

    def to_dict(self) -> dict:
        # Shallow on purpose: dataclasses.asdict deep-copies the chunk lists, and this runs per request.
        return {name: getattr(self, name) for name in _RESULT_FIELDS}


@dataclass
class BenchRun:
    """A finished (or crashed) run: its configuration, one row per request, and server snapshots."""

    config: BenchConfig
    url: str
    results: list[RequestResult]
    started_at: str = ""
    duration_s: float | None = None  # None: the run did not finish (crash or interrupt)
    server_info_before: dict | None = None
    server_info_after: dict | None = None
    path: str | None = None
    kit_version: str = ""
    clock_origin_ns: int | None = None  # time.perf_counter_ns() at the run's start, to line up with other logs

    # -- tables ------------------------------------------------------------------
    @property
    def requests(self):
        """One row per measured request (a pandas DataFrame)."""
        import pandas as pd

        columns = [f.name for f in fields(RequestResult)]
        return pd.DataFrame([r.to_dict() for r in self.results], columns=columns)

    def summary(self):
        """Mean, median, p90 and p99 of each per-request metric over the successful requests."""
        import numpy as np
        import pandas as pd

        ok = [r for r in self.results if r.ok]
        series = {
            "ttft_ms": [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None],
            "e2e_s": [r.e2e_s for r in ok if r.e2e_s is not None],
            "decode_tok_s": [r.decode_tok_s for r in ok if r.decode_tok_s is not None],
            "itl_token_ms": _itl_samples(ok, per_token=True),
            "itl_chunk_ms": _itl_samples(ok, per_token=False),
            "tokens_per_chunk": [t for r in ok for t in r.chunk_tokens[1:]],
            "output_tokens": [r.output_tokens for r in ok],
            "wait_ms": [r.wait_s * 1e3 for r in ok],
        }
        rows = {}
        for name, values in series.items():
            arr = np.asarray(values, dtype=float)
            if arr.size:
                rows[name] = {"mean": arr.mean(), "median": np.median(arr), "p90": np.percentile(arr, 90),
                              "p99": np.percentile(arr, 99), "n": arr.size}
            else:
                rows[name] = {"mean": np.nan, "median": np.nan, "p90": np.nan, "p99": np.nan, "n": 0}
        return pd.DataFrame.from_dict(rows, orient="index")

    @property
    def totals(self) -> dict:
        """Counts over the whole run: successes, failures by kind, tokens, aggregate rates."""
        ok = [r for r in self.results if r.ok]
        failures: dict[str, int] = {}
        for r in self.results:
            if not r.ok:
                failures[r.error_kind or "unknown"] = failures.get(r.error_kind or "unknown", 0) + 1
        tokens = sum(r.output_tokens for r in ok)
        verified = [r for r in ok if r.spec_verify_ct]
        rates = [r.decode_tok_s for r in ok if r.decode_tok_s is not None]
        return {
            "requests": len(self.results),
            "ok": len(ok),
            "failed": len(self.results) - len(ok),
            "failures": failures,
            "output_tokens": tokens,
            "duration_s": self.duration_s,
            "output_tok_s": tokens / self.duration_s if self.duration_s else None,
            "mean_decode_tok_s": sum(rates) / len(rates) if rates else None,
            "accept_length": (sum(r.output_tokens for r in verified) / sum(r.spec_verify_ct for r in verified)
                              if verified else None),
            "flagged_counts": sum(1 for r in self.results if r.count_source != "server"),
            "finished": self.duration_s is not None,
        }

    # -- files -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike) -> BenchRun:
        """Read a run file; a run that crashed reads back with what it had finished."""
        return _load_run(Path(path))

    def to_jsonl(self, path: str | os.PathLike) -> Path:
        """Write the whole run to ``path`` (runs normally write themselves as they go)."""
        writer = _RunWriter(Path(path))
        writer.header(self)
        for r in self.results:
            writer.request(r)
        if self.duration_s is not None:
            writer.end(self.duration_s, self.server_info_after)
        writer.close()
        return Path(path)

    # -- plots (plotly, through kit.display) ---------------------------------------
    def plot_rates(self):
        from . import display

        return display.rate_distribution({self.name: self})

    def plot_timeline(self):
        from . import display

        return display.timeline(self)

    # -- rendering -----------------------------------------------------------------
    @property
    def name(self) -> str:
        if self.config.label:
            return self.config.label
        return Path(self.path).stem if self.path else f"{self.config.api}@{self.url}"

    def _headline(self) -> str:
        t = self.totals
        rate = f"{t['mean_decode_tok_s']:.2f}" if t["mean_decode_tok_s"] is not None else "n/a"
        state = "" if t["finished"] else ", did not finish"
        return (f"{t['ok']}/{t['requests']} ok, {t['failed']} failed, decode {rate} tok/s per request (mean), "
                f"{self.config.api} c={self.config.concurrency}{state}")

    def notes(self) -> list[str]:
        t = self.totals
        out = []
        if t["failures"]:
            out.append("failures: " + ", ".join(f"{k} x{v}" for k, v in sorted(t["failures"].items())))
        if t["flagged_counts"]:
            reasons = sorted({r.count_note for r in self.results if r.count_note})
            out.append(f"{t['flagged_counts']} request(s) not counted by the server: " + "; ".join(reasons))
        if t["accept_length"] is not None:
            out.append(f"accept length over this run: {t['accept_length']:.3f} "
                       "(sum of completion tokens / sum of spec_verify_ct)")
        return out

    def __repr__(self) -> str:
        return f"<BenchRun {self.name}: {self._headline()}>"

    def to_text(self) -> str:
        table = self.summary().round(3).to_string()
        return "\n".join([repr(self)[1:-1], *self.notes(), table])

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes())
        return (f"<div><b>BenchRun {html.escape(self.name)}</b>: {html.escape(self._headline())}"
                f"<ul>{notes}</ul>{self.summary().round(3).to_html()}</div>")


_RESULT_FIELDS = tuple(f.name for f in fields(RequestResult))


def _itl_samples(results: Iterable[RequestResult], *, per_token: bool) -> list[float]:
    """Gaps between token chunks in ms; per token, a gap counts once for each token of its chunk."""
    out: list[float] = []
    for r in results:
        t, k = r.chunk_t_ms, r.chunk_tokens
        for i in range(1, len(t)):
            gap = t[i] - t[i - 1]
            if per_token and k[i] > 0:
                n = max(1, round(k[i]))
                out.extend([gap / k[i]] * n)
            elif not per_token:
                out.append(gap)
    return out


# -- comparison ----------------------------------------------------------------------


@dataclass
class Comparison:
    """B against A: the difference in mean per-request decode tok/s with a bootstrap CI."""

    a: str
    b: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a, tok/s
    ci_low: float
    ci_high: float
    confidence: float
    verdict: str  # improved | regressed | no significant change
    reason: str
    min_effect: float
    resamples: int
    rates_a: list = field(default_factory=list, repr=False)
    rates_b: list = field(default_factory=list, repr=False)
    boot_diffs: list = field(default_factory=list, repr=False)

    @property
    def rel_diff(self) -> float:
        return self.diff / self.mean_a if self.mean_a else math.nan

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("rates_a", "rates_b", "boot_diffs"):
            d.pop(key)
        d["rel_diff"] = self.rel_diff
        return d

    def to_text(self) -> str:
        pct = self.confidence * 100
        return (f"A {self.a}: {self.mean_a:.3f} tok/s (n={self.n_a})\n"
                f"B {self.b}: {self.mean_b:.3f} tok/s (n={self.n_b})\n"
                f"B - A: {self.diff:+.3f} tok/s ({self.rel_diff:+.2%}), {pct:g}% CI "
                f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}]\n"
                f"verdict: {self.verdict} ({self.reason})")

    def plot(self):
        from . import display

        return display.ab_comparison(self)

    def __repr__(self) -> str:
        return (f"<Comparison {self.verdict}: B-A {self.diff:+.3f} tok/s ({self.rel_diff:+.2%}), "
                f"{self.confidence:.0%} CI [{self.ci_low:+.3f}, {self.ci_high:+.3f}]>")

    def _repr_html_(self) -> str:
        colour = {"improved": "#2e7d32", "regressed": "#c62828"}.get(self.verdict, "#555")
        body = html.escape(self.to_text()).replace("\n", "<br>")
        return f"<div style='border-left:4px solid {colour};padding-left:8px'>{body}</div>"


def compare(a: BenchRun | str | os.PathLike, b: BenchRun | str | os.PathLike, *, confidence: float = 0.95,
            resamples: int = 10_000, min_effect: float = 0.01, seed: int = 0) -> Comparison:
    """Is B faster than A? Bootstrap CI on mean_b - mean_a of per-request decode tok/s.

    The verdict is ``improved`` or ``regressed`` only when the interval excludes zero *and*
    the difference is at least ``min_effect`` of A's mean (default 1%, about what a client
    can resolve); otherwise ``no significant change``, with the reason.
    """
    import numpy as np

    run_a, run_b = (r if isinstance(r, BenchRun) else BenchRun.load(r) for r in (a, b))
    rates_a, rates_b = (np.asarray([x.decode_tok_s for x in r.results if x.ok and x.decode_tok_s is not None])
                        for r in (run_a, run_b))
    for run, rates in ((run_a, rates_a), (run_b, rates_b)):
        if rates.size < 2:
            raise BenchError(f"run {run.name} has {rates.size} successful request(s) with a decode rate",
                             hint="compare runs with at least 2 (better 30+) successful requests")
    if not 0 < confidence < 1:
        raise BenchError(f"confidence must be between 0 and 1, not {confidence}", hint="e.g. 0.95")
    diffs = _bootstrap_diffs(rates_a, rates_b, resamples, np.random.default_rng(seed))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    diff = float(rates_b.mean() - rates_a.mean())
    verdict, reason = _verdict(diff, float(low), float(high), float(rates_a.mean()), min_effect)
    return Comparison(run_a.name, run_b.name, int(rates_a.size), int(rates_b.size), float(rates_a.mean()),
                      float(rates_b.mean()), diff, float(low), float(high), confidence, verdict, reason,
                      min_effect, resamples, rates_a.tolist(), rates_b.tolist(), diffs.tolist())


def _bootstrap_diffs(a, b, resamples: int, rng):
    """Resample each run independently, in blocks so memory stays small."""
    import numpy as np

    out = np.empty(resamples)
    block = max(1, 2_000_000 // max(a.size, b.size))
    for start in range(0, resamples, block):
        n = min(block, resamples - start)
        mean_a = a[rng.integers(0, a.size, (n, a.size))].mean(axis=1)
        mean_b = b[rng.integers(0, b.size, (n, b.size))].mean(axis=1)
        out[start:start + n] = mean_b - mean_a
    return out


def _verdict(diff: float, low: float, high: float, mean_a: float, min_effect: float) -> tuple[str, str]:
    if low <= 0 <= high:
        return "no significant change", "the confidence interval contains zero"
    if abs(diff) < min_effect * mean_a:
        return "no significant change", (f"the interval excludes zero but the difference ({diff / mean_a:+.2%}) "
                                         f"is below the {min_effect:.0%} minimum effect")
    word = "improved" if diff > 0 else "regressed"
    return word, f"the whole interval is {'above' if diff > 0 else 'below'} zero"


# -- one streamed request ---------------------------------------------------------------


class _Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _Stream:
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
            raise _Failure("malformed", f"malformed SSE: line is not an SSE field: {_snip(line)}")
        if name == b"data":
            self.data.append(value[1:] if value.startswith(b" ") else value)

    def _dispatch(self, now: int) -> None:
        payload = b"\n".join(self.data)
        self.data = []
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        event = _native_tail(payload) if self.api == "native" and len(payload) > _FAST_PARSE_BYTES else None
        if event is not None:
            self._native(event, now)
            return
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise _Failure("malformed", f"malformed SSE: data is not JSON ({exc.msg}): {_snip(payload)}") from None
        if not isinstance(event, dict):
            raise _Failure("malformed", f"malformed SSE: data is not a JSON object: {_snip(payload)}")
        if "error" in event:
            raise _Failure("server_error", f"server error in stream: {_error_text(event['error'])}")
        if self.api == "native":
            self._native(event, now)
        else:
            self._openai(event, now)

    def _count(self, value: Any, where: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _Failure("malformed", f"malformed SSE: {where} is {value!r}, not a token count")
        if value < self.last_count:
            raise _Failure("count_backwards",
                           f"{where} went backwards: {value} after {self.last_count} (chunk {len(self.times) + 1})")
        delta = value - self.last_count
        self.last_count = value
        return delta

    def _native(self, event: dict, now: int) -> None:
        meta = event.get("meta_info")
        if not isinstance(meta, dict):
            raise _Failure("malformed", "malformed SSE: /generate event without meta_info")
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
                raise _Failure("server_error", f"server aborted the request: {reason.get('message', reason)}")
            self.finish_reason = str(kind)
        elif reason:
            self.finish_reason = str(reason)


_FAST_PARSE_BYTES = 1024  # below this a full parse costs about the same
_META_KEY = b'"meta_info":'
_DECODER = json.JSONDecoder()


def _native_tail(payload: bytes) -> dict | None:
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


def _snip(data: bytes | str, n: int = 120) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= n else text[:n] + "..."


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _fill(result: RequestResult, stream: _Stream, sent_ns: int, end_ns: int) -> None:
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
    if decode_tokens > 0 and decode_s > 0:
        result.decode_tok_s = decode_tokens / decode_s
        result.itl_token_ms = decode_s * 1e3 / decode_tokens
        result.itl_chunk_ms = decode_s * 1e3 / (len(tokens) - 1)


def _resolve_counts(result: RequestResult, stream: _Stream) -> list:
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


@dataclass
class _Client:
    """What every request of a run shares, built once so that sending costs little."""

    session: Any
    url: Any  # a yarl.URL, parsed once
    cfg: BenchConfig
    timeout: Any
    origin_ns: int = 0  # the run's start on the perf_counter_ns clock

    @classmethod
    def make(cls, session, url: str, cfg: BenchConfig) -> _Client:
        import aiohttp
        import yarl

        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout, sock_connect=cfg.connect_timeout,
                                        sock_read=cfg.stall_timeout)
        return cls(session, yarl.URL(url), cfg, timeout)


_JSON = {"Content-Type": "application/json"}


async def _one_request(client: _Client, body: bytes, result: RequestResult) -> tuple[RequestResult, _Stream, int, int]:
    """Stream one request; returns what ``_fill`` needs, so the bookkeeping can run later."""
    cfg = client.cfg
    stream = _Stream(cfg.api)
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
                raise _Failure("http", f"HTTP {response.status} {response.reason or ''}: {_snip(text, 300)}".strip())
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
            raise _Failure("incomplete", "the stream ended before the server said it was done "
                                         f"(no finish reason, no [DONE]) after {_got(stream)}")
        result.ok = True
    except _Failure as exc:
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


def _got(stream: _Stream) -> str:
    return f"{len(stream.times)} chunk(s), {stream.last_count or len(stream.times)} token(s)"


def _classify(exc: Exception, cfg: BenchConfig, stream: _Stream) -> tuple[str, str]:
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


# -- prompts and payloads -------------------------------------------------------------


def _prompts(cfg: BenchConfig, count: int) -> list[dict]:
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


def _payload(cfg: BenchConfig, record: dict, model: str | None) -> dict:
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


# -- the run ------------------------------------------------------------------------------


class _RunWriter:
    """Appends one JSON line per finished request and flushes it, so a crash loses nothing done."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def _write(self, record: dict) -> None:
        self.fh.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
        self.fh.flush()

    def header(self, run: BenchRun) -> None:
        self._write({"kind": "run", "format": _FORMAT, "kit_version": run.kit_version, "url": run.url,
                     "started_at": run.started_at, "clock_origin_ns": run.clock_origin_ns, "config": asdict(run.config),
                     "server_info_before": run.server_info_before})

    def request(self, result: RequestResult) -> None:
        self._write({"kind": "request", **result.to_dict()})

    def end(self, duration_s: float, server_info_after: dict | None) -> None:
        self._write({"kind": "end", "duration_s": duration_s, "server_info_after": server_info_after})

    def close(self) -> None:
        self.fh.close()


def _load_run(path: Path) -> BenchRun:
    if not path.is_file():
        raise BenchError(f"no run file at {path}", hint="give a .jsonl written by `sgl-kit bench --out`")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # a line torn by a crash mid-write
            raise BenchError(f"{path}:{number} is not JSON", hint="the run file is damaged; re-run the benchmark") from None
    if not records or records[0].get("kind") != "run":
        raise BenchError(f"{path} is not a bench run file (no header line)",
                         hint="give a .jsonl written by `sgl-kit bench`")
    head = records[0]
    known = {f.name for f in fields(BenchConfig)}
    config = BenchConfig(**{k: v for k, v in head.get("config", {}).items() if k in known})
    result_fields = {f.name for f in fields(RequestResult)}
    results = [RequestResult(**{k: v for k, v in r.items() if k in result_fields})
               for r in records[1:] if r.get("kind") == "request"]
    end = next((r for r in records if r.get("kind") == "end"), None)
    return BenchRun(config, head.get("url", ""), results, head.get("started_at", ""),
                    end["duration_s"] if end else None, head.get("server_info_before"),
                    end.get("server_info_after") if end else None, str(path), head.get("kit_version", ""),
                    head.get("clock_origin_ns"))


def _default_path(cfg: BenchConfig) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tag = f"-{cfg.label}" if cfg.label else ""
    return Path("runs") / f"bench-{stamp}-{cfg.api}-c{cfg.concurrency}{tag}.jsonl"


async def _get_json(session, url: str, timeout: float = 10.0) -> dict | None:
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                return {"error": f"HTTP {response.status} from {url}"}
            return await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc} ({url})"}


async def _model_name(session, base: str, cfg: BenchConfig) -> str | None:
    if cfg.model or cfg.api == "native":
        return cfg.model
    models = await _get_json(session, base + "/v1/models")
    try:
        return models["data"][0]["id"]
    except (KeyError, IndexError, TypeError):
        return None


async def bench_async(url: str, config: BenchConfig | None = None, *, out: str | os.PathLike | None = None,
                      progress: Callable[[RequestResult], None] | None = None, **options) -> BenchRun:
    """Run the load against ``url`` (``http://host:port``); see :func:`bench` for the options."""
    import aiohttp

    cfg = config or BenchConfig(**options)
    base = url.rstrip("/")
    path = Path(out) if out is not None else _default_path(cfg)
    total = cfg.warmup + cfg.requests
    records = _prompts(cfg, total)
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE,
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        model = await _model_name(session, base, cfg)
        bodies = [json.dumps(_payload(cfg, r, model)).encode() for r in records]
        client = _Client.make(session, base + API_PATHS[cfg.api], cfg)
        await _warmup(client, bodies[:cfg.warmup])
        from . import __version__

        run = BenchRun(cfg, base, [], _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                       server_info_before=await _get_json(session, base + "/server_info"), path=str(path),
                       kit_version=__version__)
        writer = _RunWriter(path)
        try:
            started = run.clock_origin_ns = client.origin_ns = time.perf_counter_ns()
            writer.header(run)
            await _drive(client, bodies[cfg.warmup:], lambda r: _record(run, writer, r, progress))
            run.duration_s = (time.perf_counter_ns() - started) / 1e9
            run.results.sort(key=lambda r: r.index)
            run.server_info_after = await _get_json(session, base + "/server_info")
            writer.end(run.duration_s, run.server_info_after)
        finally:
            writer.close()
    return run


def _record(run: BenchRun, writer: _RunWriter, result: RequestResult, progress) -> None:
    run.results.append(result)
    writer.request(result)
    if progress is not None:
        progress(result)


async def _warmup(client: _Client, bodies: list[bytes]) -> None:
    if not bodies:
        return
    client.origin_ns = time.perf_counter_ns()
    done = [item[0] for item in await asyncio.gather(*(_one_request(client, b, RequestResult(-1)) for b in bodies))]
    if not any(r.ok for r in done):
        first = done[0]
        raise BenchError(f"every warmup request to {client.url} failed; first: {first.error}",
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
                _fill(result, stream, sent, end)
                self.on_done(result)
            finally:
                self.queue.task_done()
            await asyncio.sleep(0)

    async def close(self) -> None:
        await self.queue.join()
        self.task.cancel()


async def _drive(client: _Client, bodies: list[bytes], on_done) -> None:
    """Fixed concurrency: N workers pull the next request. Poisson rate: each starts at its scheduled time."""
    recorder = _Recorder(on_done)
    try:
        await _launch(client, bodies, recorder.put)
    finally:
        await recorder.close()


async def _launch(client: _Client, bodies: list[bytes], put) -> None:
    cfg = client.cfg
    if cfg.rate is None:
        queue = iter(enumerate(bodies))

        async def worker() -> None:
            for index, body in queue:
                put(await _one_request(client, body, RequestResult(index)))
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
            put(await _one_request(client, body, RequestResult(index, scheduled_s=at)))

    tasks = []
    for index, body in enumerate(bodies):
        tasks.append(asyncio.ensure_future(scheduled(index, body, offset)))
        offset += rng.expovariate(cfg.rate)
    await asyncio.gather(*tasks)


def bench(target: Any = "local", *, port: int = DEFAULT_PORT, out: str | os.PathLike | None = None,
          progress: Any = "auto", config: BenchConfig | None = None, **options) -> BenchRun:
    """Benchmark a server: ``bench("http://127.0.0.1:30000", concurrency=8, requests=64)``.

    ``target`` is a URL, a target string (``local``, ``ssh://user@host``, an ssh alias),
    or a :class:`kit.hosts.Host`; for the last two the server's ``port`` on that host is
    used (reached through an SSH port forward when remote). Options are the fields of
    :class:`BenchConfig`. ``out`` is the JSONL path (default ``runs/bench-....jsonl``).
    ``progress``: ``"auto"`` (a widget in a notebook, tqdm in a terminal), ``None``, or a
    callable given each finished :class:`RequestResult`.
    """
    cfg = config or BenchConfig(**options)
    url, host = resolve_url(target, port=port)
    bar = _progress(progress, cfg)
    try:
        return _run_sync(bench_async(url, cfg, out=out, progress=bar))
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()
        if host is not None and not isinstance(target, _host_type()):
            host.close()


def _host_type():
    from .hosts import Host

    return Host


def resolve_url(target: Any, *, port: int = DEFAULT_PORT, **ssh_options) -> tuple[str, Any]:
    """The HTTP base URL for a target, and the Host that holds any port forward (or None)."""
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        return target.rstrip("/"), None
    if not isinstance(port, int) or not 0 < port < 65536:
        raise BenchError(f"port must be 1..65535, not {port!r}", hint="pass the server's --port")
    if isinstance(target, _host_type()):
        host = target
    else:
        from .target import connect

        host = connect(target, **ssh_options)
    local_port = host.forward(port)
    return f"http://127.0.0.1:{local_port}", host


def _run_sync(coro):
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


class _TerminalProgress:
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


def _progress(progress: Any, cfg: BenchConfig):
    if progress != "auto":
        return progress
    from . import display

    desc = f"bench {cfg.api} c={cfg.concurrency}"
    if display.in_notebook():
        return display.ProgressWidget(cfg.requests, desc)
    if sys.stderr.isatty():
        return _TerminalProgress(cfg.requests, desc)
    return None


# -- command line -------------------------------------------------------------------------


def add_cli(sub) -> Any:
    """Register ``sgl-kit bench``; returns the parser so the CLI can add its common options."""
    p = sub.add_parser(
        "bench", help="measure tok/s with streaming load, or compare two runs",
        usage="sgl-kit bench TARGET_OR_URL [--api native|openai|completions] [--concurrency N] [--requests M] "
              "[--max-tokens K] [--out FILE] [--json]\n       sgl-kit bench compare A.jsonl B.jsonl [--json]",
        description="Stream requests to an SGLang server and measure per-request decode tok/s, time to first "
                    "token, latency between tokens (per token and per chunk) and speculative accept length, "
                    "with token counts from the server. TARGET_OR_URL is http://host:port, `local`, or an "
                    "SSH target (the server port, --port, is forwarded). Each finished request is appended to "
                    "the run file (default runs/bench-*.jsonl). `bench compare A B` gives B - A in mean decode "
                    "tok/s with a bootstrap 95% confidence interval and a verdict.")
    p.add_argument("target", metavar="TARGET_OR_URL")
    p.add_argument("runs", nargs="*", help="with `compare`: the two run files A and B")
    p.add_argument("--api", default="native", choices=sorted(API_PATHS), help="native is /generate (default)")
    p.add_argument("--concurrency", "-c", type=int, default=1, help="requests in flight (default 1)")
    p.add_argument("--requests", "-n", type=int, default=16, help="measured requests (default 16)")
    p.add_argument("--rate", type=float, default=None, help="Poisson arrivals per second instead of fixed concurrency")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default 1)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (default 256)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the model stop early (outputs no longer have a fixed length)")
    p.add_argument("--input-len", type=int, default=128, help="prompt length in words (default 128)")
    p.add_argument("--input-len-min", type=int, default=None, help="random prompt lengths from this to --input-len")
    p.add_argument("--prompts", metavar="FILE", help="JSONL of prompts instead of random words")
    p.add_argument("--model", help="OpenAI model name (default: first of /v1/models)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"server port on the target (default {DEFAULT_PORT})")
    p.add_argument("--stall-timeout", type=float, default=60.0, help="seconds without data that end a request")
    p.add_argument("--label", help="a name for this run (shown in comparisons)")
    p.add_argument("--out", metavar="FILE", help="run file (default runs/bench-<time>-<api>-c<N>.jsonl)")
    p.add_argument("--confidence", type=float, default=0.95, help="with compare: CI level (default 0.95)")
    p.set_defaults(func=_cmd_bench)
    return p


def _cmd_bench(args) -> int:
    if args.target == "compare":
        return _cmd_compare(args)
    if args.runs:
        raise BenchError(f"unexpected arguments: {' '.join(args.runs)}",
                         hint="sgl-kit bench TARGET_OR_URL [options], or sgl-kit bench compare A.jsonl B.jsonl")
    cfg = BenchConfig(api=args.api, concurrency=args.concurrency, requests=args.requests, rate=args.rate,
                      warmup=args.warmup, max_tokens=args.max_tokens, ignore_eos=args.ignore_eos,
                      input_len=args.input_len, input_len_min=args.input_len_min, prompts_file=args.prompts,
                      model=args.model, stall_timeout=args.stall_timeout, label=args.label)
    ssh = {}
    if not args.target.startswith(("http://", "https://")):
        from .target import parse_target

        if parse_target(args.target)["kind"] == "ssh":
            ssh = {"trust_new_host": args.trust_new_host, "key_filename": args.identity,
                   "known_hosts": args.known_hosts, "config_file": args.ssh_config,
                   "default_timeout": args.timeout}
    url, host = resolve_url(args.target, port=args.port, **ssh)
    bar = _progress("auto", cfg)
    try:
        run = _run_sync(bench_async(url, cfg, out=args.out, progress=bar))
    finally:
        if bar is not None:
            bar.close()
        if host is not None:
            host.close()
    if args.json:
        _print_json({"path": run.path, "url": run.url, "totals": run.totals,
                     "summary": _frame_dict(run.summary())})
    else:
        sys.stdout.write(run.to_text() + f"\nwritten to {run.path}\n")
    return 0 if run.totals["ok"] else 1


def _cmd_compare(args) -> int:
    if len(args.runs) != 2:
        raise BenchError(f"compare takes two run files, got {len(args.runs)}",
                         hint="sgl-kit bench compare A.jsonl B.jsonl")
    result = compare(args.runs[0], args.runs[1], confidence=args.confidence)
    if args.json:
        _print_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0


def _frame_dict(frame) -> dict:
    return {name: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for name, row in frame.to_dict(orient="index").items()}


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
