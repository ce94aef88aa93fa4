"""``sgl-kit profile --trace``: traces written by the real torch profiler (CPU; this machine has no GPU).

The trace is made at test time by torch 2.x's own ``torch.profiler`` in the sglang 0.5.11
dry-run environment, around steps named the way sglang names them
(``srt/model_executor/model_runner.py:3469-3476``: ``step[EXTEND bs=N toks=T]``,
``step[{mode.name} bs=N]``). It holds CPU ops and user annotations only: no CUDA runtime
or kernel events exist without a GPU, so the graph/kernel/NCCL paths are tested here only
for saying that they found none.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kit.errors import TraceError
from kit.metrics.collectives import comm_kind, group_collectives
from kit.metrics.trace import CPU_ONLY, iter_events, kernel_class, summarize_trace

pytestmark = pytest.mark.slow

MAKE_TRACE = textwrap.dedent("""
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, record_function
    out, decode_steps = sys.argv[1], int(sys.argv[2])
    w1, w2, x = torch.randn(64, 256), torch.randn(256, 64), torch.randn(4, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(decode_steps + 1):
            with record_function("step[EXTEND bs=4 toks=64]" if i == 0 else "step[DECODE bs=4]"):
                y = torch.nn.functional.layer_norm(torch.nn.functional.silu(x @ w1) @ w2, (64,))
                torch.softmax(y, -1).argmax(-1)
    prof.export_chrome_trace(out)
""")  # written for these tests


@pytest.fixture(scope="module")
def cpu_trace(env_0511, tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "1764000000-TP-0-DECODE.trace.json.gz"
    script = path.parent / "make_trace.py"
    script.write_text(MAKE_TRACE)
    proc = subprocess.run([str(env_0511.python), str(script), str(path), "7"], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return path


def test_steps_are_counted_by_mode_and_batch_size_from_the_real_profiler_output(cpu_trace):
    with gzip.open(cpu_trace, "rt") as fh:
        whole = json.load(fh)  # the reference: the standard library reading the file whole
    names = [e["name"] for e in whole["traceEvents"] if e.get("cat") == "user_annotation"]
    s = summarize_trace(cpu_trace)
    assert s.rank == {"tp": 0, "dp": None, "stage": "DECODE"}
    assert s.events == len(whole["traceEvents"]) and not s.truncated
    assert {k: v["count"] for k, v in s.steps.items()} == {
        "DECODE bs=4": names.count("step[DECODE bs=4]"), "EXTEND bs=4": names.count("step[EXTEND bs=4 toks=64]")}
    decode = [e["dur"] for e in whole["traceEvents"] if e.get("name") == "step[DECODE bs=4]"]
    assert s.steps["DECODE bs=4"]["total_us"] == pytest.approx(sum(decode))
    assert "aten::layer_norm" in [name for name, _, _ in s.top_cpu_ops]
    assert s.cpu_only and s.graphs.startswith("CPU trace: no CUDA events") and "not 'graphs off'" in s.graphs


def test_streaming_yields_the_same_events_as_reading_the_file_whole(cpu_trace):
    with gzip.open(cpu_trace, "rt") as fh:
        whole = json.load(fh)
    meta: dict = {}
    assert list(iter_events(cpu_trace, meta)) == whole["traceEvents"]
    assert meta["schemaVersion"] == whole["schemaVersion"]


def test_a_trace_cut_off_gives_what_was_read_and_says_where(cpu_trace, tmp_path):
    raw = gzip.open(cpu_trace).read()
    cut = tmp_path / "cut-TP-1.trace.json"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    s = summarize_trace(cut)
    assert s.truncated and s.events > 0 and s.rank["tp"] == 1
    assert s.problems[0].startswith(f"{cut} is cut off: ")
    assert sum(v["count"] for v in s.steps.values()) >= 1


@pytest.mark.parametrize("content, said", [
    (b'{"rid": "abc", "meta_info": {"completion_tokens": 3}}', "has no traceEvents"),
    (b"[2026-11-30 19:04:16 TP0] Decode batch, #running-req: 1\n", "is not a Chrome trace"),
])
def test_a_file_from_another_tool_is_refused_by_name(tmp_path, content, said):
    other = tmp_path / "other.json"
    other.write_bytes(content)
    with pytest.raises(TraceError) as err:
        summarize_trace(other)
    assert said in err.value.message and "trace.json.gz" in err.value.hint


def test_kernel_names_fall_into_classes():
    # Kernel names as CUDA profilers print them (written for this test, not taken from a trace).
    assert kernel_class("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == \
        "communication"
    assert kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert kernel_class("flash_fwd_splitkv_kernel") == "attention"
    assert kernel_class("fused_moe_kernel") == "moe"
    assert kernel_class("rms_norm_kernel") == "norm"
    assert kernel_class("void at::native::elementwise_kernel") == "other"


def test_sgl_kit_profile_prints_each_trace_and_names_the_one_it_could_not_read(cpu_trace, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a trace\n")
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "profile", "--trace", str(cpu_trace), str(bad)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert f"{cpu_trace}: " in proc.stdout and "DECODE bs=4" in proc.stdout
    assert f"{bad}: not summarized: {bad} is not a Chrome trace" in proc.stdout
    doc = json.loads(subprocess.run([sys.executable, "-m", "kit.cli", "profile", "--json", "--trace", str(cpu_trace)],
                                    capture_output=True, text=True, timeout=120).stdout)
    assert doc["traces"][0]["steps"]["EXTEND bs=4"]["count"] == 1


def test_graph_and_kernel_launches_are_told_apart_and_kernels_classed(tmp_path):
    # Written for this test (no public GPU trace with CUDA events was at hand): the event shapes
    # torch's Kineto export uses for CUDA runtime calls (cat cuda_runtime) and GPU kernels (cat kernel).
    def ev(cat, name, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 0.0, "dur": dur}

    events = ([ev("cuda_runtime", "cudaGraphLaunch", 5.0)] * 3 + [ev("cuda_runtime", "cudaLaunchKernel", 3.0)] * 2
              + [ev("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 40.0)] * 2
              + [ev("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 100.0)])
    path = tmp_path / "gpu-TP-3-DP-1-EXTEND.trace.json"
    path.write_text(json.dumps({"deviceProperties": [{"name": "NVIDIA RTX A6000"}], "traceEvents": events}))
    s = summarize_trace(path)
    assert s.rank == {"tp": 3, "dp": 1, "stage": "EXTEND"} and s.devices == ["NVIDIA RTX A6000"]
    assert (s.graph_launches, s.kernel_launches, s.kernels) == (3, 2, 3)
    assert s.graphs == "mixed: 3 CUDA graph launches and 2 eager kernel launches"
    assert s.kernel_us_by_class == {"communication": 80.0, "gemm": 100.0}
    assert s.nccl == {"kernels": 2, "summed_us": 80.0}
    assert "communication: 2 kernels" in s.to_text() and not s.cpu_only


# ---------------------------------------------------------------------------- the real server's own trace

REAL = Path(__file__).parent / "data" / "traces" / "1796170477.382793-TP-0.trace.json.gz"  # see SOURCES.md


def _whole(path):
    with gzip.open(path, "rt") as fh:
        return json.load(fh)  # the reference: the standard library reading the file whole


def test_the_real_sglang_trace_gives_steps_by_mode_and_says_cpu_only():
    doc = _whole(REAL)
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    s = summarize_trace(REAL)
    assert s.events == len(doc["traceEvents"]) and not s.truncated and s.rank["tp"] == 0
    want = {}
    for e in steps:  # step[EXTEND bs=1 toks=...] and step[DECODE bs=2], sglang's own names
        mode, bs = e["name"][5:-1].split()[:2]
        want.setdefault(f"{mode} {bs}", []).append(e["dur"])
    assert {k: v["count"] for k, v in s.steps.items()} == {k: len(v) for k, v in want.items()}
    assert {k.split()[0] for k in s.steps} == {"EXTEND", "DECODE"}
    assert all(s.steps[k]["total_us"] == pytest.approx(sum(v)) for k, v in want.items())
    # no CUDA graph launch, no kernel launch, no kernel: a CPU trace, and the summary says so
    assert (s.graph_launches, s.kernel_launches, s.kernels, s.cuda_events) == (0, 0, 0, 0)
    assert s.cpu_only and CPU_ONLY in s.to_text() and "graphs off" not in s.to_text().replace("'graphs off'", "")
    assert all(st["gpu_idle_us"] is None and st["cpu_bound"] is None for st in s.steps.values())
    cpu_ops = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert {"aten::mm", "aten::scaled_dot_product_attention"} <= {n for n, _, _ in s.top_cpu_ops} <= cpu_ops
    assert s.world["world_size"] == 1 and s.world["backend"] == "gloo"
    # Kineto's epoch time is baseTimeNanoseconds + ts: it lands on the profile id sglang put in the name
    first = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X")
    assert abs(s.base_us + first - float(REAL.name.split("-")[0]) * 1e6) < 30e6
    assert group_collectives([s]).kernels == 0


def _with_gpu_events(tmp_path, rank: int, skew_us: float, launch: str = "cudaLaunchKernel"):
    """The real trace's events plus GPU events WRITTEN HERE (this machine has no GPU, and no public
    multi-rank GPU trace could be brought here): per real step, a GEMM kernel over 30% of it, one NCCL
    all-reduce that starts ``rank * skew_us`` late and ends with every rank, and two launches of ``launch``."""
    doc = _whole(REAL)
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    written, expect = [], []
    for e in steps:
        ts, dur = e["ts"], e["dur"]
        gemm = (ts + 0.1 * dur, 0.3 * dur)
        ar_start = ts + 0.45 * dur + rank * skew_us
        ar = (ar_start, ts + 0.45 * dur + skew_us + 100.0 - ar_start)
        written += [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "pid": 0,
                     "tid": 7, "ts": gemm[0], "dur": gemm[1]},
                    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
                     "tid": 20, "ts": ar[0], "dur": ar[1]}]
        written += [{"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": e["pid"], "tid": e["tid"],
                     "ts": ts + 5.0 + i, "dur": 1.0} for i in range(2)]
        expect.append((e["name"], dur, dur - gemm[1] - ar[1]))  # the GPU idle in the step: no overlap written
    doc["traceEvents"] += written
    path = tmp_path / f"1796170477.382793-TP-{rank}.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path, expect


def test_gpu_idle_while_the_cpu_was_in_the_step_is_measured_per_step(tmp_path):
    path, expect = _with_gpu_events(tmp_path, rank=1, skew_us=1000.0)
    s = summarize_trace(path)
    assert not s.cpu_only and s.kernels == 2 * len(expect)
    assert s.idle["gpu_idle_us"] == pytest.approx(sum(i for _, _, i in expect))
    assert s.idle["step_us"] == pytest.approx(sum(d for _, d, _ in expect))
    assert s.idle["cpu_bound"] == sum(1 for _, d, i in expect if i / d >= 0.5)
    decode = [k for k in s.steps if k.startswith("DECODE")][0]
    assert s.steps[decode]["kernel_launches"] == 2 * s.steps[decode]["count"]
    assert s.steps[decode]["graph_launches"] == 0 and "CPU side: the GPU sat idle" in s.to_text()


def test_collectives_are_grouped_across_ranks_and_skew_is_apart_from_transfer(tmp_path):
    (a, expect), (b, _) = _with_gpu_events(tmp_path, 0, 2000.0), _with_gpu_events(tmp_path, 1, 2000.0)
    ranks = [summarize_trace(a), summarize_trace(b)]
    c = group_collectives(ranks)
    n = len(expect)
    assert (c.kernels, c.collectives, c.ranks) == (2 * n, n, ["TP0", "TP1"])
    assert c.skew_us == pytest.approx(2000.0 * n) and c.transfer_us == pytest.approx(100.0 * n)
    assert c.wall_us == pytest.approx(2100.0 * n)
    assert c.summed_us == pytest.approx((2100.0 + 100.0) * n) and c.summed_us > c.wall_us
    assert "AllReduce" in c.by_kind and "arrival skew" in c.to_text()
    one = group_collectives(ranks[:1])
    assert one.skew_us is None and one.collectives == n and "skew not measured" in one.to_text()


def test_ranks_with_different_counts_are_matched_and_said(tmp_path):
    a, _ = _with_gpu_events(tmp_path, 0, 500.0)
    s0, s1 = summarize_trace(a), summarize_trace(a)
    s1.rank = {"tp": 1, "dp": None, "stage": None}
    s1.comm_kernels = s1.comm_kernels[:-1]
    c = group_collectives([s0, s1])
    assert c.collectives == len(s1.comm_kernels) and "ranks hold different counts" in c.problems[0]


def test_communication_kernels_by_kind():
    # names as NCCL and sglang's custom all-reduce print them (written for this test)
    assert comm_kind("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "AllReduce"
    assert comm_kind("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)") == "AllGather"
    assert comm_kind("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)") == "custom AllReduce"
    assert comm_kind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == ""


@pytest.mark.parametrize("version, cls, fields", [
    ("0.5.11", "ProfileReqInput", {"output_dir", "start_step", "num_steps", "activities", "profile_by_stage"}),
    ("0.5.23", "ProfileReq", {"output_dir", "start_step", "num_steps", "activities", "detailed_annotations"}),
])
def test_start_profile_parameters_are_read_from_that_versions_source(version, cls, fields):
    from kit._paths import tree_dir
    from kit._wheels import install_package_source
    from kit.hosts import LocalHost
    from kit.metrics.profile import profile_api
    from kit.source import SourceTree

    tree = SourceTree.at(LocalHost(), install_package_source("sglang", version, prefix=str(tree_dir("sglang",
                                                                                                     version))))
    api = profile_api(tree)
    assert api.request_class == cls and fields <= set(api.fields)
    path, line = api.class_site.rsplit(":", 1)
    assert path == "srt/managers/io_struct.py"
    assert tree.read("sglang/" + path, int(line), int(line)).lines[0].startswith(f"class {cls}")
    assert api.handler_site.startswith("srt/entrypoints/http_server.py:")
    body, unknown = api.body(output_dir="/tmp/x", num_steps=3, not_a_field=1)
    assert body == {"output_dir": "/tmp/x", "num_steps": 3} and unknown == ["not_a_field"]


# ---------------------------------------------------------------------------- the doctor reads the summary

def _doctor(traces, args=None):
    from kit.doctor import Evidence, diagnose
    from kit.doctor.rules_trace import add_trace

    ev = Evidence("files", version="0.5.11", args=args or {})
    add_trace(ev, traces)
    return ev, {f.id: f for f in diagnose(ev).findings}


def test_the_doctor_fires_nothing_about_graphs_or_idle_on_the_real_cpu_trace():
    ev, found = _doctor([str(REAL)])
    assert ev.trace["summaries"][0].cpu_only and ev.sources["trace"] == str(REAL)
    assert not [f for f in found if f.startswith("trace-")]


def test_the_doctor_measures_eager_decode_cpu_bound_steps_and_the_wait_for_the_last_rank(tmp_path):
    (a, _), (b, _) = _with_gpu_events(tmp_path, 0, 40000.0), _with_gpu_events(tmp_path, 1, 40000.0)
    ev, found = _doctor([str(a), str(b)], {"disable_cuda_graph": False})
    assert {"trace-decode-eager", "trace-communication-share", "trace-cpu-bound"} <= set(found)
    for f in (found["trace-decode-eager"], found["trace-communication-share"], found["trace-cpu-bound"]):
        assert f.estimate.basis == "measured" and f.estimate.inputs and 0 < f.impact < 1
    s = ev.trace["summaries"]
    decode = [st for x in s for k, st in x.steps.items() if k.startswith("DECODE")]
    assert found["trace-decode-eager"].impact == pytest.approx(
        sum(st["gpu_idle_us"] for st in decode) / sum(st["total_us"] for st in decode))
    c = ev.trace["collectives"]
    step = max(sum(st["total_us"] for st in x.steps.values()) for x in s)
    assert found["trace-communication-share"].impact == pytest.approx(c.skew_us / step)
    # graphs off by the launch: decode running eager is then no finding
    _, off = _doctor([str(a)], {"disable_cuda_graph": True})
    assert "trace-decode-eager" not in off


def test_sgl_kit_doctor_reads_a_trace_and_a_cut_one_is_a_problem_not_the_end(tmp_path):
    (a, _), cut = _with_gpu_events(tmp_path, 0, 0.0), tmp_path / "cut-TP-1.trace.json"
    cut.write_bytes(gzip.open(REAL).read()[:50000])
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "doctor", "--json", "--trace", str(a), str(cut)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert "trace-cpu-bound" in [f["id"] for f in doc["findings"]]
    assert any("cut off" in p for p in doc["problems"])
