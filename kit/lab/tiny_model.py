"""A tiny random model for the real-engine lab, made on this machine: no hub is reachable.

``python tiny_model.py OUT_DIR [--model qwen3|qwen3.5]`` runs inside the real-server environment
(it needs torch, transformers and tokenizers) and writes a Hugging Face model directory:

- ``config.json`` and ``model.safetensors``: random weights from a fixed seed, saved by transformers:
  ``qwen3``, a ``Qwen3ForCausalLM`` (hidden 64, 2 layers, 4 heads, 2 KV heads); ``qwen3.5``, a
  ``Qwen3_5ForConditionalGeneration``, the class of the incident's model: a text model of hidden 64
  with one Gated DeltaNet (linear-attention) layer then one full-attention layer, and a vision
  tower of one block. Its config holds the keys of transformers' own ``Qwen3_5Config`` plus
  ``text_config.full_attention_interval``, which sglang 0.5.11 reads
  (srt/configs/qwen3_next.py:259, ``layers_block_type``) and transformers 5.6 does not save
  (it turns it into ``layer_types``, configuration_qwen3_5.py:107);
- ``tokenizer.json`` and ``tokenizer_config.json``: a byte-level BPE tokenizer trained here
  with ``tokenizers`` on this file's own text (so it is the same on every machine), with
  a ChatML chat template, so ``/v1/chat/completions`` works.

The model answers with random tokens: it exists so that a real sglang server starts,
schedules, streams and logs, not to say anything. Standard library at module level: the
kit imports this module only to know its path and the model names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MODELS = {"qwen3": "Qwen3ForCausalLM", "qwen3.5": "Qwen3_5ForConditionalGeneration"}
VOCAB = 1024
SEED = 0
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen3.5's vision tokens (the processor and sglang's multimodal processor look them up by text)
VISION_SPECIAL = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def qwen3_config() -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0,
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
    }


def qwen3_5_config() -> dict:
    """Transformers' Qwen3_5Config keys, tiny: head_dim 32 with a quarter of it rotary (as the real
    model), multimodal RoPE sections summing to that quarter's half, one linear layer then one full."""
    text = {
        "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": VOCAB,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": 0.0, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "layer_types": ["linear_attention", "full_attention"], "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    }
    vision = {
        "model_type": "qwen3_5", "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
        "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "out_hidden_size": 64, "num_position_embeddings": 64, "hidden_act": "gelu_pytorch_tanh",
    }
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
            "vision_config": vision, "tie_word_embeddings": True,  # token ids: the tokenizer's, set after it is made
            "image_token_id": VOCAB - 4,
            "video_token_id": VOCAB - 3, "vision_start_token_id": VOCAB - 2, "vision_end_token_id": VOCAB - 1}


def _build(model: str):
    import transformers

    if model == "qwen3":
        config = transformers.Qwen3Config(**{k: v for k, v in qwen3_config().items() if k != "architectures"})
        config.architectures = [MODELS[model]]
        return transformers.Qwen3ForCausalLM(config)
    spec = qwen3_5_config()
    config = transformers.Qwen3_5Config(**{k: v for k, v in spec.items() if k not in ("architectures", "model_type")})
    config.architectures = [MODELS[model]]
    return transformers.Qwen3_5ForConditionalGeneration(config)


def _fix_config(cfg: dict, model: str, ids: dict) -> dict:
    cfg.update(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    if model == "qwen3.5":
        cfg.update(vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                   image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"])
        text = cfg["text_config"]
        text.update(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], full_attention_interval=2)
        assert text["layer_types"] == ["linear_attention", "full_attention"], text["layer_types"]
    return cfg


def _save_processor(out: Path) -> None:
    """Qwen3.5's processor (transformers' Qwen3VLProcessor, the PIL image processor), which sglang loads
    at start for a multimodal model (managers/tokenizer_manager.py:296) even when it serves text only."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    image = transformers.Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2)
    video = transformers.Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2)
    transformers.Qwen3VLProcessor(image_processor=image, tokenizer=tok, video_processor=video).save_pretrained(str(out))


def make_tokenizer(out: Path, extra_special: list[str] | None = None) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL + (extra_special or []),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(Path(__file__).read_text().splitlines() * 4, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "bos_token": None, "chat_template": CHAT_TEMPLATE,
    }, indent=1) + "\n")


def make(out: Path, model: str) -> dict:
    import torch

    if model not in MODELS:
        raise SystemExit(f"unknown tiny model {model!r}; known: {', '.join(MODELS)}")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    net = _build(model).to(torch.bfloat16)
    net.save_pretrained(str(out), safe_serialization=True)
    make_tokenizer(out, VISION_SPECIAL if model == "qwen3.5" else None)
    if model == "qwen3.5":
        _save_processor(out)
    eos = json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in eos}
    cfg = _fix_config(json.loads((out / "config.json").read_text()), model, ids)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    return {"model": model, "architecture": MODELS[model], "dir": str(out), "bytes": size,
            "parameters": sum(p.numel() for p in net.parameters())}


def main() -> None:
    args = sys.argv[1:]
    model = "qwen3"
    if "--model" in args:
        i = args.index("--model")
        model = args[i + 1]
        del args[i:i + 2]
    print(json.dumps(make(Path(args[0]), model)))


if __name__ == "__main__":
    main()
