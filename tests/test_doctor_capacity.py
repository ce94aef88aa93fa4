"""kit.doctor.capacity on real launches: each formula's file:line is a real line of that release's source."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.doctor import from_files
from kit.doctor.capacity import FINDING, FINE, NOT_APPLICABLE, UNKNOWN, report
from kit.launch_file import source_tree

ROOT = Path(__file__).resolve().parent.parent
INCIDENTS = ROOT / "data" / "incidents"
REAL = ROOT / "tests" / "data" / "real_server"


def _line(version: str, where: str) -> str:
    path, line = where.rsplit(":", 1)
    return source_tree(None, version).read("sglang/" + path, int(line), int(line)).lines[0].strip()


def _sites_are_real(rep, version: str) -> None:
    for check in rep.checks:
        for site in check.sites:
            assert _line(version, site.where) == site.text, (check.id, site.where)


@pytest.fixture(scope="module")
def dense():
    # sglang-3488: DeepSeek-R1-Distill-Qwen-32B (dense), tp 4, sglang 0.4.2.post4; its check_env names the GPUs:
    # "GPU 0,1,2,3,4,5,6,7: NVIDIA GeForce RTX 4090"
    ev = from_files(paste=[str(INCIDENTS / "sglang-3488-check-env-topo" / "issue.md")], sglang="0.4.2.post4",
                    gpu="NVIDIA GeForce RTX 4090")
    return report(ev)


@pytest.fixture(scope="module")
def moe_dp():
    # sglang-2882: DeepSeek-V3, tp 8, --enable-dp-attention, --max-total-tokens 65536, sglang 0.4.1.post4
    ev = from_files(paste=[str(INCIDENTS / "sglang-2882-dp-attention-slower" / "issue.md")], sglang="0.4.1.post4",
                    model_config=str(ROOT / "tests" / "data" / "models" / "deepseek-v3" / "config.json"))
    assert ev.hardware.gpus[0].name == "NVIDIA H200" and len(ev.hardware.gpus) == 8  # from "8xH200"
    return report(ev)


@pytest.fixture(scope="module")
def hybrid():
    # a real sglang 0.5.11 server (tiny Qwen3.5, Gated DeltaNet + full attention) asked for 128 running requests
    ev = from_files(log=str(REAL / "qwen3_5-cpu-0.5.11-mrr128.log"), command=str(REAL / "qwen3_5-cpu-0.5.11-mrr128.cmd"),
                    sglang="0.5.11")
    return report(ev)


def test_dense_launch_graph_ceiling_and_chunk_from_the_gpu_memory_branch(dense):
    assert dense.version == "0.4.2.post4"
    _sites_are_real(dense, "0.4.2.post4")
    graph = dense.check("decode-graph-ceiling")
    # 24564 MiB < 25_000 and tp_size 4 >= 4: the branch that sets 80
    assert graph.input("cuda_graph_max_bs") == 80
    assert graph.sites[0].text == "self.cuda_graph_max_bs = 80" and graph.sites[0].where.startswith("srt/server_args.py:")
    assert any("<= self.max_bs" in s.text and "cuda_graph_runner.py" in s.where for s in graph.sites)
    assert graph.status == UNKNOWN and graph.input("max_running_requests") is None  # no ready line: not concluded
    chunk = dense.check("chunked-prefill")
    assert chunk.input("chunked_prefill_size") == 2048
    assert any(s.text == "self.chunked_prefill_size = 2048" for s in chunk.sites)
    kv = dense.check("kv-pool")
    assert kv.status == UNKNOWN and kv.input("max_total_num_tokens") is None
    assert any("config.json is not in the evidence" in n for n in kv.notes)
    assert dense.check("state-pool").status == NOT_APPLICABLE


def test_moe_dp_attention_launch(moe_dp):
    _sites_are_real(moe_dp, "0.4.1.post4")
    graph = moe_dp.check("decode-graph-ceiling")
    assert graph.input("dp (attention)") == 8  # DP attention: dp_size = tp_size
    # The thread's sentence names the GPU ("8xH200"): 141 GB is not under the 25 GB branch, so 160
    assert graph.input("cuda_graph_max_bs") == 160
    assert "per DP rank" in graph.conclusion and graph.status == UNKNOWN
    assert any("global_num_tokens" in s.text for s in graph.sites)
    kv = moe_dp.check("kv-pool")
    assert kv.status == FINDING
    assert kv.input("context_len") == 163840 and kv.input("cell_size (bytes/token)") == (512 + 64) * 61 * 2
    assert any("min(self.max_total_num_tokens, max_total_tokens)" in s.text for s in kv.sites)
    assert any("kv_lora_rank" in s.what and s.text.startswith("cell_size") for s in kv.sites)
    assert "at most 65536" in kv.conclusion and "cannot be admitted" in kv.conclusion
    assert moe_dp.check("state-pool").status == NOT_APPLICABLE


def test_hybrid_launch_state_pool_caps_running_requests(hybrid):
    _sites_are_real(hybrid, "0.5.11")
    state = hybrid.check("state-pool")
    assert state.status == FINDING
    assert state.input("max_mamba_cache_size") == 256 and state.input("max_running_requests asked") == 128
    assert state.input("max_running_requests") == 85
    assert "capped to 85" in state.conclusion
    assert any("256 // 3 = 85" in n for n in state.notes)
    kv = hybrid.check("kv-pool")
    assert kv.input("max_total_num_tokens") == 16384 and kv.input("context_len") == 4096
    assert kv.status == FINE and "4 request(s)" in kv.conclusion
    chunk = hybrid.check("chunked-prefill")
    assert chunk.input("chunked_prefill_size") == 2048 and chunk.status == FINE
    assert hybrid.check("decode-graph-ceiling").status == NOT_APPLICABLE  # --device cpu


def test_the_mamba_cap_notice_of_0_5_19():
    ev = from_files(paste=[str(INCIDENTS / "sglang-38846-mamba-cap-notice" / "issue.md")], sglang="0.5.19")
    rep = report(ev)
    _sites_are_real(rep, "0.5.19")
    state = rep.check("state-pool")
    assert state.status == FINDING and "47 // 5 = 9" in state.conclusion
    assert any(s.where.startswith("srt/mem_cache/kv_cache_configurator.py:") and "is capped to" in s.text
               for s in state.sites)


def test_silent_when_capacity_is_fine():
    # sglang-29575: a ready line that asks whether 2M tokens is the KV pool: it is, and nothing is short
    ev = from_files(paste=[str(INCIDENTS / "sglang-29575-ready-line-fine" / "issue.md")])
    rep = report(ev)
    assert rep.findings == []
    kv = rep.check("kv-pool")
    assert kv.status == FINE and kv.input("max_total_num_tokens") == 2086558
    assert "8 request(s)" in kv.conclusion
    # no version stated: the doctor infers one (the newest release here that fits the text's date), and the lines
    # cited are that release's own, with the report saying the release is assumed
    assert ev.version_basis in ("inferred", "assumed") and rep.version == ev.version
    _sites_are_real(rep, ev.version)
    assert rep.text().splitlines()[0] == f"capacity (sglang {ev.version} assumed ({ev.version_basis}): the lines cited are of that release)"


def test_the_doctor_reports_the_short_pool_and_stays_silent_when_it_is_fine():
    from kit.doctor import diagnose

    moe = diagnose(from_files(paste=[str(INCIDENTS / "sglang-2882-dp-attention-slower" / "issue.md")],
                              sglang="0.4.1.post4",
                              model_config=str(ROOT / "tests" / "data" / "models" / "deepseek-v3" / "config.json")))
    found = next(f for f in moe.findings if f.id == "kv-pool-short")
    assert "at most 65536" in found.evidence[0] and found.estimate.basis == "not estimated"
    fine = diagnose(from_files(paste=[str(INCIDENTS / "sglang-29575-ready-line-fine" / "issue.md")]))
    assert not any(f.id in ("kv-pool-short", "prefill-chunks-hold-decode") for f in fine.findings)
