"""A tiny random model for the real-engine lab, made on this machine: no hub is reachable.

``python tiny_model.py OUT_DIR [--model qwen3]`` runs inside the real-server environment
(it needs torch, transformers and tokenizers) and writes a Hugging Face model directory:

- ``config.json`` and ``model.safetensors``: a ``Qwen3ForCausalLM`` (hidden 64, 2 layers,
  4 heads, 2 KV heads) with random weights from a fixed seed, saved by transformers;
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

MODELS = {"qwen3": "Qwen3ForCausalLM"}
VOCAB = 1024
SEED = 0
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen3_config() -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0,
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
    }


def make_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(Path(__file__).read_text().splitlines() * 4, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "bos_token": None, "chat_template": CHAT_TEMPLATE,
    }, indent=1) + "\n")


def make(out: Path, model: str) -> dict:
    import torch
    import transformers

    if model not in MODELS:
        raise SystemExit(f"unknown tiny model {model!r}; known: {', '.join(MODELS)}")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = transformers.Qwen3Config(**{k: v for k, v in qwen3_config().items() if k != "architectures"})
    config.architectures = [MODELS[model]]
    net = transformers.Qwen3ForCausalLM(config).to(torch.bfloat16)
    net.save_pretrained(str(out), safe_serialization=True)
    make_tokenizer(out)
    eos = json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in eos}
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
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
