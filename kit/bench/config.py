"""What a run sends and what one request measured: ``BenchConfig``, ``RequestResult`` and the constants.

Cheap to import (standard library only): the command line reads ``API_PATHS`` and
``DEFAULT_PORT`` from here to build its help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from kit.errors import BenchError

__all__ = ["API_PATHS", "DEFAULT_PORT", "READ_BUFSIZE", "BenchConfig", "RequestResult"]

API_PATHS = {"native": "/generate", "openai": "/v1/chat/completions", "completions": "/v1/completions"}
_API_ALIASES = {"generate": "native", "sglang": "native", "chat": "openai", "openai-chat": "openai",
                "openai-completions": "completions"}
DEFAULT_PORT = 30000
READ_BUFSIZE = 16 * 1024 * 1024  # vLLM's 64 KiB default collapsed throughput at long contexts


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
    server_metrics_interval: float = 2.0  # seconds between scrapes of the server's /metrics; 0: none
    flush_cache: bool = False  # POST /flush_cache (sglang's) before the warm-up: an empty prefix cache

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
        interval = self.server_metrics_interval
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not (
                interval >= 0 and math.isfinite(interval)):
            raise BenchError(f"server_metrics_interval must be 0 or more seconds, not {interval!r}",
                             hint="e.g. server_metrics_interval=2; 0 does not read the server's /metrics")


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
    reads: int = 0  # distinct arrival times among them (chunks read together share one)
    decode_note: str | None = None  # why there is no decode rate though tokens came (stream.judge_decode)
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


_RESULT_FIELDS = tuple(f.name for f in fields(RequestResult))
