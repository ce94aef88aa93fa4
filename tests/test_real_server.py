"""The kit's live paths against a real sglang server: PyPI's sglang 0.5.11 on CPU, a tiny random Qwen3.

Not lab tests: the server is sglang's own ``python -m sglang.launch_server`` (one per test
session, tests/_real_server_support.py), and every expectation is checked against what that
server itself says (its log, /server_info, /metrics, its processes), not against what the
lab was configured to produce.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from _lab_support import free_port
from _real_server_support import START_TIMEOUT, alive, metric_total, stop_everything

from kit.errors import LabError, UnsupportedVersion
from kit.hosts import LocalHost
from kit.lab.real import RealLab, default_flags
from kit.provenance import explain_server
from kit.server_args import classify_server, from_server_info, parse_decode_stats, parse_log, server_flags
from kit.source import SourceTree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) + 600)]


def _get(url: str, timeout: float = 30) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


# ---------------------------------------------------------------------------- discovery


def test_discovery_picks_the_main_process_and_relates_its_workers(real_server):
    server = real_server.server()
    assert server.kind == "sglang"
    assert server.sglang_version == "0.5.11"
    assert "sglang.launch_server" in server.argv
    assert server.port == real_server.port
    assert server.env.get("SGLANG_USE_CPU_ENGINE") == "1"
    names = {c["name"]: c for c in server.children}
    # the workers rename themselves (setproctitle) and their cmdlines carry no arguments
    assert {"sglang::scheduler", "sglang::detokenizer"} <= set(names)
    assert names["sglang::scheduler"]["argv"] == ["sglang::scheduler"]
    # discovery lists the main process once: the workers are its children, not servers of their own
    from kit.target import discover

    ours = [s for s in discover(real_server.host) if s.labels.get("lab_dir") == real_server.lab_dir]
    assert [s.pid for s in ours] == [server.pid]
    assert "child        pid" in server.to_text()


def test_lab_status_names_the_engine_and_every_stand_in(real_server):
    status = real_server.lab.status()
    assert status.running and status.healthy
    assert status.pid == real_server.server().pid
    text = status.to_text()
    assert "real sglang 0.5.11 on CPU" in text
    for name in ("torchvision", "sgl_kernel"):
        assert f"stand-in {name}:" in text
    # the stand-ins are what the server's interpreter imports
    info = real_server.lab.env.check_info()
    assert sorted(info["stand_ins"]) == ["sgl_kernel", "torchvision"]


# ---------------------------------------------------------------------------- server args


def test_log_server_args_line_and_server_info_agree_field_by_field(real_server):
    server = real_server.server()
    logged = parse_log(server.log_text())
    info = server.server_info()
    assert logged.stage == "resolved"
    # the top level of /server_info is asdict(server_args) of the main process, the one that logged
    common = set(logged.fields) & set(info)
    assert len(common) == len(logged.fields) > 300
    assert {k: (logged.fields[k], info[k]) for k in common if logged.fields[k] != info[k]} == {}
    assert logged.fields["device"] == "cpu" and logged.fields["attention_backend"] == "torch_native"
    # the scheduler resolves a few more after the line is logged (its internal state); the kit's
    # reading of /server_info takes the scheduler's, which is what runs
    state = info["internal_states"][0]
    later = {k for k in common if k in state and state[k] != info[k]}
    live = from_server_info(info)
    assert later, "the scheduler changed nothing after the log line"
    assert all(live.fields[k] == state[k] for k in later)
    # sglang 0.5.11 writes these in the scheduler process: model_runner.py:1060, scheduler.py:730
    assert {"disable_chunked_prefix_cache", "pp_max_micro_batch_size"} <= later


def test_args_classification_of_the_real_launch(real_server):
    server = real_server.server()
    table = classify_server(server, SourceTree.of_server(server)).set_index("flag")
    assert table.loc["device", "origin"] == "explicit"
    assert table.loc["attention_backend", "origin"] == "explicit"
    assert table.loc["sleep_on_idle", "origin"] == "explicit"
    # not asked for, and the server runs another value than the default: sglang decided
    info = server.server_info()
    for name in ("disable_cuda_graph", "disable_piecewise_cuda_graph"):
        assert info[name] is True
        assert table.loc[name, "origin"] == "auto-changed"


def test_why_the_prefill_graph_is_off_names_the_non_cuda_rule(real_server):
    server = real_server.server()
    exp = explain_server(server, "disable_piecewise_cuda_graph")
    fired = [s for s in exp.sites if s.status == "fired"]
    assert [s.rule.split(" (")[0] for s in fired] == ["5. Non-CUDA hardware"]
    # sglang's own is_cpu() decided it, from this server's environment and machine
    text = exp.to_text()
    assert "is_cpu() = True" in text and "SGLANG_USE_CPU_ENGINE='1'" in text
    # the value the rule writes is the one the server resolved
    assert server.server_info()["disable_piecewise_cuda_graph"] is True
    assert fired[0].value_text == "True"


def test_why_agrees_with_the_dry_run_of_the_same_launch(real_server):
    """sglang's own ServerArgs run on the same launch, with the server's SGLANG_ variables, writes the flag
    where the static reading of the live server says rule 5 fired."""
    from kit.dryrun import environment
    from kit.investigation import dryrun_crosscheck

    if not environment("0.5.11").ready:
        pytest.skip("no dry-run environment for sglang 0.5.11 here (`sgl-kit dryrun setup --sglang 0.5.11`)")
    server = real_server.server()
    tree = SourceTree.of_server(server)
    exp = explain_server(server, "disable_piecewise_cuda_graph", tree)
    rule5 = next(s.where.removeprefix("sglang/") for s in exp.fired if s.rule.startswith("5. Non-CUDA"))
    check = dryrun_crosscheck(server, tree, exp, gpu="a6000")
    assert check.how == "dry-run (live)" and "SGLANG_USE_CPU_ENGINE=1" in check.source
    assert rule5 in check.dryrun_sites and check.agree, check.to_text()


def test_why_without_the_cpu_engine_variable_does_not_fire_the_cpu_rule(real_server):
    """The same server's source with an environment that lacks SGLANG_USE_CPU_ENGINE: is_cpu() is False."""
    from kit._pysource import Environment

    server = real_server.server()
    env = {k: v for k, v in server.env.items() if k != "SGLANG_USE_CPU_ENGINE"}
    exp = explain_server(server, "disable_piecewise_cuda_graph", environ=Environment(env, prefixes=("SGLANG_",)))
    rule5 = [s for s in exp.sites if s.rule.startswith("5. Non-CUDA")]
    assert [s.status for s in rule5] == ["unknown"]  # is_cpu() is False; is_hip() and the others stay the hardware's
    assert "is_hip()" in rule5[0].status_reason and "is_cpu()" not in rule5[0].status_reason


# ---------------------------------------------------------------------------- bench


def test_bench_token_counts_equal_the_servers_own(real_server):
    from kit.bench import bench

    url = real_server.url
    before = (metric_total(url, "sglang:generation_tokens_total"), metric_total(url, "sglang:prompt_tokens_total"))
    native = bench(url, requests=2, max_tokens=24, input_len=16, warmup=0, progress=None, out=None)
    openai = bench(url, api="openai", requests=2, max_tokens=24, input_len=16, warmup=0, progress=None, out=None)
    after = (metric_total(url, "sglang:generation_tokens_total"), metric_total(url, "sglang:prompt_tokens_total"))
    results = native.results + openai.results
    assert all(r.ok and r.count_source == "server" for r in results)
    assert after[0] - before[0] == sum(r.output_tokens for r in results)
    assert after[1] - before[1] == sum(r.prompt_tokens for r in results)
    # and each stream's own last meta_info: the tokens of one request, counted by the server
    assert {r.output_tokens for r in results} == {24}


def test_bench_rate_is_of_the_order_of_the_decode_batch_lines(real_server):
    from kit.bench import bench

    server = real_server.server()
    # On two busy cores a stream's tokens can all arrive in one read: the run then has no decode rate and says
    # why (decode_note). Up to three runs, so the comparison is made when one of them streamed.
    for _ in range(3):
        start = len(server.log_text().splitlines())
        run = bench(real_server.url, requests=1, max_tokens=96, input_len=8, warmup=0, progress=None, out=None)
        lines = "\n".join(server.log_text().splitlines()[start:])
        stats = [s for s in parse_decode_stats(lines) if s.running_req == 1 and s.gen_throughput]
        assert stats, "no Decode batch line during the run"
        assert all(s.cuda_graph is False for s in stats)
        mine = run.results[0].decode_tok_s
        if mine is not None:
            break
        assert run.results[0].decode_note, "no decode rate and no reason given"
    if mine is None:
        return  # three runs whose tokens arrived at once, each saying so: nothing to compare on this machine
    theirs = sorted(s.gen_throughput for s in stats)[len(stats) // 2]
    # one stream: the server's per-interval rate and the client's per-request rate measure the same
    # decode loop; on 2 shared cores both swing, so only the order of magnitude is held
    assert theirs / 5 < mine < theirs * 5


# ---------------------------------------------------------------------------- relaunch


def test_relaunch_with_apply_fix_path_restarts_the_real_server_the_way_it_ran(own_real_server):
    """On a server of its own: the relaunch stops it, and `lab down` stops the relaunched one."""
    from _lab_support import request

    from kit.investigation import relaunch
    from kit.target import discover

    mine = own_real_server
    server = mine.server()
    # A request sglang refuses stays in its tokenizer manager for good: _init_req_state records it
    # (managers/tokenizer_manager.py:533, 2527) before sampling_params.verify raises (:977), and nothing
    # removes it. On SIGTERM the server then drains for ever, logging "Gracefully exiting... Remaining
    # number of requests 1" every 5 s (:2304-2336). The relaunch kills it after stop_timeout and goes on.
    status, _, body = request(mine.port, "POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": -5}})
    assert status == 400 and b"max_new_tokens must be at least 0" in body
    flags = [*server_flags(server.argv), "--max-running-requests", "7"]
    result = relaunch(mine.host, server, flags, timeout=START_TIMEOUT, stop_timeout=15)
    assert result["stopped"] == "killed" and result["previous"] == server.pid
    assert "had not exited 15 s after SIGTERM and was killed" in result["note"]
    assert "Gracefully exiting... Remaining number of requests 1" in result["note"]
    again = mine.server()
    assert again.pid == result["pid"] != server.pid
    assert again.argv[:3] == server.argv[:3]  # the same interpreter and module
    assert again.cwd == server.cwd and again.log_path == server.log_path
    assert again.env.get("SGLANG_USE_CPU_ENGINE") == "1"
    assert again.server_info()["max_running_requests"] == 7
    assert {"sglang::scheduler", "sglang::detokenizer"} <= {c["name"] for c in again.children}
    # nothing of the old server is left: its workers went with it
    assert not [c for c in server.children if alive(c["pid"])]
    # the lab's own record follows the relaunched server: status names it, and down stops it
    status = mine.lab.status()
    assert status.running and status.pid == again.pid and status.port == mine.port
    stopped = mine.lab.down()
    assert not stopped.running and mine.lab.status().pid is None
    assert [s for s in discover(mine.host) if s.labels.get("lab_dir") == mine.lab_dir] == []



# ---------------------------------------------------------------------------- bad input


def test_port_in_use_is_refused_before_anything_starts(real_server, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        lab = RealLab(LocalHost(), directory=str(tmp_path / "lab"), progress=lambda s: None)
        with pytest.raises(LabError, match=f"port {port} on local is already in use"):
            lab.up(port=port)
    assert not lab.status().running


def test_a_server_that_dies_at_start_shows_its_log_and_leaves_nothing(real_server, tmp_path):
    lab_dir = str(tmp_path / "lab")
    lab = RealLab(LocalHost(), directory=lab_dir, progress=lambda s: None)
    flags = [*default_flags(), "--tp-size", "0"]
    try:
        with pytest.raises(LabError) as err:
            lab.up(flags=flags, port=free_port(), timeout=START_TIMEOUT)
        assert "exited with status" in err.value.message
        assert "logs/server.log" in err.value.message
        assert not lab.status().running
    finally:
        assert stop_everything(lab_dir) == []


def test_an_unsupported_sglang_version_names_what_is_missing():
    with pytest.raises(UnsupportedVersion, match=r"kit/data/serve/requirements-0\.5\.12\.txt"):
        RealLab(LocalHost(), directory="/nonexistent", sglang="0.5.12")


def test_a_half_built_environment_resumes_where_it_stopped(real_server):
    from kit.dryrun.serve_env import setup_serve

    env = real_server.lab.env
    (env.markers / "check.done").unlink()
    (env.markers / "stand-ins.done").unlink()
    assert not env.ready
    steps = []
    report = setup_serve(env.version, progress=steps.append)
    states = {s.name: s.state for s in report.steps}
    assert states.pop("stand-ins") == "done" and states.pop("check") == "done"
    assert set(states.values()) == {"cached"}
    assert env.ready


# ---------------------------------------------------------------------------- doctor


def test_doctor_live_reads_the_real_server(real_server):
    from kit.doctor import doctor

    diagnosis = doctor("lab", host=real_server.host)
    text = diagnosis.to_text()
    assert "sglang 0.5.11" in text
    assert "no NVIDIA GPU visible" in text
    # the decode graph is off because of torch_native: the site whose message the server itself logged (a GPU
    # rule on a CPU server: listed apart, not a cause)
    by_id = {f.id: f for f in diagnosis.not_applicable}
    graph = by_id["decode-cuda-graph-off"]
    assert "decode-cuda-graph-off" not in {f.id for f in diagnosis.findings}
    assert graph.sites == ["srt/server_args.py:2557"]
    assert "Cuda graph is disabled because of using torch native attention backend" in real_server.server().log_text()


def test_doctor_gives_no_gpu_fix_to_a_cpu_server(real_server):
    from kit.doctor import doctor

    diagnosis = doctor("lab", host=real_server.host)
    prescribed = [str(c) for f in diagnosis.findings for c in f.changes]
    assert not [c for c in prescribed if "attention-backend" in c or "cuda-graph" in c], prescribed
    by_id = {f.id: f for f in diagnosis.not_applicable}
    # the GPU-only rules still say what they saw, and that they do not apply: listed apart, never ranked
    assert not by_id.keys() & {f.id for f in diagnosis.findings}
    for rid in ("decode-cuda-graph-off", "attention-backend-mismatch", "prefill-cuda-graph-off"):
        assert by_id[rid].estimate.reason.startswith("does not apply: device = 'cpu'"), by_id[rid].estimate
        assert not by_id[rid].changes and by_id[rid].advice[0].startswith("nothing to change")
    # the host's probes (uname -m, the server's torch) decide sglang's is_cpu(): rule 5 fired, none unknown
    evidence = "\n".join(by_id["prefill-cuda-graph-off"].evidence)
    assert "rule '5. Non-CUDA hardware" in evidence and "fired at srt/server_args.py:" in evidence
    assert "5. Non-CUDA hardware (AMD, NPU, CPU, MPS, XPU, etc.) (unknown)" not in evidence
    assert not [q for q in diagnosis.open_questions if "CUDA graph" in q or "attention backend" in q]
    assert "--attention-backend torch_native" in (diagnosis.fixed_command or "")


# ---------------------------------------------------------------------------- stand-in vs real


# What the stand-in (kit/lab/api.py) answers differently from the real sglang 0.5.11 server, each
# with why. A difference not listed here fails the test; one listed that is gone fails it too.
KNOWN_DIFFERENCES = {
    # the in-process stand-in runs the incident's launch, which has no --enable-metrics
    "GET /metrics status": "the stand-in's launch has no --enable-metrics",
    "GET /metrics content-type": "the stand-in's launch has no --enable-metrics",
    "metrics families": "the stand-in's launch has no --enable-metrics",
    # fields of the scheduler's ServerArgs that are not dataclass fields (set in __post_init__)
    "GET /server_info internal_states[] keys": "_mx_config_cache, _quantization_explicitly_unset, enable_grpc, "
                                               "grpc_port, use_mla_backend: not in the stand-in's internal state",
    # the real server's meta_info carries its request timings, which sglang adds only with --enable-metrics
    # (managers/tokenizer_manager.py:1669-1672; the stand-in's incident launch has none), and
    # cached_tokens_details; the stand-in's its speculative counts (the incident runs EAGLE, the CPU server not)
    "POST /generate keys": "timings and cached_tokens_details only real; spec_* only stand-in",
    "POST /generate stream event keys": "timings and cached_tokens_details only real; spec_* only stand-in",
}
# What only the real server's meta_info has: --enable-metrics timings (observability/req_time_stats.py,
# convert_to_output_meta_info) and the cache breakdown.
REAL_ONLY_META = {"queue_time", "prefill_waiting_latency", "prefill_launch_latency", "request_received_ts",
                  "api_server_dispatch_finish_ts", "request_finished_ts", "inference_time", "decode_throughput",
                  "cached_tokens_details", "cached_tokens_details.device", "cached_tokens_details.host"}


def test_the_stand_in_speaks_the_real_servers_protocol(real_server):
    from _lab_support import app_server, variant_fields
    from _real_server_support import protocol_shape, shape_diff

    real = protocol_shape(real_server.port)
    with app_server(variant_fields("new")) as stand_in:
        ours = protocol_shape(stand_in.port)
    diff = shape_diff(ours, real)
    assert set(diff) == set(KNOWN_DIFFERENCES), json.dumps(diff, indent=1)[:3000]
    # what must agree: SSE framing, the [DONE] end, the OpenAI objects' keys, errors
    for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
        assert real[f"POST {path} stream framing"] == ["data"]
        assert real[f"POST {path} stream ends with [DONE]"] is True
    assert real["POST /v1/chat/completions keys"] == ours["POST /v1/chat/completions keys"]
    timing = diff["POST /generate keys"]
    assert not [k for k in timing["only stand-in"] if not k.startswith("meta_info.spec_")]
    for key in ("POST /generate keys", "POST /generate stream event keys"):
        assert {k.removeprefix("meta_info.") for k in diff[key]["only real"]} <= REAL_ONLY_META, diff[key]
    # sglang's Decode batch line ends with `#queue-req: N`, no separator (scheduler_metrics_mixin.py:561-565);
    # one request longer than the log interval (40 decode steps) writes one
    from _lab_support import request

    request(real_server.port, "POST", "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 96,
                                                                                        "ignore_eos": True}},
            timeout=120)
    decode = [line for line in real_server.server().log_text().splitlines() if "Decode batch" in line]
    assert decode and all(line.rstrip().rsplit(", ", 1)[-1].startswith("#queue-req: ") for line in decode)
    assert all(not line.endswith(", ") for line in decode)


# ---------------------------------------------------------------------------- notebook and report


def test_notebook_00_and_its_report_on_the_real_server(real_server, tmp_path):
    import papermill

    from kit.report import build_report

    notebooks = __import__("pathlib").Path(__file__).resolve().parent.parent / "notebooks"
    out = tmp_path / "00_connect.ipynb"
    papermill.execute_notebook(str(notebooks / "00_connect.ipynb"), str(out), kernel_name="python3",
                               progress_bar=False, cwd=str(notebooks), execution_timeout=300,
                               parameters={"target": "local", "server_port": real_server.port, "lab_launch": ""})
    report = build_report([out], tmp_path / "report.md", markdown=True)
    text = (tmp_path / "report.md").read_text()
    server = real_server.server()
    assert f"<ServerProcess sglang 0.5.11 pid {server.pid} on local" in text
    assert server.command in text and "--device cpu" in text
    assert report is not None
