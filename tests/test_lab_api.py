"""The lab's HTTP API against sglang 0.5.11's formats: real HTTP on loopback, the app in a thread.

The synthetic `loadtest` scenario keeps these fast (~100 tok/s per stream); the formats do
not depend on the speed.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from _lab_support import app_server, request, sse, variant_fields


@pytest.fixture(scope="module")
def lab():
    with app_server(variant_fields("old"), scenario="loadtest") as server:
        yield server


def _gen(n=12, stream=True, text="hello lab", **params):
    return {"text": text, "sampling_params": {"max_new_tokens": n, **params}, "stream": stream}


def test_generate_streams_cumulative_text_and_sglang_meta_info(lab):
    events = sse(lab.port, "/generate", _gen(40, ignore_eos=True))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False)), "text is cumulative"
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    steps = [b - a for a, b in zip([0] + counts, counts, strict=False)]
    assert steps[0] == 1 and all(1 <= s <= 4 for s in steps) and counts[-1] == 40
    assert len(chunks[-1]["output_ids"]) == 40 and len(chunks[-1]["text"].split()) == 40
    first, last = chunks[0]["meta_info"], chunks[-1]["meta_info"]
    assert list(first)[:8] == ["id", "finish_reason", "prompt_tokens", "weight_version", "total_retractions",
                               "reasoning_tokens", "completion_tokens", "cached_tokens"]
    assert "response_sent_to_client_ts" in first and first["finish_reason"] is None
    assert last["finish_reason"] == {"type": "length", "length": 40}
    assert last["spec_verify_ct"] == len(chunks) - 1
    assert last["spec_accept_length"] == pytest.approx(40 / last["spec_verify_ct"])
    assert sum(last["spec_accept_histogram"]) == last["spec_verify_ct"] and len(last["spec_accept_histogram"]) == 4
    assert last["spec_proposed_drafts"] == 3 * last["spec_verify_ct"] and last["e2e_latency"] > 0


def test_generate_without_stream_returns_one_json(lab):
    status, headers, body = request(lab.port, "POST", "/generate", _gen(8, stream=False, ignore_eos=True))
    out = json.loads(body)
    assert status == 200 and headers["content-type"] == "application/json"
    assert out["meta_info"]["completion_tokens"] == 8 and len(out["output_ids"]) == 8


def test_without_ignore_eos_a_request_may_stop_early_on_eos(lab):
    events = sse(lab.port, "/generate", _gen(100000, text="a prompt"))
    last = events[-2]["meta_info"]
    assert last["finish_reason"] == {"type": "stop", "matched": 248044}
    assert 160 <= last["completion_tokens"] <= 640


def test_same_prompt_twice_hits_the_prefix_cache_until_flushed(lab):
    prompt = "a long shared system prompt " * 40
    first = sse(lab.port, "/generate", _gen(2, text=prompt, ignore_eos=True))[-2]["meta_info"]
    second = sse(lab.port, "/generate", _gen(2, text=prompt, ignore_eos=True))[-2]["meta_info"]
    assert first["cached_tokens"] == 0 and second["cached_tokens"] > 0.8 * second["prompt_tokens"]
    status, _, body = request(lab.port, "POST", "/flush_cache")
    assert status == 200 and body.startswith(b"Cache flushed.")
    third = sse(lab.port, "/generate", _gen(2, text=prompt, ignore_eos=True))[-2]["meta_info"]
    assert third["cached_tokens"] == 0


def test_chat_stream_with_usage_and_continuous_usage(lab):
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events = sse(lab.port, "/v1/chat/completions", body)
    assert events[-1] == "[DONE]"
    role, content, finish, usage = events[0], events[1:-3], events[-3], events[-2]
    assert role["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "qwen" for c in events[:-1])
    assert all(c["choices"][0]["finish_reason"] is None and "usage" in c for c in content)
    counts = [c["usage"]["completion_tokens"] for c in content]
    assert counts == sorted(counts) and counts[-1] == 20
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert len(text.split()) == 20
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"] == {
        "reasoning_content": None}
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 20
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 20


def test_chat_stream_sends_usage_only_when_asked(lab):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "ignore_eos": True, "stream": True}
    events = sse(lab.port, "/v1/chat/completions", body)
    assert all("usage" not in e for e in events[:-1]) and events[0]["model"] == "default"


def test_completions_stream_and_non_stream(lab):
    body = {"model": "m", "prompt": "once upon", "max_tokens": 6, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    events = sse(lab.port, "/v1/completions", body)
    content = events[:-2]
    assert content[-1]["choices"][0]["finish_reason"] == "length" and content[0]["usage"] is None
    assert len("".join(c["choices"][0]["text"] for c in content).split()) == 6
    assert events[-2]["usage"] == {"prompt_tokens": 3, "total_tokens": 9, "completion_tokens": 6,
                                   "reasoning_tokens": 0}
    status, _, raw = request(lab.port, "POST", "/v1/completions", dict(body, stream=False))
    out = json.loads(raw)
    assert status == 200 and out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 6


def test_server_info_model_info_models_and_health(lab):
    sse(lab.port, "/generate", _gen(30, ignore_eos=True))
    for path in ("/server_info", "/get_server_info"):
        status, _, raw = request(lab.port, "GET", path)
        info = json.loads(raw)
        assert status == 200 and info["version"] == "0.5.11" and info["tp_size"] == 2
        state = info["internal_states"][0]
        assert 1.0 < state["avg_spec_accept_length"] <= 4.0
        assert state["disable_piecewise_cuda_graph"] is True and "memory_usage" in state
    model = json.loads(request(lab.port, "GET", "/model_info")[2])
    assert model["architectures"] == ["Qwen3_5ForConditionalGeneration"] and model["has_image_understanding"]
    cards = json.loads(request(lab.port, "GET", "/v1/models")[2])
    assert cards["object"] == "list" and cards["data"][0]["max_model_len"] == 262144
    assert request(lab.port, "GET", "/health")[0] == 200
    assert request(lab.port, "GET", "/health_generate")[0] == 200


def test_bad_requests_get_sglang_style_errors(lab):
    status, _, raw = request(lab.port, "POST", "/generate", b"{not json", {"content-type": "application/json"})
    assert status == 400 and json.loads(raw)["object"] == "error"
    assert request(lab.port, "POST", "/generate", {"sampling_params": {}})[0] == 400
    status, _, raw = request(lab.port, "POST", "/v1/chat/completions", b"{}", {"content-type": "text/plain"})
    assert status == 400 and "Unsupported Media Type" in json.loads(raw)["message"]
    assert request(lab.port, "GET", "/no/such/route")[0] == 404
    assert request(lab.port, "GET", "/generate")[0] == 405
    assert request(lab.port, "GET", "/metrics")[0] == 404  # only with --enable-metrics
    status, _, raw = request(lab.port, "GET", "/v1/models/other")
    assert status == 404 and json.loads(raw)["error"]["code"] == "model_not_found"


def test_a_client_that_disconnects_mid_stream_leaves_nothing_running(lab):
    before = lab.call(lambda: lab.engine.counters["aborted"])
    body = json.dumps(_gen(100000, ignore_eos=True)).encode()
    socks = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", lab.port), timeout=10)
        s.sendall(b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: %d\r\n\r\n%b" % (len(body), body))
        assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
        socks.append(s)
    assert lab.call(lambda: len(lab.engine.running)) == 5
    for s in socks:
        s.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and lab.call(lambda: len(lab.engine.running)):
        time.sleep(0.05)
    assert lab.call(lambda: (len(lab.engine.running), len(lab.engine._heap) <= 5)) == (0, True)
    assert lab.call(lambda: lab.engine.counters["aborted"]) - before == 5


def test_requests_over_the_running_cap_wait_in_the_queue():
    fields = variant_fields("new", max_running_requests=2)
    with app_server(fields, scenario="incident") as server:
        body = json.dumps(_gen(1000, ignore_eos=True)).encode()
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(4)]
        for s in socks:
            s.sendall(b"POST /generate HTTP/1.1\r\ncontent-type: application/json\r\n"
                      b"content-length: %d\r\n\r\n%b" % (len(body), body))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and server.call(lambda: len(server.engine.waiting)) < 2:
            time.sleep(0.02)
        assert server.call(lambda: (len(server.engine.running), len(server.engine.waiting))) == (2, 2)
        for s in socks:
            s.close()


def test_metrics_use_sglangs_names_when_enabled():
    with app_server(variant_fields("old", enable_metrics=True), scenario="loadtest") as server:
        sse(server.port, "/generate", _gen(10, ignore_eos=True))
        status, headers, raw = request(server.port, "GET", "/metrics")
        text = raw.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert "# TYPE sglang:num_running_reqs gauge" in text
    assert 'sglang:generation_tokens_total{model_name="/root/models/Qwen3.6-27B",engine_type="unified"} 10.0' in text
    assert 'sglang:time_to_first_token_seconds_bucket{model_name="/root/models/Qwen3.6-27B",engine_type="unified",' \
           'le="+Inf"} 1' in text
    assert "sglang:spec_accept_length{" in text and "sglang:e2e_request_latency_seconds_count" in text


def test_incremental_streaming_output_sends_deltas():
    with app_server(variant_fields("old", incremental_streaming_output=True), scenario="loadtest") as server:
        chunks = sse(server.port, "/generate", _gen(20, ignore_eos=True))[:-1]
    assert sum(len(c["output_ids"]) for c in chunks) == 20
    assert len("".join(c["text"] for c in chunks).split()) == 20


def test_a_client_that_expects_100_continue_gets_it(lab):
    body = json.dumps(_gen(3, stream=False, ignore_eos=True)).encode()
    with socket.create_connection(("127.0.0.1", lab.port), timeout=10) as s:
        s.sendall(b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body))
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 OK") and b'"completion_tokens":3' in reply


# -- the wire format, checked against sglang's own protocol models ---------------------------------


def test_openai_stream_chunks_validate_against_sglangs_protocol_models(lab, env_0511):
    """Not our copy of the format: sglang 0.5.11's pydantic models, from the wheel, in the dry-run's python."""
    import subprocess
    from pathlib import Path

    chat = sse(lab.port, "/v1/chat/completions", {
        "model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 24, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    completion = sse(lab.port, "/v1/completions", {
        "model": "default", "prompt": "hi", "max_tokens": 24, "stream": True,
        "stream_options": {"include_usage": True}})
    lines = [json.dumps({"model": "ChatCompletionStreamResponse", "data": c}) for c in chat[:-1]]
    lines += [json.dumps({"model": "CompletionStreamResponse", "data": c}) for c in completion[:-1]]
    assert chat[-1] == completion[-1] == "[DONE]" and len(lines) > 10
    script = Path(__file__).with_name("protocol_check.py")
    proc = subprocess.run([str(env_0511.python), str(script)], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(lines)
    bad = [(json.loads(line)["data"], r) for line, r in zip(lines, results, strict=True) if not r["ok"] or r["unknown"]]
    assert bad == []
