"""Rules about how the launch meets the load it serves: what the client sees of the stream, and prompts
split into more prefill chunks than they need. Each reads the resolved arguments, and the load from a
benchmark run (``--bench RUN``: its prompts' lengths, the tokens each streamed chunk carried) or the
server's Prefill batch lines.

They register into kit.doctor.rulebase.RULES, like the other rule modules.
"""

from __future__ import annotations

import math

from .case import Case
from .limits import CHUNKS_PER_PROMPT, chunk_target, prefill_chunks
from .result import Change, Impact
from .rulebase import ALL_VERSIONS as _ALL
from .rulebase import Fix, Rule, not_estimated, resolution_sites, rule, source_site, where

__all__: list[str] = []


# --------------------------------------------------------------------------- the stream interval


def _interval(case: Case) -> int | None:
    value = case.value("stream_interval")
    return value if isinstance(value, int) and value > 1 else None


def _streamed(case: Case) -> list[str] | None:
    n = _interval(case)
    if n is None:
        return None
    out = [f"stream_interval = {n} ({case.origin('stream_interval')}): the server sends a streaming client "
           f"{n} tokens at a time"]
    site = _stream_site(case)
    if site:
        out.append(f"sglang streams a request's output when its count of output ids reaches the next multiple of "
                   f"stream_interval ({site[0]})")
    bench = case.ev.bench or {}
    if bench.get("tokens_per_chunk_mean"):
        out.append(f"the benchmark received {bench['tokens_per_chunk_mean']:.1f} tokens per streamed chunk on "
                   f"average ({bench['source']})")
    return out


def _stream_site(case: Case) -> list[str]:
    """Where this version's scheduler decides to stream a request's tokens by stream_interval."""
    return source_site(case, "len(req.output_ids) % stream_interval", "managers/")


def _streamed_impact(case: Case) -> Impact:
    bench = case.ev.bench or {}
    per = bench.get("tokens_per_chunk_mean")
    if per and per > 1:
        return Impact(1 - 1 / per, "measured", f"{per:.1f} tokens arrive together, so a client's updates come "
                      f"{per:.1f} times further apart than its tokens are made; the decode rate is unchanged",
                      "time between tokens", (f"tokens per chunk in {bench['source']}",))
    return not_estimated(f"a client's updates come every {_interval(case)} tokens; the decode rate is unchanged",
                         "time between tokens", "a streaming benchmark (sgl-kit bench): its tokens per chunk")


rule(Rule(
    "stream-interval-batches-tokens", "The server streams tokens in batches (stream_interval above 1)", _ALL,
    ("args",),
    when=_streamed, impact=_streamed_impact,
    fix=lambda case: ([Change(case.option("stream_interval") or "--stream-interval", 1)], [], []),
    sites=lambda case: where(resolution_sites(case, "stream_interval")) + _stream_site(case),
    risk=lambda case: ("a token per update costs the server a little more work per step (the reason sglang "
                       "offers the interval); measure total throughput under the real load before and after"),
    affects=("streaming",), covers=lambda case: {"stream_interval"},
    uses=("bench", "command", "source", "version")))


# --------------------------------------------------------------------------- prefill chunks


def _chunk(case: Case) -> int | None:
    value = case.value("chunked_prefill_size")
    return value if isinstance(value, int) and value > 0 else None


def _split(case: Case) -> list[str] | None:
    chunk = _chunk(case)
    if chunk is None:
        return None
    bench = case.ev.bench or {}
    prompts = bench.get("prompt_tokens_mean")
    lines, full, _ = prefill_chunks(case)
    origin = f"chunked_prefill_size = {chunk} ({case.origin('chunked_prefill_size')})"
    if prompts and prompts >= CHUNKS_PER_PROMPT * chunk:
        out = [f"{origin}: the benchmark's prompts have {prompts:.0f} tokens on average ({bench['source']}), "
               f"{math.ceil(prompts / chunk)} prefill chunks each"]
    elif not prompts and lines >= CHUNKS_PER_PROMPT and full * 2 >= lines:
        out = [f"{origin}: {full} of {lines} Prefill batch lines prefilled a full chunk "
               f"({case.ev.sources.get('prefill', 'the log')}): the prompts are longer than one chunk"]
    else:
        return None
    if full:
        out.append(f"{full} of {lines} Prefill batch lines are a full chunk of {chunk} tokens")
    return out


def _split_impact(case: Case) -> Impact:
    return not_estimated(f"each chunk is one forward pass before the first token; a chunk of {_chunk(case)} tokens "
                         "keeps each pass short for the running requests, at the cost of more passes per prompt",
                         "time to first token",
                         "the time to first token with a chunk as long as the prompts (sgl-kit bench, before "
                         "and after)")


def _split_fix(case: Case) -> Fix:
    return [Change(case.option("chunked_prefill_size") or "--chunked-prefill-size", chunk_target(case))], [], []


rule(Rule(
    "prefill-chunk-small", "Prompts are prefilled in many small chunks (chunked_prefill_size)", _ALL, ("args",),
    when=_split, impact=_split_impact, fix=_split_fix,
    sites=lambda case: where(resolution_sites(case, "chunked_prefill_size")),
    risk=lambda case: ("a longer chunk makes each prefill pass longer: running requests wait for it between "
                       "their tokens; measure the time between tokens under the real load before and after"),
    affects=("prefill/extend",), covers=lambda case: {"chunked_prefill_size"},
    uses=("bench", "command", "prefill", "source", "version")))
