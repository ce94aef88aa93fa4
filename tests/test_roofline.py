"""The single-stream decode roofline (kit.doctor.roofline).

Every expected number is worked out here by hand from the config's sizes, not by calling the
code under test; published parameter counts are the second check. The configs under
tests/data/models/ are real hub configs (tests/data/models/SOURCES.md says where each came from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.doctor.roofline import ModelSize, Roofline, model_size, roofline
from kit.dryrun import gpu_profile
from kit.errors import KitError, ModelConfigError

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
MODELS = Path(__file__).resolve().parent / "data" / "models"


def _config(name: str) -> dict:
    return json.loads((MODELS / name / "config.json").read_text())


def _near(value: float, expected: float, tolerance: float) -> bool:
    return abs(value / expected - 1) <= tolerance


# --- the incident's model, Qwen3.6-27B, counted by hand

H, V, INTER = 5120, 248320, 17408
FULL_ATTN = (H * 24 * 256 * 2          # q_proj, doubled by attn_output_gate
             + 2 * H * 4 * 256         # k_proj, v_proj: 4 KV heads of 256
             + 24 * 256 * H)           # o_proj
KEY_DIM, VALUE_DIM = 16 * 128, 48 * 128
DELTANET = (H * (2 * KEY_DIM + 2 * VALUE_DIM)  # in_proj_qkvz
            + H * 2 * 48                       # in_proj_ba
            + (2 * KEY_DIM + VALUE_DIM) * 4    # conv1d, kernel 4
            + VALUE_DIM * H)                   # out_proj
MLP = 3 * H * INTER
LAYERS = 16 * (FULL_ATTN + MLP) + 48 * (DELTANET + MLP)
EMBED = V * H
INCIDENT_TOTAL = LAYERS + 2 * EMBED          # input embedding + untied lm_head
INCIDENT_PER_STEP = LAYERS + EMBED           # the lm_head, not the embedding table
INCIDENT_KV_PER_TOKEN = 16 * 2 * 4 * 256 * 2                       # 16 layers x (K,V) x 4 heads x 256 x bf16
INCIDENT_STATE = 2 * 48 * (48 * 128 * 128 * 4 + (2 * KEY_DIM + VALUE_DIM) * 3 * 2)  # fp32 state + bf16 conv, r+w


def _incident_bytes(context: int = 1024) -> float:
    return INCIDENT_PER_STEP * 2 + INCIDENT_KV_PER_TOKEN * context + INCIDENT_STATE


def test_the_incident_model_is_counted_by_hand():
    size = model_size(INCIDENT)
    assert size.architecture == "Qwen3_5ForConditionalGeneration"
    assert size.kind == "hybrid-linear"
    assert size.params_total == INCIDENT_TOTAL
    assert size.params_per_step == INCIDENT_PER_STEP
    assert _near(size.params_total, 26.9e9, 0.005) and _near(size.params_per_step, 25.6e9, 0.005)
    assert size.bytes_per_param == 2
    assert size.weight_bytes_per_step == INCIDENT_PER_STEP * 2
    assert size.kv_bytes_per_token == INCIDENT_KV_PER_TOKEN == 65536
    assert size.state_bytes_per_step == INCIDENT_STATE
    # one MTP layer: a full-attention layer with its MLP and the 2H -> H projection
    assert size.draft_params == FULL_ATTN + MLP + 2 * H * H
    text = " ".join(size.assumptions)
    assert "text_config" in text and "float32" in text and "norms, biases" in text


def test_the_incident_ceiling_on_two_a6000():
    result = roofline(INCIDENT, "NVIDIA RTX A6000", tp=2, context_tokens=1024)
    by_hand = 1.0 * (2 * 768e9) / _incident_bytes(1024)
    assert 27 <= result.ceiling_tok_s <= 31
    assert _near(result.ceiling_tok_s, by_hand, 0.01)
    assert result.bandwidth_gbs == 1536 and result.gpu == "NVIDIA RTX A6000" and result.tp == 2
    assert _near(result.bytes_per_step, _incident_bytes(1024), 1e-9)
    assert result.note == "" and result.percent_of_ceiling is None
    text = " ".join(result.assumptions)
    assert "1536 GB/s" in text and "51.62 GB" in text and "25.62B parameters" in text
    # the rough figure people quote: 27B x 2 bytes = 54 GB over 1536 GB/s = 28 tok/s; ours drops the embedding table
    assert result.ceiling_tok_s > 1536e9 / 54e9


def test_without_draft_reads_the_old_launch_looked_like_83_percent_of_its_ceiling():
    result = roofline(INCIDENT, "a6000", tp=2, accept_length=2.8, measured_tok_s=70)
    by_hand = 70 / (2.8 * 1536e9 / _incident_bytes(1024)) * 100
    assert 78 <= result.percent_of_ceiling <= 92 and result.disagree == ""  # not flagged below 95%
    assert result.percent_of_ceiling == pytest.approx(by_hand, rel=0.01)
    assert result.accept_length == 2.8 and result.measured_tok_s == 70
    assert any("MTP" in a and "One draft step reads 3.39 GB" in a for a in result.assumptions)


def test_a_round_reads_the_verify_and_every_draft_step_and_70_tok_s_is_then_implausible():
    without = roofline(INCIDENT, "a6000", tp=2, accept_length=2.84, measured_tok_s=70)
    result = roofline(INCIDENT, "a6000", tp=2, accept_length=2.84, measured_tok_s=70, speculative_steps=3,
                      accept_source="an assumed value")
    draft = result.draft_bytes_per_step
    assert draft == pytest.approx(3.39e9 + INCIDENT_KV_PER_TOKEN / 16 * 1024, rel=0.01)  # MTP layer + lm_head + KV
    assert result.bytes_per_round == pytest.approx(result.bytes_per_step + 3 * draft)
    assert result.ceiling_tok_s == pytest.approx(2.84 * 1536e9 / result.bytes_per_round)
    assert result.ceiling_without_draft_tok_s == pytest.approx(without.ceiling_tok_s)
    assert 69 < result.ceiling_tok_s < 72 < 83 < without.ceiling_tok_s < 86
    assert result.percent_of_ceiling > 95 and "the inputs disagree" in result.to_text()
    assert result.disagree.index("accept length 2.84 (an assumed value)") < result.disagree.index("the GPU")


def test_speculative_decoding_without_a_measured_accept_length_gives_the_ceiling_per_accept_length():
    result = roofline(INCIDENT, "a6000", tp=2, accept_length=None, speculative_steps=1)
    assert result.ceiling_tok_s is None and result.accept_length is None
    assert list(result.ceiling_by_accept) == ["1", "1.5", "2"]
    assert result.ceiling_by_accept["2"] == pytest.approx(2 * 1536e9 / result.bytes_per_round)
    text = result.to_text()
    assert "no speculative decoding" not in text and "accept length unknown" in text
    assert "Decode batch" in text and "sgl-kit bench" in text


def test_a_draft_models_own_config_sizes_the_draft_step():
    draft = MODELS / "llama-2-7b" / "config.json"
    result = roofline(INCIDENT, "a6000", tp=2, accept_length=2.0, speculative_steps=2, draft_config=draft)
    alone = roofline(draft, "a6000", tp=2)
    assert result.draft_bytes_per_step == pytest.approx(alone.bytes_per_step)
    assert result.bytes_per_round == pytest.approx(result.bytes_per_step + 2 * alone.bytes_per_step)


def test_context_and_tp_move_the_ceiling_the_way_the_model_says():
    short = roofline(INCIDENT, "a6000", tp=2, context_tokens=0)
    long = roofline(INCIDENT, "a6000", tp=2, context_tokens=100_000)
    assert long.bytes_per_step - short.bytes_per_step == pytest.approx(INCIDENT_KV_PER_TOKEN * 100_000)
    one = roofline(INCIDENT, gpu_profile("a6000"), tp=1)
    two = roofline(INCIDENT, gpu_profile("a6000"), tp=2)
    assert two.ceiling_tok_s == pytest.approx(2 * one.ceiling_tok_s)


# --- other families, from their real configs


def test_llama_2_7b_dense():
    h, inter, layers, v = 4096, 11008, 32, 32000
    per_layer = 4 * h * h + 3 * h * inter          # 32 KV heads: k and v are as big as q
    size = model_size(_config("llama-2-7b"))
    assert size.kind == "dense"
    assert size.params_total == layers * per_layer + 2 * v * h
    assert size.params_per_step == layers * per_layer + v * h
    assert _near(size.params_total, 6.74e9, 0.04)  # Meta's figure, with the embeddings
    assert size.bytes_per_param == 2               # float16
    assert size.kv_bytes_per_token == layers * 2 * 32 * 128 * 2
    assert size.state_bytes_per_step == 0 and size.draft_params == 0


def test_llama_3_1_8b_dense_with_gqa():
    h, inter, layers, v = 4096, 14336, 32, 128256
    per_layer = 2 * h * h + 2 * h * 8 * 128 + 3 * h * inter
    size = model_size(MODELS / "llama-3.1-8b")
    assert size.params_total == layers * per_layer + 2 * v * h
    assert _near(size.params_total, 8.03e9, 0.04)  # Meta's figure, with the embeddings


def test_mixtral_8x7b_reads_two_of_eight_experts():
    h, inter, layers, v = 4096, 14336, 32, 32000
    attn, expert, router = 2 * h * h + 2 * h * 8 * 128, 3 * h * inter, 8 * h
    size = model_size(_config("mixtral-8x7b"))
    assert size.kind == "moe"
    assert size.params_total == layers * (attn + 8 * expert + router) + 2 * v * h
    assert size.params_per_step == layers * (attn + 2 * expert + router) + v * h
    assert _near(size.params_total, 46.7e9, 0.04)                  # Mistral's figures include the embedding
    assert _near(size.params_per_step + v * h, 12.9e9, 0.04)
    assert any("2 of 8 experts" in a for a in size.assumptions)


def test_deepseek_v3_mla_and_experts():
    h, v = 7168, 129280
    mla = (h * 1536 + 1536 * 128 * (128 + 64)      # q_a, q_b
           + h * (512 + 64) + 512 * 128 * (128 + 128)  # kv_a_proj_with_mqa, kv_b
           + 128 * 128 * h)                        # o_proj
    dense_mlp, expert, router = 3 * h * 18432, 3 * h * 2048, 256 * h
    moe_total, moe_active = 257 * expert + router, 9 * expert + router  # 256 routed + 1 shared; 8 + 1 read
    size = model_size(MODELS / "deepseek-v3" / "config.json")
    assert size.kind == "mla-moe"
    assert size.params_total == 3 * (mla + dense_mlp) + 58 * (mla + moe_total) + 2 * v * h
    assert size.params_per_step == 3 * (mla + dense_mlp) + 58 * (mla + moe_active) + v * h
    # DeepSeek: 671B main model (the hub's 685B adds the MTP module), 36.6B activated incl. the
    # output head but not the embedding (README_WEIGHTS.md), 37B in the model card
    assert _near(size.params_total, 671e9, 0.04)
    assert _near(size.params_per_step, 36.6e9, 0.04) and _near(size.params_per_step, 37e9, 0.04)
    assert size.draft_params == mla + moe_total + 2 * h * h
    assert _near(size.draft_params, 11.5e9, 0.04)  # "11.5B unique parameters" of the MTP module
    assert size.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert size.bytes_per_param == 1 + 4 / (128 * 128)  # fp8 + a float32 scale per 128x128 block
    assert size.weight_bytes_per_step == (size.params_per_step - v * h) * (1 + 4 / 128**2) + v * h * 2


def test_mla_without_a_query_low_rank_projects_q_directly():
    config = {**_config("deepseek-v3"), "q_lora_rank": None}
    h = 7168
    with_lora = h * 1536 + 1536 * 128 * (128 + 64)
    direct = h * 128 * (128 + 64)
    assert model_size(_config("deepseek-v3")).params_total - model_size(config).params_total == \
        61 * (with_lora - direct)


def test_mla_without_its_head_dims_names_them():
    config = _config("deepseek-v3")
    del config["qk_rope_head_dim"], config["v_head_dim"]
    with pytest.raises(ModelConfigError, match="qk_rope_head_dim, v_head_dim"):
        model_size(config)


def test_qwen3_30b_a3b_moe():
    h, v = 2048, 151936
    attn, expert, router = 2 * h * 32 * 128 + 2 * h * 4 * 128, 3 * h * 768, 128 * h
    size = model_size(_config("qwen3-30b-a3b"))
    assert size.kind == "moe"
    assert size.params_total == 48 * (attn + 128 * expert + router) + 2 * v * h
    assert size.params_per_step == 48 * (attn + 8 * expert + router) + v * h
    assert _near(size.params_total, 30.5e9, 0.04)                 # Qwen's figures include the embedding
    assert _near(size.params_per_step + v * h, 3.3e9, 0.04)
    assert size.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2


def test_qwen3_5_35b_a3b_hybrid_linear_moe():
    h, v = 2048, 248320
    full = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h
    key_dim, value_dim = 16 * 128, 32 * 128
    deltanet = h * (2 * key_dim + 2 * value_dim) + h * 2 * 32 + (2 * key_dim + value_dim) * 4 + value_dim * h
    expert, fixed = 3 * h * 512, 3 * h * 512 + h + 256 * h  # shared expert, its gate, the router
    size = model_size(_config("qwen3.5-35b-a3b"))
    assert size.kind == "hybrid-linear-moe"
    assert size.params_total == 10 * full + 30 * deltanet + 40 * (256 * expert + fixed) + 2 * v * h
    assert size.params_per_step == 10 * full + 30 * deltanet + 40 * (8 * expert + fixed) + v * h
    assert _near(size.params_total, 35e9, 0.04)
    assert size.state_bytes_per_step == 2 * 30 * (32 * 128 * 128 * 4 + (2 * key_dim + value_dim) * 3 * 2)


def test_full_attention_interval_alone_gives_the_same_layout():
    config = json.loads(INCIDENT.read_text())
    del config["text_config"]["layer_types"]
    size = model_size(config)
    assert size.params_total == INCIDENT_TOTAL and size.kv_bytes_per_token == INCIDENT_KV_PER_TOKEN
    del config["text_config"]["linear_num_key_heads"]
    with pytest.raises(ModelConfigError, match="linear_num_key_heads"):
        model_size(config)


def test_mlp_only_layers_and_sparse_step_are_dense():
    config = _config("qwen3-30b-a3b")
    base = model_size(config)
    config.update(mlp_only_layers=[0, 1], decoder_sparse_step=1)
    size = model_size(config)
    expert, router, dense = 3 * 2048 * 768, 128 * 2048, 3 * 2048 * 6144
    assert base.params_total - size.params_total == 2 * (128 * expert + router - dense)
    assert base.params_per_step - size.params_per_step == 2 * (8 * expert + router - dense)
    config.update(mlp_only_layers=[], decoder_sparse_step=2)   # MoE on layers 1, 3, 5, ...
    assert model_size(config).params_total == base.params_total - 24 * (128 * expert + router - dense)


def test_tied_embeddings_are_held_once_and_read_as_the_lm_head():
    config = {**_config("llama-2-7b"), "tie_word_embeddings": True}
    untied = model_size(_config("llama-2-7b"))
    tied = model_size(config)
    assert untied.params_total - tied.params_total == 32000 * 4096
    assert tied.params_per_step == untied.params_per_step


# --- dtypes and quantization


@pytest.mark.parametrize(("quantization", "expected"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, 0.5 + (2 + 0.5) / 128),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32}, 0.5 + (2 + 0.5) / 32),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}, 0.5 + 2 / 128),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}, 1.0),
    ({"quant_method": "mxfp4"}, 0.5 + 1 / 32),
    ({"quant_method": "fp8"}, 1.0),
])
def test_quantized_weights_are_smaller_but_the_lm_head_is_not(quantization, expected):
    base = _config("llama-2-7b")
    size = model_size({**base, "torch_dtype": "bfloat16", "quantization_config": quantization})
    assert size.bytes_per_param == pytest.approx(expected)
    lm_head = 32000 * 4096
    assert size.weight_bytes_per_step == pytest.approx((size.params_per_step - lm_head) * expected + lm_head * 2)
    assert any("unquantized" in a for a in size.assumptions)


def test_an_unknown_quantization_is_counted_at_the_dtype_and_said():
    size = model_size({**_config("llama-2-7b"), "quantization_config": {"quant_method": "mystery"}})
    assert size.bytes_per_param == 2
    assert any("mystery" in a and "not understood" in a for a in size.assumptions)


def test_float32_and_missing_dtype():
    assert model_size({**_config("llama-2-7b"), "torch_dtype": "float32"}).bytes_per_param == 4
    config = _config("llama-2-7b")
    del config["torch_dtype"]
    size = model_size(config)
    assert size.bytes_per_param == 2 and any("bfloat16 assumed" in a for a in size.assumptions)


def test_the_safetensors_index_cross_checks_the_count(tmp_path):
    # The indexes in these tests are written by hand: no real model.safetensors.index.json is at hand.
    total = 6738149376  # Llama-2-7B by hand: 32 x (4h^2 + 3h x 11008) + 2 x 32000h, h = 4096
    index = {"metadata": {"total_size": total * 2 + 540_672}, "weight_map": {}}
    size = model_size(_config("llama-2-7b"), safetensors_index=index)
    line = next(a for a in size.assumptions if "the checkpoint holds" in a)
    assert f"{(total * 2 + 540_672) / 1e9:.2f} GB" in line and f"{total * 2 / 1e9:.2f} GB" in line
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps(index))
    assert model_size(_config("llama-2-7b"), safetensors_index=tmp_path).assumptions == size.assumptions


def test_without_a_dtype_the_index_gives_the_bytes_per_parameter():
    config = _config("llama-2-7b")
    del config["torch_dtype"]
    total = 6738149376
    size = model_size(config, safetensors_index={"metadata": {"total_size": total * 2}})
    assert size.bytes_per_param == pytest.approx(2.0)
    size = model_size(config, safetensors_index={"metadata": {"total_size": total}})  # 8-bit, say
    assert size.bytes_per_param == pytest.approx(1.0)
    assert any("total_size" in a and "every tensor" in a for a in size.assumptions)


def test_an_unreadable_index_is_a_model_config_error(tmp_path):
    with pytest.raises(ModelConfigError, match="safetensors index"):
        model_size(_config("llama-2-7b"), safetensors_index=tmp_path / "absent.json")


# --- bad input


def test_an_unknown_gpu_gives_no_ceiling_and_says_why():
    result = roofline(INCIDENT, "NVIDIA GeForce RTX 9999", tp=2, measured_tok_s=70)
    assert result.ceiling_tok_s is None and result.percent_of_ceiling is None and result.bandwidth_gbs is None
    assert "bandwidth unknown" in result.note and "NVIDIA GeForce RTX 9999" in result.note
    assert "kit/data/gpus.yaml" in result.note
    assert result.gpu == "NVIDIA GeForce RTX 9999"
    assert result.size is not None and result.bytes_per_step == pytest.approx(_incident_bytes(1024))


def test_no_gpu_gives_no_ceiling_and_a_clear_note():
    result = roofline(INCIDENT)
    assert result.ceiling_tok_s is None and result.gpu is None
    assert "no GPU given" in result.note and "gpu=" in result.note


def test_a_config_without_sizes():
    with pytest.raises(ModelConfigError) as caught:
        model_size({"architectures": ["X"]})
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        assert key in caught.value.message
    assert caught.value.hint
    result = roofline({"architectures": ["X"]}, "a6000")
    assert result.ceiling_tok_s is None and result.size is None and result.bytes_per_step is None
    assert "hidden_size" in result.note and "num_hidden_layers" in result.note and "vocab_size" in result.note


def test_a_missing_config_file_is_a_note_not_a_crash(tmp_path):
    result = roofline(tmp_path / "nowhere" / "config.json", "a6000")
    assert result.ceiling_tok_s is None and "cannot read" in result.note


def test_moe_without_experts_per_token_names_the_key():
    config = _config("mixtral-8x7b")
    del config["num_experts_per_tok"]
    with pytest.raises(ModelConfigError, match="num_experts_per_tok"):
        model_size(config)


def test_a_layer_type_it_cannot_count_is_refused():
    config = {**_config("llama-2-7b"), "layer_types": ["mamba", "attention"] * 16}
    with pytest.raises(ModelConfigError, match="mamba"):
        model_size(config)


@pytest.mark.parametrize("kwargs", [{"tp": 0}, {"accept_length": 0}, {"context_tokens": -1}])
def test_nonsense_arguments_raise(kwargs):
    with pytest.raises(KitError):
        roofline(INCIDENT, "a6000", **kwargs)


# --- output


def test_to_dict_is_json_and_carries_the_ceiling_and_assumptions():
    result = roofline(INCIDENT, "a6000", tp=2, accept_length=2.8, measured_tok_s=70)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["ceiling_tok_s"] == pytest.approx(result.ceiling_tok_s)
    assert data["assumptions"] == result.assumptions and data["size"]["params_total"] == INCIDENT_TOTAL
    bad = json.loads(json.dumps(roofline({"architectures": ["X"]}).to_dict()))
    assert bad["ceiling_tok_s"] is None and bad["note"]


def test_text_and_html():
    result = roofline(INCIDENT, "a6000", tp=2, accept_length=2.8, measured_tok_s=70)
    text = result.to_text()
    assert f"{result.ceiling_tok_s:.1f} tok/s" in text and "% of the ceiling" in text and "1536 GB/s" in text
    unknown = roofline({"architectures": ["<X>"]}, "<gpu>")
    assert "unknown" in unknown.to_text()
    page = unknown._repr_html_()
    assert "<gpu>" not in page and "&lt;gpu&gt;" in page
    assert isinstance(result, Roofline) and isinstance(result.size, ModelSize)


def test_parameter_counts_are_printed_with_a_unit_that_fits():
    """The real server's tiny CPU model has about 0.14M parameters: never "0.00e9 parameters"."""
    from kit.lab.tiny_model import qwen3_config

    tiny = roofline(qwen3_config(), "a6000", tp=1)
    count = tiny.size.params_total
    assert 1e5 < count < 1e6  # a few hundred thousand, so the unit is K
    text = " ".join(tiny.assumptions)
    assert f"{count / 1e3:.1f}K parameters" in text and "e9" not in text and "0.00" not in text
    big = " ".join(roofline(INCIDENT, "a6000", tp=2).assumptions)
    assert "B parameters in the language model" in big and "M parameters, not in the total" in big  # the MTP layer
