"""prepare_bwd: from the derived-tensor gradients of recurrence_bwd to input gradients (docs/math.md §7.4–§7.9).

Token-parallel in the kernels, it does four things per chunk:
1. combine the per-branch rescaled gradients (each O(1), see chunked.py) — the stable dgc:
       dq̂ = b_q,   dk̂ = b_kd + b_ki + b_kr,
       dgc = q̂⊙b_q + k̂⊙(b_kd − b_ki − b_kr),   dgT += Σ_rows k̂⊙b_kr;
2. the reverse cumsum within the chunk plus the chunk-total term: da_t = Σ_{t'≥t} dgc_t' + dgT;
3. GVA: sum dq̂, dk̂ over the value heads sharing a q/k head, then the L2-norm backward;
4. the gate activation backward (dg, dA_log, ddt_bias) and β through its sigmoid.
"""
from __future__ import annotations

import torch

from . import prologue as P
from .options import Options, chunk_spans, expand_heads, reduce_heads, sequence_spans


def combine(q, k, g: dict) -> dict:
    """Step 1 on per-value-head tensors: dq̂, dk̂ (not yet GVA-summed) and dgc, dgT per token."""
    HV = g["b_q"].shape[2]
    q, k = expand_heads(q, HV), expand_heads(k, HV)
    return {
        "dq": g["b_q"],
        "dk": g["b_kd"] + g["b_ki"] + g["b_kr"],
        "dgc": q * g["b_q"] + k * (g["b_kd"] - g["b_ki"] - g["b_kr"]),
        "kbr": k * g["b_kr"],
    }


def chunk_reverse_cumsum(dgc, kbr, dgT, chunk_size, cu_seqlens=None):
    """Step 2: da_t = Σ_{t' ≥ t in t's chunk} dgc_t' + dgT + Σ_{chunk rows} k̂⊙b_kr.

    The last two terms are the gradient of Γl, which every decay of the chunk feeds.
    """
    B, T = dgc.shape[:2]
    da = torch.zeros_like(dgc)
    for b, bos, eos in sequence_spans(B, T, cu_seqlens):
        for s, e in chunk_spans(bos, eos, chunk_size):
            total = dgT[b, s] + kbr[b, s:e].sum(0)
            da[b, s:e] = dgc[b, s:e].flip(0).cumsum(0).flip(0) + total
    return da


def prepare_bwd(x: dict, p: dict, opt: Options, g: dict, chunk_size: int) -> dict:
    """Steps 1–4: input gradients keyed like FLA's arguments.

    x: the raw inputs; p: prologue(x, opt) (q̂, k̂, r_q, r_k, a, β); g: chunk_delta_rule_bwd_k2's output.
    """
    H = x["q"].shape[2]
    c = combine(p["q"], p["k"], g)
    da = chunk_reverse_cumsum(c["dgc"], c["kbr"], g["dgT"], chunk_size, x.get("cu_seqlens"))
    if not opt.per_channel:
        da = da.sum(-1)
    dq, dk = reduce_heads(c["dq"], H), reduce_heads(c["dk"], H)
    if opt.use_qk_l2norm_in_kernel:
        dq = P.l2norm_bwd(p["q"], p["r_q"], dq)
        dk = P.l2norm_bwd(p["k"], p["r_k"], dk)
    grads = {"q": dq, "k": dk, "v": g["dv"], "g": da, "A_log": None, "dt_bias": None}
    if opt.use_gate_in_kernel:
        grads["g"], grads["A_log"], grads["dt_bias"] = P.gate_bwd(
            x["g"], x.get("A_log"), x.get("dt_bias"), opt.lower_bound, opt.per_channel, da)
    grads["beta"] = P.beta_bwd(x["beta"], g["dbeta"], opt.use_beta_sigmoid_in_kernel, opt.allow_neg_eigval)
    return grads
