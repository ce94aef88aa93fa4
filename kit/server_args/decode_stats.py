"""The scheduler's periodic ``Decode batch`` lines: running requests, accept length, throughput.

SGLang prints one every ``decode_log_interval`` steps (rank 0 of each TP group):

    [2026-11-30 19:04:16 TP0] Decode batch, #running-req: 1, #token: 140, token usage: 0.00,
    accept len: 1.85, accept rate: 0.85, cuda graph: True, gen throughput (token/s): 31.93, #queue-req: 0,

Older releases write ``Decode batch.``; fields come and go between releases, so the line is
read as ``key: value`` pairs and every field is optional. The gen throughput is over the
whole batch, not per request. Hybrid models log their pools instead of ``#token``/``token
usage`` (0.5.23 ``pool_stats_observer.get_decode_usage_msg_parts``): ``#full token``,
``full token usage``, ``#swa token``, ``swa token usage``, ``mamba num``, ``mamba usage``;
the graph column is ``cuda graph`` (``cpu graph``/``npu graph``/``musa graph`` elsewhere).
``Prefill batch`` lines (``parse_prefill_stats``) give new, cached and queued work.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass

__all__ = ["DecodeStat", "PrefillStat", "decode_summary", "parse_decode_stats", "parse_prefill_stats"]

_LINE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s*(?P<body>#running-req:.*)$")
# A line the post cut off at its start: `req: 229, #token: 55875, token usage: 0.18, gen throughput ...`
_CUT_HEAD = re.compile(r"^\s*(?:[#\w-]*-)?req: (?P<n>\d+), (?P<rest>#token: .*gen throughput.*)$")
_PREFILL = re.compile(r"Prefill batch(?: \[\d+\])?[.,]\s*(?P<body>#new-seq:.*)$")
_RANK = re.compile(r"\bTP(\d+)\b")
_PAIR = re.compile(r"([#A-Za-z][\w\- ()/#]*?):\s*([^,]+?)\s*(?:,|$)")


@dataclass
class DecodeStat:
    line: int  # 1-based, in the text given
    running_req: int | None = None
    tokens: int | None = None
    token_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    gen_throughput: float | None = None
    queue_req: int | None = None
    tp_rank: int | None = None
    full_tokens: int | None = None
    full_token_usage: float | None = None
    swa_tokens: int | None = None
    swa_token_usage: float | None = None
    mamba_num: int | None = None
    mamba_usage: float | None = None
    retracted_req: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PrefillStat:
    line: int
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    cache_hit_rate: float | None = None  # percent, as older releases print it
    token_usage: float | None = None
    running_req: int | None = None
    queue_req: int | None = None
    input_throughput: float | None = None  # token/s, as newer releases print it
    cuda_graph: bool | None = None
    tp_rank: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _graph(v: str) -> bool:
    return v.strip() == "True"


_FIELDS = {
    "#running-req": ("running_req", int),
    "#token": ("tokens", int),
    "token usage": ("token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "cuda graph": ("cuda_graph", _graph),
    "cpu graph": ("cuda_graph", _graph),
    "npu graph": ("cuda_graph", _graph),
    "musa graph": ("cuda_graph", _graph),
    "gen throughput (token/s)": ("gen_throughput", float),
    "#queue-req": ("queue_req", int),
    "#full token": ("full_tokens", int),
    "full token usage": ("full_token_usage", float),
    "#swa token": ("swa_tokens", int),
    "swa token usage": ("swa_token_usage", float),
    "mamba num": ("mamba_num", int),
    "mamba usage": ("mamba_usage", float),
    "#retracted-req": ("retracted_req", int),
}

_PREFILL_FIELDS = {
    "#new-seq": ("new_seq", int),
    "#new-token": ("new_token", int),
    "#cached-token": ("cached_token", int),
    "cache hit rate": ("cache_hit_rate", lambda v: float(v.strip().rstrip("%"))),
    "token usage": ("token_usage", float),
    "full token usage": ("token_usage", float),
    "#running-req": ("running_req", int),
    "#queue-req": ("queue_req", int),
    "input throughput (token/s)": ("input_throughput", float),
    "cuda graph": ("cuda_graph", _graph),
}


def parse_decode_stats(text: str) -> list[DecodeStat]:
    """Every ``Decode batch`` line of a log, in order (also one cut off before ``#token:``, as a
    post may start mid-line); other lines are skipped."""
    return _parse(text, _LINE, DecodeStat, _FIELDS, cut=_CUT_HEAD)


def parse_prefill_stats(text: str) -> list[PrefillStat]:
    """Every ``Prefill batch`` line of a log, in order."""
    return _parse(text, _PREFILL, PrefillStat, _PREFILL_FIELDS)


def _parse(text: str, pattern: re.Pattern, kind, fields: dict, cut: re.Pattern | None = None) -> list:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        match = pattern.search(line)
        body = match["body"] if match is not None else None
        if match is None and cut is not None and (head := cut.match(line)):
            body = f"#running-req: {head['n']}, {head['rest']}"
        if body is None:
            continue
        stat = kind(line=number)
        rank = _RANK.search(line[:match.start()]) if match is not None else None
        stat.tp_rank = int(rank.group(1)) if rank else None
        for key, value in _PAIR.findall(body):
            known = fields.get(key.strip())
            if known is None:
                continue
            name, convert = known
            try:
                setattr(stat, name, convert(value))
            except ValueError:
                continue
        out.append(stat)
    return out


def decode_summary(stats: list[DecodeStat], *, single_stream: bool = True) -> dict:
    """Median accept length and gen throughput over the lines (only batches of one request when
    ``single_stream`` and there are such lines), and whether CUDA graphs ran."""
    chosen = [s for s in stats if s.running_req == 1] if single_stream else list(stats)
    if not chosen:
        chosen = list(stats)
    accept = [s.accept_len for s in chosen if s.accept_len is not None]
    rate = [s.gen_throughput for s in chosen if s.gen_throughput is not None]
    graphs = {s.cuda_graph for s in chosen if s.cuda_graph is not None}
    every = list(stats)
    return {
        "all_lines": len(every),
        "max_running_req": max((s.running_req for s in every if s.running_req is not None), default=None),
        "max_queue_req": max((s.queue_req for s in every if s.queue_req is not None), default=None),
        "max_token_usage": max((u for s in every for u in (s.token_usage, s.full_token_usage)
                                if u is not None), default=None),
        "max_mamba_usage": max((s.mamba_usage for s in every if s.mamba_usage is not None), default=None),
        "max_gen_throughput": max((s.gen_throughput for s in every if s.gen_throughput is not None), default=None),
        "lines": len(chosen),
        "single_stream": bool(chosen) and all(s.running_req == 1 for s in chosen),
        "accept_len": statistics.median(accept) if accept else None,
        "gen_throughput": statistics.median(rate) if rate else None,
        "cuda_graph": graphs.pop() if len(graphs) == 1 else (None if not graphs else "mixed"),
    }
