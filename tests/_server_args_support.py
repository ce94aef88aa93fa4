"""Shared pieces of the server_args tests: real sglang sources and the incident's log line."""

from __future__ import annotations

from kit.server_args import FieldDefault, format_server_args

# What the incident's server resolved to on 2 x RTX A6000 (sglang 0.5.11): the values that
# matter to the story, plus the ones __post_init__ fills in for any CUDA box.
INCIDENT_VALUES = {
    "model_path": "/models/Qwen3.6-27B",
    "tokenizer_path": "/models/Qwen3.6-27B",
    "trust_remote_code": True,
    "host": "0.0.0.0",
    "port": 30000,
    "mem_fraction_static": 0.852,
    "max_running_requests": 48,
    "chunked_prefill_size": 8192,
    "page_size": 1,
    "device": "cuda",
    "tp_size": 2,
    "random_seed": 840158376,
    "served_model_name": "/models/Qwen3.6-27B",
    "attention_backend": "flashinfer",
    "sampling_backend": "flashinfer",
    "grammar_backend": "xgrammar",
    "mm_attention_backend": "sdpa",
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 1,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 2,
    "cuda_graph_max_bs": 48,
    "cuda_graph_bs": [1, 2, 4, 8, 12, 16, 24, 32, 40, 48],
    "disable_piecewise_cuda_graph": True,
    "piecewise_cuda_graph_max_tokens": 8192,
    "piecewise_cuda_graph_tokens": [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
    "reasoning_parser": "qwen3",
    "tool_call_parser": "qwen3_coder",
}

# argv of the two deployments, as /proc/PID/cmdline would give them.
OLD_ARGV = [
    "/root/ml-env/bin/python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/Qwen3.6-27B",
    "--tp",
    "2",
    "--trust-remote-code",
    "--host",
    "0.0.0.0",
    "--port",
    "30000",
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mem-fraction-static",
    "0.85",
]
NEW_ARGV = [
    "/root/ml-env/bin/python3",
    "/root/ml-env/bin/sglang",
    "serve",
    "--model-path",
    "/models/Qwen3.6-27B",
    "--tp-size",
    "2",
    "--trust-remote-code",
    "--host",
    "0.0.0.0",
    "--port",
    "30000",
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "1",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "2",
    "--chunked-prefill-size",
    "8192",
    "--reasoning-parser",
    "qwen3",
    "--tool-call-parser",
    "qwen3_coder",
]


def default_values(defaults: dict[str, FieldDefault]) -> dict:
    """Each field's default as a fresh ServerArgs on a CUDA box would hold it, in field order."""
    out = {}
    for name, fd in defaults.items():
        # pre_warm_nccl defaults to is_hip(): False on NVIDIA; model_path has no default.
        out[name] = fd.value if fd.known else (False if name == "pre_warm_nccl" else None)
    return out


def incident_values(defaults: dict[str, FieldDefault]) -> dict:
    values = default_values(defaults)
    unknown = set(INCIDENT_VALUES) - set(values)
    assert not unknown, f"not fields of this sglang: {unknown}"
    values.update(INCIDENT_VALUES)
    return values


def incident_line(defaults: dict[str, FieldDefault], when: str = "2026-05-01 10:00:00") -> str:
    # sglang 0.5.11 logs `logger.info(f"{server_args=}")` (srt/entrypoints/engine.py:679) through
    # the format "[%(asctime)s] %(message)s" set in prepare_server_args / configure_logger.
    return f"[{when}] server_args=" + format_server_args(incident_values(defaults))
