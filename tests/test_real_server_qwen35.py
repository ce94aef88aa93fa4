"""The kit against a real sglang server of the Qwen3.5 class: PyPI's sglang 0.5.11 on CPU, a tiny random
``Qwen3_5ForConditionalGeneration`` (one Gated DeltaNet layer, one full-attention layer, a one-block
vision tower), served text only.

Not lab tests: the server is sglang's own ``python -m sglang.launch_server`` (one per test session,
``qwen35_server`` in tests/_real_server_support.py), and every expectation is checked against what that
server itself says (its log, /server_info, /model_info) or against sglang 0.5.11's own source.
The plain-torch stand-ins of the five CPU sgl-kernel ops its linear-attention layers run are checked
against torch references other than their own (tests/_qwen35_ops_check.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
from _real_server_support import START_TIMEOUT

from kit.dryrun._env import inside_environment
from kit.dryrun.serve_env import SERVE_ENV, stand_ins
from kit.model_config import model_config_beside
from kit.provenance import explain_server
from kit.server_args import parse_decode_stats, parse_log
from kit.source import SourceTree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) + 600)]
HERE = Path(__file__).resolve().parent
EXCERPT = HERE / "data" / "real_server" / "qwen3_5-cpu-0.5.11.log"
FIVE_OPS = ("sgl_kernel.mamba.causal_conv1d_fn_cpu", "sgl_kernel.mamba.causal_conv1d_update_cpu",
            "torch.ops.sgl_kernel.fused_gdn_gating_cpu", "sgl_kernel.mamba.chunk_gated_delta_rule_cpu",
            "torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu")


def _get(url: str, timeout: float = 30) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _generate(url: str, tokens: int) -> dict:
    body = json.dumps({"text": "hello there", "sampling_params": {"max_new_tokens": tokens,
                                                                  "ignore_eos": True}}).encode()
    req = urllib.request.Request(url + "/generate", data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def _sglang_file(server, rel: str) -> list[str]:
    return SourceTree.of_server(server).read_text(rel).splitlines()


# ---------------------------------------------------------------------------- the stand-ins


def test_the_five_ops_and_the_norm_route_match_torch_references(qwen35_server):
    """Each plain-torch op against transformers' torch path of Qwen3.5 (and the gated RMSNorm against
    transformers' and sglang's own reference), in the server's environment, on small random tensors."""
    env = qwen35_server.lab.env
    proc = subprocess.run([str(env.python), "-P", str(HERE / "_qwen35_ops_check.py")], capture_output=True,
                          text=True, timeout=300, env=inside_environment(SERVE_ENV))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("causal_conv1d_update_cpu", "causal_conv1d_fn_cpu", "fused_gdn_gating_cpu",
                 "chunk_gated_delta_rule_cpu", "fused_sigmoid_gating_delta_rule_update_cpu",
                 "gated rmsnorm vs transformers", "gated rmsnorm vs sglang rms_norm_ref"):
        assert got[name] < 1e-5, (name, got[name])
    assert got["causal_conv1d_update_cpu pad slot untouched"] is True
    assert got["fused_sigmoid_gating_delta_rule_update_cpu other slots untouched"] is True
    assert got["fused_gdn_gating_cpu shape"] == [1, 7, 4] and got["chunk_gated_delta_rule_cpu third"] is True
    assert got["routed"] == ["sglang.srt.layers.attention.fla.layernorm_gated"]
    # narrow: sglang's own fallbacks still see what is missing
    assert got["refused"] == {
        "from sgl_kernel import rmsnorm": "ImportError",
        "torch.ops.sgl_kernel.rmsnorm_cpu": "AttributeError",
        "torch.ops.sgl_kernel.convert_weight_packed": "AttributeError",
        "torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu": "AttributeError",
        "causal_conv1d_update_cpu(intermediate_conv_window=...)": "TypeError",
        "layernorm_gated.LayerNorm": "NotImplementedError",
    }


def test_each_op_is_listed_where_sglang_imports_it(qwen35_server):
    """stand_ins.yaml names each op with the file:line of its import, and that line of the server's own
    sglang imports or reads that name; `lab status` lists them."""
    server = qwen35_server.server()
    ops = stand_ins()["sgl_kernel"]["ops"]
    assert set(ops) == set(FIVE_OPS)
    for op, why in ops.items():
        where = re.search(r"\b([\w/]+\.py):(\d+)", why)
        rel = where.group(1).removeprefix("sglang/")  # the yaml shortens paths after the first
        if not rel.startswith("srt/"):
            rel = ("srt/layers/attention/" if rel.startswith("linear/") else "srt/layers/attention/linear/") + rel
        line = _sglang_file(server, rel)[int(where.group(2)) - 1]
        assert op.rsplit(".", 1)[-1] in line, (op, rel, line)
        assert "is_cpu()" in "\n".join(_sglang_file(server, rel)[int(where.group(2)) - 6:int(where.group(2))])
    status = qwen35_server.lab.status()
    text = status.to_text()
    assert "model qwen3.5" in text
    for op in FIVE_OPS:
        assert f"op {op}:" in text
    assert "stand-in sgl_kit_routes:" in text
    assert qwen35_server.lab.env.check_info()["routes"] == ["sglang.srt.layers.attention.fla.layernorm_gated"]


# ---------------------------------------------------------------------------- the model as the kit reads it


def test_the_launch_skips_the_warmup_and_the_kit_reads_the_architecture(qwen35_server):
    server = qwen35_server.server()
    assert "--skip-server-warmup" in server.argv
    # the linear-attention state pool, capped (else sized from free host memory)
    assert server.argv[server.argv.index("--max-mamba-cache-size") + 1] == "256"
    assert "max_mamba_cache_size: 256," in server.log_text()
    logged = parse_log(server.log_text())
    assert logged.fields["skip_server_warmup"] is True
    # sglang's warmup sends a multimodal model an image (http_server.py): the reason for the flag
    source = "\n".join(_sglang_file(server, "srt/entrypoints/http_server.py"))
    assert 'is_vlm = bool(model_info.get("has_image_understanding", False))' in source
    assert "data:image/png;base64" in source
    config = model_config_beside(server.host, logged.fields["model_path"])
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["text_config"]["layer_types"] == ["linear_attention", "full_attention"]
    assert config["text_config"]["full_attention_interval"] == 2
    # the server itself says it is a multimodal (image-understanding) model
    info = _get(qwen35_server.url + "/model_info")
    assert info["has_image_understanding"] is True and info["is_generation"] is True


def test_why_the_prefill_graph_is_off_on_this_server(qwen35_server):
    """On CPU both rule 5 (Non-CUDA hardware) and rule 8 (Multimodal) write the flag in 0.5.11's
    _handle_piecewise_cuda_graph: every rule is its own `if`, none returns. The kit says both fired, and
    why rule 8 did, from the source (multimodal_model_archs), not from the incident."""
    server = qwen35_server.server()
    exp = explain_server(server, "disable_piecewise_cuda_graph")
    fired = [s.rule.split(" (")[0] for s in exp.sites if s.status == "fired"]
    lines = _sglang_file(server, "srt/server_args.py")
    rule8 = next(i for i, line in enumerate(lines, 1) if "# 8. Multimodal" in line)
    rule5 = next(i for i, line in enumerate(lines, 1) if "# 5. Non-CUDA" in line)
    assert rule5 < rule8 and "is_multimodal" in lines[rule8]
    assert "5. Non-CUDA hardware" in fired and any(r.startswith("8. Multimodal") for r in fired), exp.to_text()
    text = exp.to_text()
    assert "is_cpu() = True" in text
    assert "Qwen3_5ForConditionalGeneration is in multimodal_model_archs" in text
    assert server.server_info()["disable_piecewise_cuda_graph"] is True


# ---------------------------------------------------------------------------- the hybrid Decode batch line


def test_the_hybrid_decode_batch_line_is_read_by_the_kits_parser(qwen35_server):
    server = qwen35_server.server()
    start = len(server.log_text().splitlines())
    reply = _generate(qwen35_server.url, 96)
    assert reply["meta_info"]["completion_tokens"] == 96
    text = "\n".join(server.log_text().splitlines()[start:])
    raw = [line for line in text.splitlines() if "Decode batch" in line]
    stats = parse_decode_stats(text)
    assert raw and len(stats) == len(raw)
    for line, stat in zip(raw, stats, strict=True):
        # the hybrid pools instead of #token / token usage (0.5.11 scheduler_runtime_checker_mixin.py)
        assert "#full token: " in line and "mamba num: " in line and "#token: " not in line
        assert stat.full_tokens == int(re.search(r"#full token: (\d+)", line).group(1))
        assert stat.full_token_usage == float(re.search(r"full token usage: ([\d.]+)", line).group(1))
        assert stat.mamba_num == int(re.search(r"mamba num: (\d+)", line).group(1))
        assert stat.mamba_usage == float(re.search(r"mamba usage: ([\d.]+)", line).group(1))
        assert stat.tokens is None and stat.cuda_graph is False and stat.running_req == 1
    # one request: its full-attention tokens grow by the decode log interval between lines
    grown = [b.full_tokens - a.full_tokens for a, b in zip(stats, stats[1:], strict=False)]
    assert grown and set(grown) == {server.server_info()["decode_log_interval"]}


def test_the_saved_excerpt_is_this_servers_log_and_parses(qwen35_server):
    """tests/data/real_server holds a short excerpt of this server's log (see SOURCES.md there):
    its server_args line and Decode batch lines, read by the same parsers."""
    text = EXCERPT.read_text()
    logged = parse_log(text)
    assert logged.fields["device"] == "cpu" and logged.fields["skip_server_warmup"] is True
    stats = parse_decode_stats(text)
    assert len(stats) >= 2 and all(s.mamba_num is not None and s.full_tokens is not None for s in stats)
    # the same launch as this session's server, but for the lab's own directory and port
    live = parse_log(qwen35_server.server().log_text()).fields
    place = {"model_path", "tokenizer_path", "port", "served_model_name", "random_seed", "host", "nccl_port",
             "dist_init_addr", "file_storage_path"}
    differ = {k for k in logged.fields if k in live and logged.fields[k] != live[k]} - place
    assert not differ, {k: (logged.fields[k], live[k]) for k in differ}


# ---------------------------------------------------------------------------- doctor


def test_doctor_live_on_the_qwen35_server_gives_no_gpu_advice(qwen35_server):
    from kit.doctor import doctor

    diagnosis = doctor("local", host=qwen35_server.host, port=qwen35_server.port)
    text = diagnosis.to_text()
    assert "sglang 0.5.11" in text and "Qwen3_5ForConditionalGeneration" in text
    prescribed = [str(c) for f in diagnosis.findings for c in f.changes]
    assert not [c for c in prescribed if "attention-backend" in c or "cuda-graph" in c], prescribed
    by_id = {f.id: f for f in diagnosis.findings}
    apart = {f.id: f for f in diagnosis.not_applicable}  # the GPU rules on a CPU server: listed apart
    for rid in ("decode-cuda-graph-off", "prefill-cuda-graph-off"):
        assert rid not in by_id
        assert apart[rid].estimate.reason.startswith("does not apply: device = 'cpu'"), apart[rid].estimate
        assert not apart[rid].changes
    # no finding about what the server does not do: it chunks its prefill, it runs no speculative decoding
    assert "chunked-prefill-off-for-vlm" not in by_id
    assert not [f for f in diagnosis.findings if "spec" in f.id or "eagle" in f.id.lower()]

