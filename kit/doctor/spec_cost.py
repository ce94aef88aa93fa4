"""What more draft tokens cost a hybrid (linear-attention) model's GPU memory, by sglang's own arithmetic.

With speculative decoding, sglang reserves memory for the intermediate linear-attention state of every draft
token of every running request before it sizes the KV cache and the mamba state pool
(``handle_max_mamba_cache``, srt/model_executor/model_runner_kv_cache_mixin.py:79-91 in 0.5.11):
``mamba_cache_per_req x max_running_requests x speculative_num_draft_tokens``, where ``mamba_cache_per_req`` is
one request's state over every linear-attention layer (``BaseLinearStateParams.mamba_cache_per_req``,
srt/configs/mamba_utils.py): the conv state ``(conv_dim / tp, conv_kernel - 1)`` in the conv dtype and the
temporal (SSM) state ``(value_heads / tp, value_head_dim, key_head_dim)`` in the SSM dtype, with the shapes of
``Mamba2StateShape.create`` fed from the model's config class (``Qwen3NextConfig.mamba2_cache_params``).

Each piece is read from the release's own source and run by kit.provenance.compute on this launch's numbers:
the shape function, the reserve function (whose branches differ by release: 0.5.14 and later cap the
requests by the mamba pool, which only the log's ``Mamba Cache is allocated`` line tells). The dtypes follow
``mamba2_state_dtype``: the conv state in ``SGLANG_MAMBA_CONV_DTYPE`` (bfloat16), the SSM state in float32
unless config.json's ``mamba_ssm_dtype``, ``--mamba-ssm-dtype`` or ``SGLANG_MAMBA_SSM_DTYPE`` says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kit._text import short_path
from kit.errors import KitError

from .case import Case

__all__ = ["ReserveCost", "reserve_cost"]

_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
_ACCESSORS = ("get_schedule", "get_memory", "get_exec", "get_spec", "get_parallel", "get_model")
_RESERVE = ("handle_max_mamba_cache", "_handle_max_mamba_cache")
_BIG = 1 << 40  # a mamba pool that holds every running request: the reserve's upper bound


@dataclass
class ReserveCost:
    """The reserve for two draft-token counts, per GPU, or why it is not estimated."""

    now: int | None = None  # bytes per GPU with this launch's draft tokens
    then: int | None = None  # with the target's
    per_req: int | None = None  # mamba_cache_per_req, bytes
    requests: int | None = None
    bound: bool = False  # an upper bound: the release caps the requests by a mamba pool the log does not give
    inputs: list[str] = field(default_factory=list)
    why: str = ""  # not estimated: why, and what would tell
    sites: list[str] = field(default_factory=list)

    @property
    def delta(self) -> int | None:
        return None if self.now is None or self.then is None else self.then - self.now

    def short(self, draft_now: int, draft_then: int) -> str:
        if self.delta is None:
            return f"the memory it costs is not estimated ({self.why})"
        most = "at most " if self.bound else ""
        return (f"the cost beside it: {draft_now} -> {draft_then} draft tokens adds {most}{_gib(self.delta)} per GPU "
                f"to sglang's intermediate-state reserve ({most}{_gib(self.then)} at {self.requests} running "
                "requests), memory the KV cache and the mamba state pool no longer get")

    def sentence(self, draft_now: int, draft_then: int, gpu_gib: float | None = None) -> str:
        if self.delta is None:
            return f"the memory cost of {draft_now} -> {draft_then} draft tokens is not estimated: {self.why}"
        share = f", {self.delta / (gpu_gib * 2**30):.0%} of a {gpu_gib:.0f} GiB GPU" if gpu_gib else ""
        most = "at most " if self.bound else ""
        return (f"cost: {draft_now} -> {draft_then} draft tokens raises sglang's intermediate-state reserve from "
                f"{most}{_gib(self.now)} to {most}{_gib(self.then)} per GPU ({most}+{_gib(self.delta)}{share}), taken "
                f"from the memory left for the KV cache and the mamba state pool before they are sized: "
                f"{self.requests} running requests x {self.per_req:,} bytes of state per request x draft tokens "
                f"({'; '.join(self.inputs)})")


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


def reserve_cost(case: Case, draft_now: int, draft_then: int) -> ReserveCost:
    """The intermediate-state reserve per GPU for ``draft_now`` and ``draft_then`` draft tokens, at this launch's
    running-request cap, by this release's arithmetic; ``why`` says what is missing when it is not estimated."""
    out = ReserveCost()
    if not case.hybrid_linear:
        out.why = ("no linear-attention layers in the model's config.json (or no config.json): sglang reserves "
                   "intermediate state only for hybrid models; --model-config FILE would tell")
        return out
    if case.ev.tree is None:
        out.why = "no sglang source to read the reserve from"
        return out
    running = case.value("max_running_requests")
    if not isinstance(running, int) or case.unknown("max_running_requests"):
        out.why = ("the running-request cap is not in the evidence; the server_args line (max_running_requests) "
                   "would tell")
        return out
    try:
        per_req, how, sites = _per_request(case)
    except KitError as err:
        per_req, how, sites = None, err.message, []
    if per_req is None:
        out.why = how
        return out
    out.per_req, out.inputs, out.sites = per_req, how, sites
    dp = int(case.value("dp_size") or 1) if case.value("enable_dp_attention") is True else 1
    values = [_reserve(case, per_req, running, dp, d) for d in (draft_now, draft_then)]
    if any(v[0] is None for v in values):
        out.why = values[0][2] or values[1][2]
        return out
    (out.now, requests, _, bound, where), (out.then, _, _, _, _) = values
    out.requests, out.bound = requests, bound
    out.inputs = [f"the reserve at {where}", *out.inputs]
    if bound:
        out.inputs.append("0.5.14 and later cap these requests by the mamba pool's size // its ratio; the log's "
                          "`Mamba Cache is allocated` line (max_mamba_cache_size) would tell the exact figure")
    out.sites = [where, *out.sites]
    return out


def _reserve(case: Case, per_req: int, running: int, dp: int, draft: int):
    """(bytes, requests, why, bound, where) of the release's reserve function for ``draft`` tokens."""
    from kit._pysource import unknown
    from kit.provenance import SERVER_ARGS, compute

    size = (case.ev.capacity or {}).get("max_mamba_cache_size")
    bound = size is None
    attributes = {"mamba_cache_per_req": per_req, "max_running_requests": running,
                  "speculative_num_draft_tokens": draft, "dp_size": dp, "attn_dp_size": dp, "pp_size": 1,
                  "server_args": SERVER_ARGS, "max_mamba_cache_size": _BIG if bound else size}
    calls = {"is_none": False, "fused_entry_bytes": None, **{a: SERVER_ARGS for a in _ACCESSORS}}
    ratio = compute(case.ev.tree, "_calculate_mamba_ratio", snapshot=case.ev.args, environ=case.ev.environ,
                    attributes={"server_args": SERVER_ARGS}, calls={a: SERVER_ARGS for a in _ACCESSORS})
    calls["_calculate_mamba_ratio"] = ratio.value if ratio is not None and ratio.known else 1
    found = compute(case.ev.tree, _RESERVE, snapshot=case.ev.args, environ=case.ev.environ, probes=case.probes,
                    params={"total_rest_memory": unknown("total_rest_memory", "the free GPU memory at startup")},
                    attributes=attributes, calls=calls)
    if found is None:
        return None, None, "this release has no handle_max_mamba_cache to read the reserve from", False, ""
    names = [n for n in found.lines if n.endswith("intermediate_size")]
    name = next((n for n in names if n in found.variables), None)
    if name is None:
        why = found.why or "its value on this launch's path was not computed"
        return None, None, (f"the reserve ({found.where}) reads what the evidence does not give ({why}); the log's "
                            "`Mamba Cache is allocated` line gives the intermediate state it allocated"), False, \
            found.where
    value = found.variables[name]
    where = f"{found.where.split(':')[0]}:{found.lines[name]}"
    # the requests the reserve counts, as its own product gives them (0.5.19+ adds the pool's padding slot)
    requests = value // (per_req * draft) if per_req and draft else running // dp
    uses_bound = bound and "capped_reqs" in found.variables
    return int(value), requests, "", uses_bound, where


def _per_request(case: Case) -> tuple[int | None, list[str] | str, list[str]]:
    """mamba_cache_per_req of this model at this launch's tensor parallelism, with how it was read."""
    from kit.provenance import compute

    text = case.text_config
    tp = case.tp
    dp = int(case.value("dp_size") or 1) if case.value("enable_dp_attention") is True else 1
    attn_tp = max(1, tp // dp)
    need = ("linear_value_head_dim", "linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
            "linear_conv_kernel_dim")
    missing = [k for k in need if k not in text]
    if missing:
        return None, f"config.json has no {', '.join(missing)}: the linear-attention state's size is not known", []
    kwargs = {"tp_world_size": attn_tp,
              "intermediate_size": text["linear_value_head_dim"] * text["linear_num_value_heads"],
              "n_groups": text["linear_num_key_heads"], "num_heads": text["linear_num_value_heads"],
              "head_dim": text["linear_value_head_dim"], "state_size": text["linear_key_head_dim"],
              "conv_kernel": text["linear_conv_kernel_dim"]}
    params_site = _config_site(case)
    shape = compute(case.ev.tree, "Mamba2StateShape.create", params=kwargs)
    if shape is None or "conv_state_shape" not in shape.variables or "temporal_state_shape" not in shape.variables:
        return None, "Mamba2StateShape.create was not read in this release: the state's shape is not known", []
    conv, temporal = shape.variables["conv_state_shape"], shape.variables["temporal_state_shape"]
    layers, layers_how = _linear_layers(text)
    conv_dtype, ssm_dtype, dtype_how = _dtypes(case)
    per_layer = math.prod(conv) * _ITEMSIZE[conv_dtype] + math.prod(temporal) * _ITEMSIZE[ssm_dtype]
    per_req = per_layer * layers
    how = [f"state per request = {layers} linear-attention layers x (conv {conv} x {_ITEMSIZE[conv_dtype]} bytes "
           f"({conv_dtype}) + temporal {temporal} x {_ITEMSIZE[ssm_dtype]} bytes ({ssm_dtype})) = {per_req:,} bytes "
           f"at attention tp {attn_tp}",
           f"shapes by {shape.where} from config.json's text_config (value heads {kwargs['num_heads']} x "
           f"{kwargs['head_dim']}, key heads {kwargs['n_groups']} x {kwargs['state_size']}, conv kernel "
           f"{kwargs['conv_kernel']}, as {params_site or 'the model config class'} passes them)",
           layers_how, dtype_how]
    return per_req, how, [shape.where.split("-")[0]]


def _config_site(case: Case) -> str:
    """Where the model's config class builds its mamba2_cache_params (file:line), when found."""
    try:
        hits = case.ev.tree.grep("def mamba2_cache_params", fixed=True, max_matches=40)
    except KitError:
        return ""
    model_type = str(case.text_config.get("model_type") or "")
    base = model_type.removesuffix("_text").rsplit("_", 1)[0] if model_type else ""
    for hit in hits:
        if base and base.replace("_", "") in hit.path.replace("_", ""):
            return f"{short_path(hit.path)}:{hit.line}"
    return ""


def _linear_layers(text: dict) -> tuple[int, str]:
    types = text.get("layer_types")
    interval = text.get("full_attention_interval")
    n = int(text.get("num_hidden_layers") or 0)
    by_interval = sum(1 for i in range(n) if interval and (i + 1) % int(interval) != 0) if interval else None
    if types:
        linear = sum(1 for t in types if "linear" in str(t) or "mamba" in str(t))
        agree = "" if by_interval in (None, linear) else (
            f"; by full_attention_interval {interval} it would be {by_interval}, which the config class may use")
        return linear, f"{linear} linear-attention layers of {len(types)} (config.json's layer_types{agree})"
    if by_interval is not None:
        return by_interval, f"{by_interval} linear-attention layers of {n} (full_attention_interval {interval})"
    return 0, "no linear-attention layers named in config.json"


def _dtypes(case: Case) -> tuple[str, str, str]:
    """mamba2_state_dtype: the conv state in SGLANG_MAMBA_CONV_DTYPE (bfloat16); the SSM state float32, else
    config.json's mamba_ssm_dtype, else --mamba-ssm-dtype / SGLANG_MAMBA_SSM_DTYPE (which win)."""
    env = case.ev.environ or {}
    conv = env.get("SGLANG_MAMBA_CONV_DTYPE") or "bfloat16"
    conv = conv if conv in _ITEMSIZE else "bfloat16"
    ssm, said = "float32", "float32, sglang's default"
    from_config = case.text_config.get("mamba_ssm_dtype") or (case.ev.model_config or {}).get("mamba_ssm_dtype")
    if from_config in _ITEMSIZE:
        ssm, said = from_config, f"{from_config} from config.json's mamba_ssm_dtype"
    asked = case.value("mamba_ssm_dtype") or env.get("SGLANG_MAMBA_SSM_DTYPE")
    if asked in _ITEMSIZE:
        ssm, said = asked, f"{asked} from --mamba-ssm-dtype / SGLANG_MAMBA_SSM_DTYPE"
    where = ""
    try:
        hit = case.ev.tree.grep("def mamba2_state_dtype", fixed=True, max_matches=3)
        where = f" (mamba2_state_dtype, {short_path(hit[0].path)}:{hit[0].line})" if hit else ""
    except KitError:
        pass
    env_note = " (SGLANG_MAMBA_CONV_DTYPE)" if "SGLANG_MAMBA_CONV_DTYPE" in env else ""
    return conv, ssm, f"conv state {conv}{env_note}, SSM state {said}{where}" + (
        "" if case.ev.environ is not None else "; the server's environment was not read (SGLANG_MAMBA_*_DTYPE)")

