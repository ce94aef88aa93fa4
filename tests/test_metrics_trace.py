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

import pytest

from kit.errors import TraceError
from kit.metrics.trace import iter_events, kernel_class, summarize_trace

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
    assert s.graphs.startswith("no CUDA launches in this trace")


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
    assert "not grouped into collectives" in s.to_text()
