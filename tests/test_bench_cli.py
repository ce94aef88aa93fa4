"""`sgl-kit bench` and `sgl-kit bench compare` from the command line, against the reference server."""

from __future__ import annotations

import json

import pytest
from reference_server import ReferenceServer, Schedule

from kit.cli import main


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    with ReferenceServer(Schedule(rate=500.0, ttft=0.005)) as srv:
        yield srv


def _bench(url_or_target, out, *extra):
    return main(["bench", url_or_target, "--requests", "3", "--max-tokens", "12", "--warmup", "0",
                 "--out", str(out), *extra])


def test_bench_prints_json_and_writes_the_run(server, tmp_path, capsys):
    assert _bench(server.url, tmp_path / "a.jsonl", "--json", "--api", "openai", "-c", "3") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["totals"]["ok"] == 3 and out["totals"]["output_tokens"] == 36
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    # this reference server has no /metrics: the run says so once, before its end
    assert [json.loads(line)["kind"] for line in lines] == ["run", "request", "request", "request",
                                                           "server_metrics_unavailable", "end"]
    # a request whose decode tokens arrived at once (a loaded machine merges reads) has no decode rate, and says why
    records = [json.loads(line) for line in lines[1:-2]]
    rated = [r for r in records if r.get("decode_tok_s") is not None]
    assert all(r.get("decode_note") for r in records if r.get("decode_tok_s") is None)
    assert out["summary"]["decode_tok_s"]["n"] == len(rated) >= 1


def test_bench_text_output_and_compare(server, tmp_path, capsys):
    assert _bench(server.url, tmp_path / "a.jsonl", "--label", "before") == 0
    text = capsys.readouterr().out
    assert "3/3 ok, 0 failed" in text and "decode_tok_s" in text and f"written to {tmp_path / 'a.jsonl'}" in text
    assert _bench(server.url, tmp_path / "b.jsonl") == 0
    capsys.readouterr()
    assert main(["bench", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["a"] == "before" and result["n_a"] == 3
    assert result["verdict"] in ("improved", "regressed", "no significant change")
    assert main(["bench", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 0
    assert "verdict: " in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["bench", "compare", "only-one.jsonl"], "compare takes two run files"),
    (["bench", "compare", "no-such-a.jsonl", "no-such-b.jsonl"], "no run file at no-such-a.jsonl"),
    (["bench", "http://127.0.0.1:1", "stray"], "unexpected arguments: stray"),
    (["bench", "lab", "--port", str(_free_port())], "lab"),
    (["bench", "local", "--port", "0"], "port must be 1..65535"),
])
def test_bench_errors_say_what_to_do(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "->" in err


def test_a_run_with_only_failures_exits_non_zero(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "[[fault:500]]"}\n')
    with ReferenceServer(Schedule(rate=500.0, ttft=0.005)) as srv:
        assert _bench(srv.url, tmp_path / "f.jsonl", "--prompts", str(prompts), "--json") == 1
    assert json.loads(capsys.readouterr().out)["totals"]["failures"] == {"http": 3}


@pytest.mark.ssh
def test_bench_over_ssh_forwards_the_server_port(sshd, server, tmp_path, capsys):
    code = _bench(sshd.alias, tmp_path / "s.jsonl", "--ssh-config", str(sshd.ssh_config),
                  "--port", str(server.port), "--json")
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["totals"]["ok"] == 3
    assert out["url"].startswith("http://127.0.0.1:") and not out["url"].endswith(f":{server.port}")


def test_a_dead_server_is_one_clear_error_and_no_run_file(tmp_path, capsys):
    port = _free_port()  # nothing listens there
    out = tmp_path / "dead.jsonl"
    assert main(["bench", f"http://127.0.0.1:{port}", "--warmup", "0", "-n", "3", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    first, hint = captured.err.splitlines()
    assert first.startswith(f"sgl-kit: error: nothing answers at http://127.0.0.1:{port}: ClientConnectorError")
    assert hint.startswith("  -> start the server, or check the URL and --port") and "No run file was written" in hint


def test_a_run_where_every_request_failed_prints_the_failure_not_a_table_of_nan(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "[[fault:500]]"}\n')
    with ReferenceServer(Schedule(rate=500.0, ttft=0.005)) as srv:
        assert _bench(srv.url, tmp_path / "f.jsonl", "--prompts", str(prompts)) == 1
        url = srv.url
    out = capsys.readouterr().out
    assert "NaN" not in out and "decode_tok_s" not in out
    assert "0/3 ok, 3 failed, decode n/a tok/s per request (mean of 0)" in out
    assert "first failure (request 0): HTTP 500" in out and f"measured at {url}; written to" in out


def test_ctrl_c_keeps_the_finished_requests_and_says_where(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "cut.jsonl"
    with ReferenceServer(Schedule(rate=40.0, ttft=0.005)) as srv:
        # 200 requests of a quarter second each: the run is far from done when the interrupt comes, however
        # busy the machine (with 30 a starved test process once sent it after the run had finished)
        proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "bench", srv.url, "-n", "200", "--max-tokens", "10",
                                 "--warmup", "0", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                # Ctrl-C as a terminal gives it, even when this runner ignores SIGINT (a background
                                # job of a non-interactive shell does, and its children inherit that)
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not out.exists() or out.read_text().count('"kind":"request"') < 2):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    from kit.bench import BenchRun

    kept = BenchRun.load(out)
    n = len(kept.results)
    assert 2 <= n < 200 and not kept.totals["finished"]
    assert stderr.strip().splitlines()[-1] == (f"sgl-kit: interrupted: {n} of 200 requests had finished ({n} ok); they are "
                                               f"in {out}, marked unfinished (`sgl-kit bench compare` reads it)")
    assert stdout == ""
