"""Property tests for the SSE reader in kit.bench: however the bytes are split, the same chunks come out."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.bench.stream import RequestFailure, StreamParser


def _event(count: int, finish: bool = False) -> bytes:
    meta = {"id": "r", "completion_tokens": count, "finish_reason": {"type": "length"} if finish else None}
    return b"data: " + json.dumps({"text": "x" * count, "meta_info": meta}).encode() + b"\n\n"


counts = st.lists(st.integers(1, 5), min_size=1, max_size=30)


def _body(steps: list[int], newline: bytes = b"\n") -> bytes:
    total, out = 0, b": keep-alive comment\n\n"
    for i, step in enumerate(steps):
        total += step
        out += _event(total, finish=i == len(steps) - 1)
    out += b"data: [DONE]\n\n"
    return out.replace(b"\n", newline)


def _feed(body: bytes, cuts: list[int]) -> StreamParser:
    stream = StreamParser("native")
    edges = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
    for n, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        stream.feed(body[a:b], n)
        if stream.done:
            break
    else:
        stream.close(len(edges))
    return stream


@settings(max_examples=200, deadline=None)
@given(steps=counts, cuts=st.lists(st.integers(0, 10_000), max_size=40), crlf=st.booleans())
def test_any_split_of_the_bytes_gives_the_same_chunks(steps, cuts, crlf):
    stream = _feed(_body(steps, b"\r\n" if crlf else b"\n"), cuts)
    assert stream.tokens == steps
    assert stream.done and stream.finish_reason == "length"
    assert stream.times == sorted(stream.times)


@settings(max_examples=100, deadline=None)
@given(steps=counts, drop=st.integers(1, 3), at=st.integers(0, 29))
def test_a_count_that_goes_down_is_always_caught(steps, drop, at):
    at = at % len(steps)
    totals = [sum(steps[: i + 1]) for i in range(len(steps))]
    bad = max(0, totals[at] - steps[at] - drop) if at else None
    body = b"".join(_event(t if i != at or bad is None else bad) for i, t in enumerate(totals))
    if bad is None or at == 0:
        return  # the first chunk cannot go below zero
    with pytest.raises(RequestFailure) as info:
        _feed(body, [])
    assert info.value.kind == "count_backwards"


@given(junk=st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b))
def test_junk_lines_never_pass_silently(junk):
    stream = StreamParser("native")
    try:
        stream.feed(junk + b"\n\n", 0)
        stream.close(1)
    except RequestFailure as exc:
        assert exc.kind in ("malformed", "server_error")
        return
    # Only SSE comments and fields without data may be ignored.
    assert junk.startswith(b":") or junk.split(b":")[0] in (b"event", b"id", b"retry")
    assert stream.tokens == []


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=0, max_size=3000), ids=st.integers(0, 2000), count=st.integers(0, 10**6),
       spaced=st.booleans(), finish=st.sampled_from([None, {"type": "length", "length": 3}]))
def test_the_meta_info_shortcut_agrees_with_a_full_parse(text, ids, count, spaced, finish):
    from kit.bench.stream import native_tail

    # Text that itself contains the key and braces must not fool it.
    text = text + '"meta_info": {"completion_tokens": 1}}'
    event = {"text": text, "output_ids": list(range(ids)),
             "meta_info": {"id": "r", "completion_tokens": count, "finish_reason": finish}}
    payload = json.dumps(event, separators=None if spaced else (",", ":")).encode()
    assert native_tail(payload) == {"meta_info": event["meta_info"]}
    # Cut anywhere, it refuses, and the full parse reports the damage.
    for cut in (len(payload) // 3, len(payload) - 1, len(payload) - 5):
        assert native_tail(payload[:cut]) is None


def test_a_large_malformed_event_is_still_caught():
    big = b'data: {"text": "' + b"x" * 9000 + b'", "meta_info": {"completion_tokens": 3' + b"\n\n"
    with pytest.raises(RequestFailure) as info:
        StreamParser("native").feed(big, 0)
    assert info.value.kind == "malformed"
