"""The token-by-token recurrence (docs/math.md §2): the ground truth every other path must match.

Written with out-of-place torch ops only, so torch.autograd through it gives the reference
gradients of every input and parameter.
"""
from __future__ import annotations

import torch

from .options import Options, expand_heads, prologue, scale_of, sequence_spans, state_in, state_out


def delta_rule_recurrent(q, k, v, a, beta, scale, h0=None, cu_seqlens=None):
    """Core recurrence on prepared operands.

    q, k: [B,T,H,K]; v: [B,T,HV,V]; a: [B,T,HV,K] (per channel) or [B,T,HV] (per head);
    beta: [B,T,HV]; h0: [N,HV,K,V] or None. Returns o [B,T,HV,V] and the final state [N,HV,K,V].

        S~ = Diag(e^a) S;  S = S~ + β k (v − S~ᵀk)ᵀ;  o = scale · Sᵀ q
    """
    B, T, HV, V = v.shape
    K = q.shape[-1]
    q, k = expand_heads(q, HV), expand_heads(k, HV)
    per_channel = a.dim() == 4
    rows = [[None] * T for _ in range(B)]
    finals = []
    for n, (b, bos, eos) in enumerate(sequence_spans(B, T, cu_seqlens)):
        S = v.new_zeros(HV, K, V) if h0 is None else h0[n]
        for t in range(bos, eos):
            decay = a[b, t].exp()
            S = S * (decay[..., None] if per_channel else decay[:, None, None])
            kt = k[b, t]
            err = v[b, t] - torch.einsum("hk,hkv->hv", kt, S)
            S = S + beta[b, t][:, None, None] * kt[..., None] * err[:, None, :]
            rows[b][t] = scale * torch.einsum("hk,hkv->hv", q[b, t], S)
        finals.append(S)
    zero = v.new_zeros(HV, V)
    o = torch.stack([torch.stack([r if r is not None else zero for r in row]) for row in rows])
    return o, torch.stack(finals)


def recurrent(x: dict, opt: Options):
    """Forward of the full op by the token recurrence: returns (o, final_state).

    x holds FLA's tensors (q, k, v, g, beta and optionally A_log, dt_bias, initial_state,
    cu_seqlens). The final state is in the caller's layout ([V,K] when state_v_first).
    """
    p = prologue(x, opt)
    o, S = delta_rule_recurrent(p["q"], p["k"], x["v"], p["a"], p["beta"], scale_of(opt, x["q"].shape[-1]),
                                state_in(x, opt), x.get("cu_seqlens"))
    return o, state_out(S, opt)
