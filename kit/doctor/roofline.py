"""The single-stream decode roofline: the most tokens per second one request can get from these GPUs.

Decoding one stream is memory-bound. Each step computes very little per byte, so its time is the
time to read what it needs from GPU memory: every weight the step uses (once, whatever the batch),
the KV cache of the context so far (full-attention layers only), and the fixed-size recurrent state
of linear-attention layers (read and written back). So::

    tokens/s  <=  accepted tokens per step  x  aggregate bandwidth  /  bytes per step

with the aggregate bandwidth = tp x the GPU's peak (``kit/data/gpus.yaml``): with tensor
parallelism each GPU reads its 1/tp share of the weights at the same time.

Everything is counted from the model's ``config.json`` (:func:`model_size`): attention and MLP
matrices, experts (only the ``num_experts_per_tok`` a token is routed to, plus shared experts, are
read in a step), DeepSeek's MLA low-rank projections, and Qwen3-Next / Qwen3.5 Gated DeltaNet
layers. The input embedding is not read whole (a lookup reads one row); the lm_head is.

What this is not: a prediction. Real kernels reach roughly 80-90% of the datasheet bandwidth, and
compute, kernel-launch gaps, the all-reduce between GPUs, sampling and the scheduler all add time,
so a healthy server lands somewhat below the ceiling and a server far below it is leaving speed on
the table. Norms, biases and rotary tables are ignored; the KV cache is assumed in the model's
dtype; sliding-window layers are counted as full attention; mamba layers are not counted yet (the
config is refused with a message).

Speculative decoding runs in rounds: ``steps`` draft forwards, then one verify forward of the target
that reads its weights once for all the verified tokens. So a round reads the verify's bytes plus
``steps`` x one draft step's (the draft layers and the lm_head they share; from the draft model's own
config when given, else from the target's MTP fields), and yields the accept length in tokens::

    tokens/s  <=  accept length  x  aggregate bandwidth  /  (verify bytes + steps x draft bytes)

The accept length comes only from evidence (``Decode batch`` lines, a benchmark); without it the
ceiling is given per accept length, and the headline ceiling is unknown. A measured rate above ~95%
of the ceiling is not "fine": it means an input is wrong, and the roofline says which one it suspects.
Every number and assumption is listed in ``Roofline.assumptions``.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..dryrun import GpuProfile, UnknownGPU, gpu_profile
from ..errors import ModelConfigError, UsageError
from ..model_config import load_model_config

__all__ = ["ModelSize", "Roofline", "model_size", "roofline"]

_DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4,
                "float": 4, "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1}
_NESTED = ("text_config", "language_config", "llm_config")
_FULL = {"full_attention", "attention", "global_attention", "sliding_attention"}


@dataclass
class ModelSize:
    """How much one decode step of the model reads, counted from its config.json."""

    architecture: str
    kind: str
    params_total: int
    params_per_step: int
    bytes_per_param: float
    weight_bytes_per_step: float
    kv_bytes_per_token: float
    state_bytes_per_step: float
    draft_params: int = 0
    draft_step_bytes: float = 0.0  # one MTP draft step: its layer(s), the lm_head, its KV per context token excluded
    draft_kv_bytes_per_token: float = 0.0
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _gb(n: float) -> str:
    if not n:
        return "0"
    if n >= 1e8:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB" if n >= 1e2 else f"{n:.0f} bytes"


def _params(n: float) -> str:
    """A parameter count with the unit that fits it: 25.62B, 420.5M, 1.2M, 3.4K, 512."""
    for unit, scale, digits in (("B", 1e9, 2), ("M", 1e6, 1), ("K", 1e3, 1)):
        if abs(n) >= scale:
            return f"{n / scale:.{digits}f}{unit}"
    return f"{n:.0f}"


def _dtype_bytes(name: Any) -> int | None:
    return _DTYPE_BYTES.get(str(name).lower().removeprefix("torch.")) if name else None


def _quantization(q: Mapping) -> tuple[float | None, str]:
    """Bytes per quantized weight and how that figure was reached (None: not understood)."""
    method = str(q.get("quant_method") or "").lower()
    if method == "mxfp4":
        return 0.5 + 1 / 32, "mxfp4 weights: 4 bits plus one 8-bit scale per 32 values (0.53 bytes per parameter)"
    if method in ("fp8", "fbgemm_fp8") or str(q.get("quant_algo", "")).upper() == "FP8":
        block = q.get("weight_block_size")
        if isinstance(block, list | tuple) and len(block) == 2 and all(block):
            extra = 4 / (block[0] * block[1])
            return 1 + extra, (f"fp8 weights (quant_method {method or 'fp8'}): 1 byte per parameter plus one float32 "
                               f"scale per {block[0]}x{block[1]} block ({1 + extra:.4f} bytes)")
        return 1.0, f"fp8 weights (quant_method {method or 'fp8'}): 1 byte per parameter (per-tensor scales ignored)"
    if method == "compressed-tensors":
        groups = [g.get("weights") for g in (q.get("config_groups") or {}).values() if isinstance(g, Mapping)]
        weights = next((w for w in groups if isinstance(w, Mapping) and w.get("num_bits")), None)
        if weights is None:
            return None, "compressed-tensors config without config_groups.*.weights.num_bits"
        bits, group = int(weights["num_bits"]), weights.get("group_size")
        extra = 2 / group if group else 0.0
        how = f"one 16-bit scale per group of {group}" if group else "per-channel scales ignored"
        return bits / 8 + extra, (f"compressed-tensors {bits}-bit weights ({weights.get('type', 'int')}): "
                                  f"{bits / 8:g} byte per parameter plus {how} ({bits / 8 + extra:.4f} bytes)")
    bits = q.get("bits") or q.get("w_bit") or (4 if q.get("load_in_4bit") else 8 if q.get("load_in_8bit") else None)
    if bits:
        group = q.get("group_size") or q.get("q_group_size") or (64 if method == "bitsandbytes" else 128)
        extra = (2 + bits / 8) / group if group and group > 0 else 0.0
        return bits / 8 + extra, (f"{method or 'integer'} {bits}-bit weights: {bits / 8:g} byte per parameter plus "
                                  f"one 16-bit scale and one {bits}-bit zero point per group of {group} "
                                  f"({bits / 8 + extra:.4f} bytes)")
    return None, f"quantization {method or q!r} is not understood"


def _read_index(index: Any) -> dict:
    if isinstance(index, Mapping):
        return dict(index)
    path = Path(os.fspath(index))
    path = path / "model.safetensors.index.json" if path.is_dir() else path
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelConfigError(f"cannot read the safetensors index {path}: {err}",
                               hint="pass model.safetensors.index.json (or its dict), or leave it out") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path} is not a JSON object", hint="is this model.safetensors.index.json?")
    return data


def model_size(config: Any, *, safetensors_index: Any = None) -> ModelSize:
    """The parameters and bytes one decode step reads, from a config.json (dict, file or directory).

    Raises ModelConfigError naming the missing keys when the config does not give the sizes.
    """
    cfg = load_model_config(config)
    if cfg is None:
        raise ModelConfigError("no model config given", hint="pass the model's config.json, its directory or a dict")
    nested = next((k for k in _NESTED if isinstance(cfg.get(k), Mapping) and "hidden_size" in cfg[k]), None)
    lm = dict(cfg[nested]) if nested else cfg

    def get(key: str, default: Any = None) -> Any:
        value = lm.get(key)
        return cfg.get(key, default) if value is None else value

    architecture = (cfg.get("architectures") or [""])[0]

    def need(*keys: str, absent: list[str] | None = None) -> list[int]:
        absent = [k for k in keys if not get(k)] if absent is None else absent
        if absent:
            raise ModelConfigError(
                f"the model config{f' ({architecture})' if architecture else ''} has no {', '.join(absent)}: "
                "the roofline cannot size the model",
                hint="pass the language model's own config.json (the one beside the weights); for a multimodal "
                     "model the keys may sit in its text_config")
        return [int(get(k)) for k in keys]

    H, L, V, heads = need("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")
    kv_heads, head_dim = int(get("num_key_value_heads") or heads), int(get("head_dim") or H // heads)
    notes = [f"language model read from config[{nested!r}]; the vision tower is not counted"] if nested else []
    notes.append("counted from the config: attention projections, gated MLPs (3 matrices of hidden x intermediate), "
                 "experts and routers; norms, biases and rotary tables are ignored (well under 0.1% of weights)")

    types = get("layer_types")
    interval = get("full_attention_interval")
    if not (isinstance(types, list) and len(types) >= L):
        linear = interval and get("linear_num_value_heads")
        types = ["linear_attention" if linear and (i + 1) % interval else "full_attention" for i in range(L)]
    types = [str(t) for t in types[:L]]
    unknown = sorted({t for t in types if t not in _FULL and t != "linear_attention"})
    if unknown:
        raise ModelConfigError(f"layer type {unknown[0]!r} of {architecture or 'this model'} is not counted yet",
                               hint="the roofline knows full attention and Gated DeltaNet linear attention layers")
    if "sliding_attention" in types:
        notes.append("sliding-window layers are counted as full attention (their KV read is overstated past "
                     "the window)")

    # attention: one full-attention layer, and the KV elements it keeps per token
    if get("kv_lora_rank"):
        r, nope, rope, v_dim = need("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        q_r = get("q_lora_rank")
        q = (H * q_r + q_r * heads * (nope + rope)) if q_r else H * heads * (nope + rope)
        attn = q + H * (r + rope) + r * heads * (nope + v_dim) + heads * v_dim * H
        kv_elems, kv_how = r + rope, f"(kv_lora_rank {r} + qk_rope_head_dim {rope})"
    else:
        gate = get("attn_output_gate", str(get("model_type", "")).startswith("qwen3_next"))
        attn = H * heads * head_dim * (2 if gate else 1) + 2 * H * kv_heads * head_dim + heads * head_dim * H
        kv_elems, kv_how = 2 * kv_heads * head_dim, f"2 (K, V) x {kv_heads} KV heads x {head_dim} head_dim"

    # Gated DeltaNet linear attention
    lin_params = lin_state = lin_conv = 0
    if "linear_attention" in types:
        nk, dk, nv, dv = need("linear_num_key_heads", "linear_key_head_dim", "linear_num_value_heads",
                              "linear_value_head_dim")
        kernel = int(get("linear_conv_kernel_dim", 4))
        kd, vd = nk * dk, nv * dv
        lin_params = H * (2 * kd + 2 * vd) + H * 2 * nv + (2 * kd + vd) * kernel + vd * H
        lin_state, lin_conv = nv * dk * dv, (2 * kd + vd) * (kernel - 1)

    # MLP or experts of layer i: (parameters held, parameters read in one step)
    n_exp = int(get("num_experts") or get("num_local_experts") or get("n_routed_experts") or 0)
    top = int(get("num_experts_per_tok") or 0)
    expert_inter = get("moe_intermediate_size") or get("intermediate_size")
    shared = get("shared_expert_intermediate_size") or (get("n_shared_experts") or 0) * (expert_inter or 0)
    dense_inter = get("intermediate_size")

    def is_moe(i: int) -> bool:
        step, freq = get("decoder_sparse_step") or 1, get("moe_layer_freq") or 1
        return bool(n_exp) and i >= (get("first_k_dense_replace") or 0) and i not in (get("mlp_only_layers") or []) \
            and (i + 1) % step == 0 and (not isinstance(freq, int) or i % freq == 0)

    moe_layers = [i for i in range(L) if is_moe(i)]
    need(absent=[k for k, bad in (("intermediate_size", len(moe_layers) < L and not dense_inter),
                                  ("num_experts_per_tok", moe_layers and not top),
                                  ("moe_intermediate_size", moe_layers and not expert_inter)) if bad])

    def mlp(i: int) -> tuple[int, int]:
        if not is_moe(i):
            return 3 * H * int(dense_inter), 3 * H * int(dense_inter)
        fixed = 3 * H * int(shared) + (H if get("shared_expert_intermediate_size") else 0) + n_exp * H
        return n_exp * 3 * H * int(expert_inter) + fixed, top * 3 * H * int(expert_inter) + fixed

    total = active = 0
    for i, kind in enumerate(types):
        held, read = mlp(i)
        mixer = attn if kind in _FULL else lin_params
        total, active = total + mixer + held, active + mixer + read
    full_layers, lin_layers = sum(t in _FULL for t in types), types.count("linear_attention")
    tied = get("tie_word_embeddings")
    embed = V * H
    params_total = total + embed + (0 if tied else embed)
    params_per_step = active + embed
    notes.append(f"{_params(params_total)} parameters in the language model (with the {_params(embed)} input embedding); "
                 f"{_params(params_per_step)} read per decode step: the embedding lookup reads one row, the lm_head "
                 f"({_params(embed)}{', tied to the embedding' if tied else ''}) is read whole")
    if tied is None:
        notes.append("the config does not say whether the lm_head is tied to the embedding; counted as untied")
    if moe_layers:
        shared_text = f" plus shared experts of intermediate {shared}" if shared else ""
        notes.append(f"MoE: {top} of {n_exp} experts (intermediate {expert_inter}){shared_text} read per step in "
                     f"{len(moe_layers)} of {L} layers; every expert is in the total. A single stream reads only "
                     "its own experts; a batch would read more")
    if lin_layers:
        notes.append(f"hybrid attention: {full_layers} of {L} layers are full attention (KV cache), {lin_layers} "
                     "are Gated DeltaNet linear attention (a fixed-size state, no KV cache)")
    kind = "mla" if get("kv_lora_rank") else "hybrid-linear" if lin_layers else "dense"
    kind = ("moe" if kind == "dense" else kind + "-moe") if moe_layers else kind

    # MTP / nextn draft layers: a full-attention layer + an MLP like the model's last + a 2H -> H projection
    n_draft = int(get("num_nextn_predict_layers") or get("mtp_num_hidden_layers") or 0)
    draft_held, draft_read = (x + attn + 2 * H * H for x in mlp(L)) if n_draft else (0, 0)
    draft_params = n_draft * draft_held

    # bytes per parameter
    dtype_name = get("torch_dtype") or get("dtype")
    dtype = _dtype_bytes(dtype_name)
    unquantized = float(dtype or 2)
    q = cfg.get("quantization_config") or lm.get("quantization_config")
    index = _read_index(safetensors_index) if safetensors_index is not None else None
    meta = index.get("metadata") if index else None
    stored = meta.get("total_size") if isinstance(meta, Mapping) else None
    stored = stored if isinstance(stored, int | float) and stored > 0 else None
    bpp, from_index = None, False
    if isinstance(q, Mapping):
        bpp, how = _quantization(q)
        notes.append(how if bpp else f"{how}; counted at the dtype's {unquantized:g} bytes per parameter")
        if bpp:
            notes.append(f"the lm_head stays unquantized at {unquantized:g} bytes ({dtype_name or 'bfloat16 assumed'})")
    if bpp is None and dtype:
        bpp = float(dtype)
        notes.append(f"weights in {dtype_name}: {dtype} bytes per parameter")
    if bpp is None and stored:
        bpp = unquantized = stored / (params_total + draft_params)
        from_index = True
        notes.append(f"no dtype in the config: {bpp:.3f} bytes per parameter = the checkpoint's metadata.total_size "
                     f"{_gb(stored)} / the {_params(params_total + draft_params)} parameters counted over every tensor "
                     "(vision-tower weights, if any, are not counted, so this overstates it slightly)")
    if bpp is None:
        bpp = unquantized = 2.0
        notes.append("no dtype in the config: bfloat16 assumed (2 bytes per parameter)")
    weight_bytes = (params_per_step - embed) * bpp + embed * unquantized
    if stored and not from_index:
        tables = embed * (1 if tied else 2)
        counted = (params_total + draft_params - tables) * bpp + tables * unquantized
        notes.append(f"the checkpoint holds {_gb(stored)} (safetensors metadata.total_size); the count above gives "
                     f"{_gb(counted)} (with the draft layers)")
    elif index is not None and not stored:
        notes.append("the safetensors index has no metadata.total_size; nothing to cross-check")

    kv_bytes = full_layers * kv_elems * unquantized
    notes.append(f"KV cache: {full_layers} full-attention layers x {kv_how} x {unquantized:g} bytes = "
                 f"{kv_bytes:,.0f} bytes per context token (assumed in the model dtype; --kv-cache-dtype changes it)")
    state_bytes = 0.0
    if lin_layers:
        ssm_name = get("mamba_ssm_dtype") or "float32, assumed"
        ssm = _dtype_bytes(get("mamba_ssm_dtype")) or 4
        state = lin_layers * lin_state * ssm
        conv = lin_layers * lin_conv * unquantized
        state_bytes = 2 * (state + conv)
        notes.append(f"linear-attention state: {lin_layers} layers x {get('linear_num_value_heads')} value heads x "
                     f"{get('linear_key_head_dim')} x {get('linear_value_head_dim')} in {ssm_name} ({ssm} bytes) = "
                     f"{_gb(state)} plus {_gb(conv)} of conv state, read and written each step: {_gb(state_bytes)}")
    draft_step = draft_kv = 0.0
    if n_draft:
        draft_step = draft_read * bpp + embed * unquantized
        draft_kv = kv_elems * unquantized
        notes.append(f"MTP: {n_draft} draft layer(s) in the config ({_params(draft_params)} parameters, not in the total). "
                     f"One draft step reads {_gb(draft_step)} ({_params(draft_read)} parameters of the MTP layer "
                     f"+ the lm_head) plus one layer's KV ({kv_elems * unquantized:,.0f} bytes per context token)")
    return ModelSize(architecture, kind, int(params_total), int(params_per_step), bpp, weight_bytes, kv_bytes,
                     state_bytes, int(draft_params), draft_step, draft_kv, notes)


@dataclass
class Roofline:
    """The single-stream decode ceiling and everything it rests on."""

    ceiling_tok_s: float | None
    accept_length: float | None  # None: speculative decoding with no measured accept length
    bytes_per_step: float | None  # one verify (or plain decode) forward
    bandwidth_gbs: float | None
    gpu: str | None
    tp: int | None  # None: the evidence does not tell it
    context_tokens: int
    measured_tok_s: float | None = None
    percent_of_ceiling: float | None = None
    assumptions: list[str] = field(default_factory=list)
    note: str = ""
    size: ModelSize | None = None
    speculative_steps: int | None = 0  # None: whether it runs is not known
    draft_bytes_per_step: float | None = None  # one draft step (None: not known)
    bytes_per_round: float | None = None  # verify + steps x draft
    ceiling_without_draft_tok_s: float | None = None  # the same, with the draft reads left out
    ceiling_by_accept: dict[str, float] = field(default_factory=dict)  # accept length -> ceiling
    accept_source: str = ""
    disagree: str = ""  # the measured rate is too close to (or above) the ceiling: which input is suspect

    def __repr__(self) -> str:
        if self.ceiling_tok_s is None:
            return f"<Roofline unknown: {self.note[:80]}>"
        measured = f", measured {self.percent_of_ceiling:.0f}% of it" if self.percent_of_ceiling is not None else ""
        return (f"<Roofline {self.ceiling_tok_s:.1f} tok/s: {self.tp}x {self.gpu}, accept {self.accept_length:.2f}"
                f"{measured}>")

    def to_dict(self) -> dict:
        return asdict(self)

    def _accept_text(self) -> str:
        if self.speculative_steps is None:
            return "speculative decoding unknown"
        if not self.speculative_steps:
            return "accept 1 (no speculative decoding)"
        if self.accept_length is None:
            return f"{self.speculative_steps} speculative step(s), accept length unknown"
        return f"{self.speculative_steps} speculative step(s), accept {self.accept_length:g}"

    def to_text(self) -> str:
        tp = self.tp if self.tp else "?"
        where = f"{tp}x {self.gpu or 'unknown GPU'}, tp={tp}, {self._accept_text()}, " \
                f"context {self.context_tokens}"
        if self.ceiling_tok_s is None:
            lines = [f"decode roofline  unknown ({where})", f"  {self.note}"]
        else:
            lines = [f"decode roofline  {self.ceiling_tok_s:.1f} tok/s for one stream ({where})"]
        if self.bytes_per_step is not None and self.size is not None:
            s = self.size
            lines.append(f"  bytes per {'verify' if self.speculative_steps else 'step'} {_gb(self.bytes_per_step)} = "
                         f"weights {_gb(s.weight_bytes_per_step)} + KV {_gb(s.kv_bytes_per_token * self.context_tokens)}"
                         f" + state {_gb(s.state_bytes_per_step)}"
                         + (f"; bandwidth {self.bandwidth_gbs:g} GB/s" if self.bandwidth_gbs else ""))
        if self.speculative_steps and self.bytes_per_round is not None:
            lines.append(f"  bytes per round {_gb(self.bytes_per_round)} = verify + {self.speculative_steps} x draft "
                         f"{_gb(self.draft_bytes_per_step or 0)}")
        elif self.speculative_steps and self.bytes_per_step is not None:
            lines.append("  draft reads unknown (no MTP fields in the config and no draft model config): the round "
                         "counts the verify only, so the ceiling is an upper bound")
        if self.ceiling_without_draft_tok_s and self.bytes_per_round is not None:
            lines.append(f"  without the draft reads: {self.ceiling_without_draft_tok_s:.1f} tok/s")
        if self.speculative_steps and self.accept_length is None and self.ceiling_by_accept:
            lines.append("  ceiling per accept length: " + ", ".join(
                f"{a}: {c:.1f}" for a, c in self.ceiling_by_accept.items())
                + " tok/s; the Decode batch lines' `accept len` or a benchmark (sgl-kit bench) would tell which")
        if self.percent_of_ceiling is not None:
            lines.append(f"  measured {self.measured_tok_s:g} tok/s = {self.percent_of_ceiling:.0f}% of the ceiling"
                         + (": the inputs disagree" if self.disagree else ""))
        if self.disagree:
            lines.append(f"  {self.disagree}")
        return "\n".join(lines + [f"  - {a}" for a in self.assumptions])

    def _repr_html_(self) -> str:
        head, *rest = self.to_text().splitlines()
        items = "".join(f"<li>{html.escape(a)}</li>" for a in self.assumptions)
        body = "<br>".join(html.escape(line.strip()) for line in rest if not line.startswith("  - "))
        return f"<div><b>{html.escape(head)}</b><br>{body}<details><summary>assumptions</summary><ul>{items}" \
               f"</ul></details></div>"


# Above this share of the ceiling a measured rate means an input is wrong, not a fast server.
TOO_CLOSE = 0.95


def roofline(config: Any, gpu: str | GpuProfile | None = None, *, tp: int | None = 1,
             accept_length: float | None = 1.0,
             context_tokens: int = 1024, measured_tok_s: float | None = None,
             safetensors_index: Any = None, speculative_steps: int = 0, draft_config: Any = None,
             accept_source: str = "") -> Roofline:
    """The decode ceiling of one stream of ``config`` on ``tp`` GPUs of type ``gpu``.

    With ``speculative_steps`` > 0 a round reads the verify plus that many draft steps (the draft
    model's ``draft_config``, else the target's MTP fields), and ``accept_length`` is the measured
    tokens per round (None: not measured; the ceiling is then given per accept length only).
    Never raises for an unknown GPU or a config without sizes: the ceiling is then None and
    ``note`` says why. Raises UsageError for a tp, accept length or context that makes no sense.
    """
    if tp is not None and (not isinstance(tp, int) or tp < 1):
        raise UsageError(f"tp must be a positive integer, not {tp!r}", hint="tp is the server's tensor-parallel size (its launch command's --tp-size)")
    spec_unknown = speculative_steps is None  # the evidence does not tell whether it runs
    steps = int(speculative_steps or 0)
    if steps < 0:
        raise UsageError(f"speculative_steps must be zero or more, not {speculative_steps!r}",
                         hint="the server's --speculative-num-steps (0 without speculative decoding)")
    if accept_length is None and not steps:
        accept_length = 1.0
    if accept_length is not None and accept_length <= 0:
        raise UsageError(f"accept_length must be positive, not {accept_length!r}",
                         hint="1.0 without speculative decoding; else the server's measured accept length, or None")
    if context_tokens < 0:
        raise UsageError(f"context_tokens must be zero or more, not {context_tokens!r}",
                         hint="the tokens already in the context while decoding")
    notes, size, profile = [], None, None
    if config is None:
        notes.append("no model config.json given, so no bytes per step: pass the model's config.json")
    else:
        try:
            size = model_size(config, safetensors_index=safetensors_index)
        except ModelConfigError as err:
            notes.append(err.message + (f" ({err.hint})" if err.hint else ""))
    if gpu is None:
        notes.append("no GPU given, so no bandwidth: give the GPU (--gpu on the command line, gpu= in Python: a key "
                     "such as 'a6000', or the name nvidia-smi prints)")
    else:
        try:
            profile = gpu_profile(gpu)
        except UnknownGPU:
            notes.append(f"bandwidth unknown for GPU {str(gpu)!r}: it has no profile; add it to kit/data/gpus.yaml "
                         "with its datasheet bandwidth_gbs")
    if spec_unknown:
        accept_length = None
        notes.append("whether speculative decoding runs is not known (the evidence does not tell "
                     "speculative_algorithm), so neither are the tokens per step: give the whole server_args line")
    if tp is None:  # never 1 by default: a cut-off log or `--tp ${TP}` leaves it unknown
        notes.append("the tensor parallel size is not known (the evidence does not tell tp_size), so the "
                     "aggregate bandwidth is not either: give the log's whole server_args line (--log FILE) or "
                     "the launch command that sets its tensor-parallel size (--command FILE)")
    bandwidth = tp * profile.bandwidth_gbs if profile and tp else None
    kv_read = size.kv_bytes_per_token * context_tokens if size else 0.0
    per_step = size.weight_bytes_per_step + kv_read + size.state_bytes_per_step if size else None
    lines, draft, draft_how = [], None, ""
    if steps and size is not None:
        draft, draft_how = _draft_step(size, draft_config, context_tokens)
    per_round = per_step + steps * draft if per_step is not None and draft is not None and steps else None
    read = per_round or per_step
    by_accept = {}
    if steps and bandwidth and read:
        by_accept = {f"{a:g}": a * bandwidth * 1e9 / read for a in (1 + 0.5 * i for i in range(2 * steps + 1))}
    ceiling = accept_length * bandwidth * 1e9 / read if bandwidth and read and accept_length else None
    without = accept_length * bandwidth * 1e9 / per_step if per_round and bandwidth and accept_length else None
    percent = measured_tok_s / ceiling * 100 if ceiling and measured_tok_s is not None else None
    if steps and accept_length is None:
        notes.append(f"speculative decoding runs {steps} step(s) per round and no accept length was measured: the "
                     "ceiling depends on it (see the ceiling per accept length); the log's `Decode batch` lines "
                     "(`accept len`) or a benchmark (sgl-kit bench, then --bench FILE) would tell")
    if bandwidth:
        lines.append(f"bandwidth: {tp} x {profile.bandwidth_gbs:g} GB/s ({profile.name} datasheet peak) = "
                     f"{bandwidth:g} GB/s; real kernels reach roughly 80-90% of peak, so the ceiling is optimistic")
    if size:
        share = f"; each of the {tp} GPUs reads 1/{tp}" if tp and tp > 1 else ""
        average = size.weight_bytes_per_step / size.params_per_step
        lines.append(f"bytes per {'verify' if steps else 'step'}: weights {_gb(size.weight_bytes_per_step)} "
                     f"({_params(size.params_per_step)} parameters, {average:.4g} bytes each on average{share}) + KV "
                     f"{_gb(kv_read)} ({size.kv_bytes_per_token:,.0f} bytes per token x {context_tokens} context "
                     f"tokens) + state {_gb(size.state_bytes_per_step)} = {_gb(per_step)}")
    if steps:
        lines.append(f"speculative decoding: {steps} draft step(s) per round, then one verify that reads the target's "
                     "weights once for every verified token; " + (
                         f"one draft step reads {_gb(draft)} ({draft_how}); a round reads {_gb(per_round)}"
                         if draft is not None else f"the draft step's reads are unknown ({draft_how or 'no config'}): "
                         "the round counts the verify only"))
        lines.append(f"accepted tokens per round: {accept_length:g} ({accept_source or 'given'})"
                     if accept_length is not None else
                     "accepted tokens per round: unknown (the Decode batch lines' accept len, or a benchmark, "
                     "would tell)")
    elif spec_unknown:
        lines.append("accepted tokens per step: unknown (whether speculative decoding runs is not known)")
    else:
        lines.append("accepted tokens per step: 1 (no speculative decoding)" if accept_length == 1 else
                     f"accepted tokens per step: {accept_length:g}")
    lines.append("one stream at batch 1, memory-bound: compute, kernel-launch gaps, the all-reduce between GPUs, "
                 "sampling and scheduling are not counted")
    disagree = ""
    if percent is not None and percent >= TOO_CLOSE * 100:
        disagree = _suspect(percent, accept_length, accept_source, steps, profile, gpu, tp)
    return Roofline(ceiling, None if accept_length is None else float(accept_length), per_step, bandwidth,
                    profile.name if profile else (str(gpu) if gpu is not None else None), tp, context_tokens,
                    measured_tok_s, percent, lines + (size.assumptions if size else []), "; ".join(notes), size,
                    None if spec_unknown else steps, draft, per_round, without, by_accept, accept_source, disagree)


def _draft_step(size: ModelSize, draft_config: Any, context: int) -> tuple[float | None, str]:
    """Bytes of one draft forward: the draft model's own config, else the target's MTP layers."""
    if draft_config is not None:
        try:
            d = model_size(draft_config)
        except ModelConfigError as err:
            return None, f"the draft model's config: {err.message}"
        return d.weight_bytes_per_step + d.kv_bytes_per_token * context + d.state_bytes_per_step, \
            f"the draft model's config: {d.architecture or 'its'} {_params(d.params_per_step)} parameters"
    if size.draft_step_bytes:
        return size.draft_step_bytes + size.draft_kv_bytes_per_token * context, \
            "the target's MTP layer and the lm_head, from its config"
    return None, "no MTP fields in the target's config and no draft model config given"


def _suspect(percent: float, accept: float | None, accept_source: str, steps: int, profile, gpu, tp: int) -> str:
    """Which input a rate at or above ~95% of the ceiling puts in doubt, most likely first."""
    suspects = []
    if steps and accept is not None:
        suspects.append(f"the accept length {accept:g} ({accept_source or 'given, not measured'}): a longer real "
                        "accept length raises the ceiling")
    suspects.append(f"the GPU ({profile.name if profile else gpu}: its bandwidth is the datasheet's, {tp} of them)")
    suspects.append("the model config (dtype, quantization): fewer bytes per step raise the ceiling")
    suspects.append("the measured rate (its requests, whether it is one stream)")
    return (f"a memory-bound decode cannot reach {percent:.0f}% of its ceiling (real kernels reach ~80-90% of "
            "peak bandwidth): an input is wrong. Suspect, in order: " + "; ".join(suspects))
