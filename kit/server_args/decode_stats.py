"""The scheduler's periodic ``Decode batch`` lines: running requests, accept length, throughput.

SGLang prints one every ``decode_log_interval`` steps (rank 0 of each TP group):

    [2026-11-30 19:04:16 TP0] Decode batch, #running-req: 1, #token: 140, token usage: 0.00,
    accept len: 1.85, accept rate: 0.85, cuda graph: True, gen throughput (token/s): 31.93, #queue-req: 0,

Older releases write ``Decode batch.``; fields come and go between releases, so the line is
read as ``key: value`` pairs and every field is optional. The gen throughput is over the
whole batch, not per request.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass

__all__ = ["DecodeStat", "decode_summary", "parse_decode_stats"]

_LINE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s*(?P<body>#running-req:.*)$")
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

    def to_dict(self) -> dict:
        return asdict(self)


_FIELDS = {
    "#running-req": ("running_req", int),
    "#token": ("tokens", int),
    "token usage": ("token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "cuda graph": ("cuda_graph", lambda v: v.strip() == "True"),
    "gen throughput (token/s)": ("gen_throughput", float),
    "#queue-req": ("queue_req", int),
}


def parse_decode_stats(text: str) -> list[DecodeStat]:
    """Every ``Decode batch`` line of a log, in order; other lines are skipped."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.search(line)
        if match is None:
            continue
        stat = DecodeStat(line=number)
        rank = _RANK.search(line[:match.start()])
        stat.tp_rank = int(rank.group(1)) if rank else None
        for key, value in _PAIR.findall(match["body"]):
            known = _FIELDS.get(key.strip())
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
    return {
        "lines": len(chosen),
        "single_stream": bool(chosen) and all(s.running_req == 1 for s in chosen),
        "accept_len": statistics.median(accept) if accept else None,
        "gen_throughput": statistics.median(rate) if rate else None,
        "cuda_graph": graphs.pop() if len(graphs) == 1 else (None if not graphs else "mixed"),
    }
