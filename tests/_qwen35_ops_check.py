"""Run by the real-server environment's python (tests/test_real_server_qwen35.py): the plain-torch
stand-ins of the five CPU sgl-kernel ops and the gated RMSNorm route, each against a torch
implementation that is not the stand-in's own, on small random tensors.

References: transformers 5.6's torch path of Qwen3.5 (models/qwen3_5/modeling_qwen3_5.py:
``torch_causal_conv1d_update``, ``torch_chunk_gated_delta_rule``, ``torch_recurrent_gated_delta_rule``,
the gates of ``Qwen3_5GatedDeltaNet.forward`` and ``Qwen3_5RMSNormGated``, the causal ``nn.Conv1d``),
the one its authors run when the fla and causal-conv1d kernels are missing; and sglang's own
``rms_norm_ref`` (srt/layers/attention/fla/layernorm_gated.py:34). Prints one JSON line: per check
the largest absolute difference, and what the narrow stand-ins refuse.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

torch.manual_seed(0)
out: dict = {}


def diff(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def main() -> None:
    import sgl_kernel.mamba as m
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    dim, width, slots = 24, 4, 6

    # causal_conv1d_update_cpu: 3 sequences in slots 4, 1 and a padded one (-1), one token each
    weight, bias = torch.randn(dim, width), torch.randn(dim)
    conv_state = torch.randn(slots, dim, width - 1)
    x = torch.randn(3, dim)
    idx = torch.tensor([4, 1, -1], dtype=torch.int32)
    ours_state = conv_state.clone()
    ours = m.causal_conv1d_update_cpu(x, ours_state, weight, bias, "silu", conv_state_indices=idx)
    ref_state = conv_state[[4, 1]].clone()
    ref = hf.torch_causal_conv1d_update(x[:2].unsqueeze(-1), ref_state, weight, bias, "silu").squeeze(-1)
    out["causal_conv1d_update_cpu"] = max(diff(ours[:2], ref), diff(ours_state[[4, 1]], ref_state))
    out["causal_conv1d_update_cpu pad slot untouched"] = bool(torch.equal(ours_state[[0, 2, 3, 5]],
                                                                          conv_state[[0, 2, 3, 5]]))

    # causal_conv1d_fn_cpu: two sequences (5 and 3 tokens) in slots 2 and 0; the second continues a cached state
    lens = [5, 3]
    xs = torch.randn(dim, sum(lens))
    qsl = torch.tensor([0, 5, 8], dtype=torch.int32)
    cache_idx = torch.tensor([2, 0], dtype=torch.int32)
    has_init = torch.tensor([False, True])
    states = torch.randn(slots, dim, width - 1)
    ours_states = states.clone()
    y = m.causal_conv1d_fn_cpu(xs, weight, bias, conv_states=ours_states, query_start_loc=qsl, seq_lens_cpu=lens,
                               cache_indices=cache_idx, has_initial_state=has_init, activation="silu")
    conv = torch.nn.Conv1d(dim, dim, width, groups=dim, padding=width - 1, bias=True)
    with torch.no_grad():
        conv.weight.copy_(weight.unsqueeze(1))
        conv.bias.copy_(bias)
        first = F.silu(conv(xs[:, :5].unsqueeze(0))[:, :, :5]).squeeze(0)  # transformers' prefill, no cache
    step_state = states[[0]].clone()  # the decode reference, token by token, from the cached state
    second = torch.cat([hf.torch_causal_conv1d_update(xs[:, t:t + 1].unsqueeze(0), step_state, weight, bias, "silu")
                        for t in range(5, 8)], dim=-1).squeeze(0)
    out["causal_conv1d_fn_cpu"] = max(diff(y[:, :5], first), diff(y[:, 5:], second),
                                      diff(ours_states[2], xs[:, 2:5]), diff(ours_states[0], step_state[0]))

    # fused_gdn_gating_cpu: Qwen3_5GatedDeltaNet's gates
    hv, h, kd, vd = 4, 2, 8, 8
    A_log, dt_bias = torch.randn(hv), torch.randn(hv)
    a, b = torch.randn(7, hv) * 4, torch.randn(7, hv)
    g, beta = torch.ops.sgl_kernel.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    ref_g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    out["fused_gdn_gating_cpu"] = max(diff(g[0], ref_g), diff(beta[0], b.sigmoid()))
    out["fused_gdn_gating_cpu shape"] = list(g.shape)

    # chunk_gated_delta_rule_cpu: two sequences (70 tokens, more than one 64-chunk, and 9), with initial states
    lens = [70, 9]
    total = sum(lens)
    q, k = torch.randn(1, total, h, kd), torch.randn(1, total, h, kd)
    v = torch.randn(1, total, hv, vd)
    gg = -torch.rand(1, total, hv) * 0.5
    bb = torch.rand(1, total, hv)
    init = torch.randn(2, hv, vd, kd) * 0.1  # sglang's layout [N, HV, V, K]
    cu = torch.tensor([0, 70, 79], dtype=torch.int32)
    o, final, hidden = m.chunk_gated_delta_rule_cpu(q=q, k=k, v=v, g=gg, beta=bb, initial_state=init.clone(),
                                                    cu_seqlens=cu, head_first=False, use_qk_l2norm_in_kernel=True)
    worst = 0.0
    for i, (lo, hi) in enumerate(((0, 70), (70, 79))):
        rep = hv // h
        ref_o, ref_state = hf.torch_chunk_gated_delta_rule(
            q[:, lo:hi].repeat_interleave(rep, dim=2), k[:, lo:hi].repeat_interleave(rep, dim=2), v[:, lo:hi],
            gg[:, lo:hi], bb[:, lo:hi], initial_state=init[i:i + 1].transpose(-1, -2), output_final_state=True,
            use_qk_l2norm_in_kernel=True)
        worst = max(worst, diff(o[:, lo:hi], ref_o), diff(final[i], ref_state[0].transpose(-1, -2)))
    out["chunk_gated_delta_rule_cpu"] = worst
    out["chunk_gated_delta_rule_cpu third"] = hidden is None

    # fused_sigmoid_gating_delta_rule_update_cpu: one decode step of 3 sequences in slots 3, 0 and a padded one
    bs = 3
    q, k, v = torch.randn(1, bs, h, kd), torch.randn(1, bs, h, kd), torch.randn(1, bs, hv, vd)
    a, b = torch.randn(bs, hv), torch.randn(bs, hv)
    pool = torch.randn(5, hv, vd, kd) * 0.1
    ours_pool = pool.clone()
    idx = torch.tensor([3, 0, -1], dtype=torch.int32)
    o = torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, initial_state_source=ours_pool,
        initial_state_indices=idx, cu_seqlens=torch.arange(bs + 1, dtype=torch.int32), use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0, softplus_threshold=20.0)
    worst = 0.0
    for row, slot in ((0, 3), (1, 0)):
        g1 = (-A_log.float().exp() * F.softplus(a[row].float() + dt_bias))[None, None]
        ref_o, ref_state = hf.torch_recurrent_gated_delta_rule(
            q[:, row:row + 1].repeat_interleave(hv // h, dim=2), k[:, row:row + 1].repeat_interleave(hv // h, dim=2),
            v[:, row:row + 1], g1, b[row].sigmoid()[None, None], initial_state=pool[slot:slot + 1].transpose(-1, -2),
            output_final_state=True, use_qk_l2norm_in_kernel=True)
        worst = max(worst, diff(o[:, row], ref_o[:, 0]), diff(ours_pool[slot], ref_state[0].transpose(-1, -2)))
    out["fused_sigmoid_gating_delta_rule_update_cpu"] = worst
    out["fused_sigmoid_gating_delta_rule_update_cpu other slots untouched"] = bool(
        torch.equal(ours_pool[[1, 2, 4]], pool[[1, 2, 4]]))

    # the gated RMSNorm route: sglang's RMSNormGated, as Qwen3.5 builds it, against transformers' and sglang's reference
    import sgl_kit_routes
    from sglang.srt.layers.attention.fla import layernorm_gated as lg

    norm = lg.RMSNorm(vd, eps=1e-6, group_size=None, norm_before_gate=True)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(vd))
    xn, zn = torch.randn(10, vd), torch.randn(10, vd)
    hf_norm = hf.Qwen3_5RMSNormGated(vd, eps=1e-6)
    with torch.no_grad():
        hf_norm.weight.copy_(norm.weight)
    with torch.no_grad():
        mine = norm(xn, zn)
        out["gated rmsnorm vs transformers"] = diff(mine, hf_norm(xn, zn))
        out["gated rmsnorm vs sglang rms_norm_ref"] = diff(mine, lg.rms_norm_ref(xn, norm.weight, None, z=zn, eps=1e-6))
    out["routed"] = list(sgl_kit_routes.routed)

    # narrow: what the stand-ins do not cover stays missing or raises
    refused = {}
    try:
        from sgl_kernel import rmsnorm  # noqa: F401
    except ImportError:
        refused["from sgl_kernel import rmsnorm"] = "ImportError"
    for name in ("rmsnorm_cpu", "convert_weight_packed", "fused_rmsnorm_gated_cpu"):
        try:
            getattr(torch.ops.sgl_kernel, name)
        except AttributeError:
            refused[f"torch.ops.sgl_kernel.{name}"] = "AttributeError"
    try:
        m.causal_conv1d_update_cpu(x, conv_state.clone(), weight, bias, "silu", conv_state_indices=idx,
                                   intermediate_conv_window=conv_state)
    except TypeError:
        refused["causal_conv1d_update_cpu(intermediate_conv_window=...)"] = "TypeError"
    try:
        lg.LayerNorm(vd)(xn)
    except NotImplementedError:
        refused["layernorm_gated.LayerNorm"] = "NotImplementedError"
    out["refused"] = refused
    print(json.dumps(out))


if __name__ == "__main__":
    main()
