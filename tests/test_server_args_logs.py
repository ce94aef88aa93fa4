"""Logs as evidence without (or with a cut) server_args line: Decode/Prefill batch lines, sglang's
notices with their line, the ready line, and the fields a cut-off line lacks.

Lines marked "written for this test" follow the f-strings of sglang 0.5.23
(srt/managers/scheduler_components/metrics_reporter.py:963-1042, pool_stats_observer.py:119-147,
mem_cache/kv_cache_configurator.py:3141, managers/scheduler.py:1269-1275); the others come from the
incident corpus.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.errors import ParseError
from kit.server_args import (
    decode_summary,
    log_capacity,
    log_notices,
    missing_fields,
    parse_decode_stats,
    parse_log_all,
    parse_prefill_stats,
)

INCIDENTS = Path(__file__).resolve().parent.parent / "data" / "incidents"

# written for this test, in 0.5.23's format for a mamba hybrid model with speculative decoding
MAMBA = ("[2026-11-30 19:04:16 TP0] Decode batch, #running-req: 9, #full token: 5120, full token usage: 0.31, "
         "mamba num: 45, mamba usage: 0.96, accept len: 2.41, accept rate: 0.71, cuda graph: True, "
         "gen throughput (token/s): 212.40, #queue-req: 23")


def test_hybrid_mamba_decode_line():
    (stat,) = parse_decode_stats(MAMBA)
    assert (stat.running_req, stat.full_tokens, stat.full_token_usage, stat.mamba_num, stat.mamba_usage) == \
        (9, 5120, 0.31, 45, 0.96)
    assert (stat.accept_len, stat.cuda_graph, stat.gen_throughput, stat.queue_req, stat.tp_rank) == \
        (2.41, True, 212.4, 23, 0)
    summary = decode_summary([stat])
    assert summary["max_mamba_usage"] == 0.96 and summary["max_queue_req"] == 23


def test_swa_decode_lines_from_a_real_thread():
    stats = parse_decode_stats((INCIDENTS / "sglang-26248-hybrid-retraction" / "server.log").read_text())
    assert [s.full_token_usage for s in stats] == [1.0, 1.0, 1.0]
    assert all(s.swa_token_usage == 0.06 and s.swa_tokens == 14592 for s in stats)
    assert stats[0].tp_rank == 0  # "2026-05-24 03:51:44 TP0]": the line's `[` was cut by the post


def test_a_decode_line_cut_at_its_start_is_still_read():
    text = (INCIDENTS / "sglang-3888-int8-tabs-comments" / "post.md").read_text()
    (stat,) = parse_decode_stats(text)
    assert (stat.running_req, stat.tokens, stat.gen_throughput, stat.queue_req) == (229, 55875, 505.16, 28)


def test_prefill_lines_with_cache_hit_rate():
    stats = parse_prefill_stats((INCIDENTS / "sglang-1612-prefill-queue" / "engine.log").read_text())
    assert [s.cache_hit_rate for s in stats[:3]] == [0.0, 2.76, 14.16]
    assert max(s.queue_req for s in stats if s.queue_req is not None) == 38
    assert stats[-1].new_token == 1443 and stats[-1].queue_req is None  # the last line is cut by the post


def test_notices_keep_their_text_and_line():
    text = (INCIDENTS / "dgx-spark-7-mamba-cap-wrapped" / "issue.md").read_text()
    (notice,) = [n for n in log_notices(text) if n.kind == "notice"]
    assert notice.line == 4 and notice.text == "max_running_requests is capped to 12 by the mamba state cache"
    # written for this test: the logger's prefix is taken off, the level kept
    line = ("[2026-09-10 10:00:01] WARNING kv_cache_configurator.py:3141: max_running_requests is capped to 9 by the "
            "mamba state cache (max_mamba_cache_size=47, 5 state slots per request).")
    (n,) = log_notices(line)
    assert n.level == "WARNING" and n.text.startswith("max_running_requests is capped to 9")


def test_the_ready_line_numbers():
    # written for this test, in the form of 0.5.x's "max_total_num_tokens=..." line
    line = ("[2026-09-10 10:00:02 TP0] max_total_num_tokens=418214, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=9, context_len=262144, available_gpu_mem=10.5 GB")
    assert log_capacity(line) == {"max_total_num_tokens": 418214, "chunked_prefill_size": 8192,
                                  "max_prefill_tokens": 16384, "max_running_requests": 9, "context_len": 262144,
                                  "available_gpu_mem": 10.5}
    assert log_notices(line)[0].kind == "capacity"


def test_a_server_args_line_cut_before_its_first_field_is_named():
    text = (INCIDENTS / "sglang-7212-script-cut-server-args" / "issue.md").read_text()
    with pytest.raises(ParseError, match="cut off before its first field .*'server_args=Se'"):
        parse_log_all(text)


def test_a_cut_off_line_lacks_the_fields_after_the_cut():
    log = Path(__file__).parent / "data" / "server_args" / "cut-mid-field.log"
    snap = parse_log_all(log.read_text())[-1]
    assert snap.truncated
    names = [*snap.fields, "chunked_prefill_size", "max_running_requests"]
    assert missing_fields(snap, names) == ["chunked_prefill_size", "max_running_requests"]
    whole = parse_log_all("server_args=ServerArgs(tp_size=2)")[-1]
    assert missing_fields(whole, ["tp_size", "port"]) == []


@pytest.mark.parametrize("content, said", [
    (bytes(range(256)) * 8, "binary (2,048 bytes, with NUL bytes)"),
    (bytes(range(0x80, 0x100)) * 4, "neither UTF-8 text nor white space"),
    (b"\x1f\x8b\x08\x00" + bytes(64), "gzip-compressed (zcat it first)"),
])
def test_a_log_that_is_no_text_is_said_not_counted_in_lines(tmp_path, content, said):
    from kit.server_args import parse_log_file_all

    path = tmp_path / "blob.bin"
    path.write_bytes(content)
    with pytest.raises(ParseError) as err:
        parse_log_file_all(path)
    assert said in err.value.message and "lines read" not in err.value.message


def test_a_real_executable_is_no_log():
    import sys

    from kit.server_args import parse_log_file_all, text_problem

    exe = Path(sys.executable).resolve()
    said = text_problem(exe.read_bytes()[:65536], exe.stat().st_size)
    assert said.endswith("not text") and f"{exe.stat().st_size:,} bytes" in said
    with pytest.raises(ParseError, match="is no server log"):
        parse_log_file_all(exe)
