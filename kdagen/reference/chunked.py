"""Chunked forward (no-W UT form) and the reverse chunk recurrence of the backward (docs/math.md §4, §7).

The split follows the kernels kdagen plans (docs/kernels.md §1): a "prepare" side that is
token-parallel and a "recurrence" side that is head-parallel. Here, in float64, the recurrence
side of the backward (recurrence_bwd) stops at the gradients of the derived per-chunk tensors

    qd = scale·q̂⊙e^Γ,  kd = k̂⊙e^Γ,  ki = k̂⊙e^−Γ,  kr = k̂⊙e^(Γl−Γ),  gte = e^Γl,

each already multiplied by its own exponential (b_q, b_kd, b_ki, b_kr, dgte⊙gte): the stable
per-branch form. Every exponential evaluated is e^(Γi−Γj) with i ≥ j, e^Γ or e^(Γl−Γ), all ≤ 1 for
non-positive decays, so any gate magnitude and any chunk size is safe. prepare.py turns them into
input gradients (prepare_bwd).

Layout inside a chunk is head-major: [HV, L, K] with L ≤ C the chunk's valid length.
"""
from __future__ import annotations

import torch

from .options import chunk_spans, expand_heads, sequence_spans


def _heads(x, b, s, e):
    """Rows s:e of batch row b, head-major: [HV, L, ...]."""
    return x[b, s:e].transpose(0, 1)


def chunk_terms(q, k, v, a, beta, scale):
    """The per-chunk quantities of the forward that do not depend on the state.

    q, k, a: [HV,L,K]; v: [HV,L,V]; beta: [HV,L]. F[i,j] = e^(Γi−Γj) for i ≥ j (masked by select,
    never by multiply: the upper triangle may overflow).
    """
    L = q.shape[1]
    G = a.cumsum(1)
    Gl = G[:, -1]
    incl = torch.ones(L, L, dtype=torch.bool).tril()
    strict = torch.ones(L, L, dtype=torch.bool).tril(-1)
    diff = G[:, :, None, :] - G[:, None, :, :]
    F = torch.where(incl[..., None], diff.masked_fill(~incl[..., None], 0).exp(), diff.new_zeros(()))
    Mqk = scale * torch.einsum("hid,hjd,hijd->hij", q, k, F)
    Kk = torch.einsum("hid,hjd,hijd->hij", k, k, F).masked_fill(~strict, 0)   # Mkk without β
    Mkk = beta[..., None] * Kk
    eye = torch.eye(L, dtype=q.dtype).expand_as(Mkk)
    A = torch.linalg.solve_triangular(eye + Mkk, eye, upper=False, unitriangular=True)
    return dict(G=G, Gl=Gl, F=F, E=G.exp(), R=(Gl[:, None] - G).exp(), Mqk=Mqk, Kk=Kk, A=A, incl=incl)


def _chunk_step(t, q, k, v, beta, scale, S):
    """One chunk of the forward: Vn = A·Diag(β)(V − (K⊙E)S), O, S'. Returns (O, S', X, Vn)."""
    X = beta[..., None] * (v - (k * t["E"]) @ S)
    Vn = t["A"] @ X
    O = scale * (q * t["E"]) @ S + t["Mqk"] @ Vn
    S_next = t["Gl"].exp()[..., None] * S + (k * t["R"]).transpose(1, 2) @ Vn
    return O, S_next, X, Vn


def _chunks(B, T, cu_seqlens, C):
    for n, (b, bos, eos) in enumerate(sequence_spans(B, T, cu_seqlens)):
        yield n, b, chunk_spans(bos, eos, C)


def chunk_delta_rule_fwd(q, k, v, a, beta, scale, h0, chunk_size, cu_seqlens=None):
    """Chunked forward on prepared operands (shapes as delta_rule_recurrent).

    Returns o [B,T,HV,V], the final state [N,HV,K,V] and, per sequence, the list of states
    entering each chunk (what the backward recomputes on chip).
    """
    B, T, HV, V = v.shape
    K = q.shape[-1]
    q, k = expand_heads(q, HV), expand_heads(k, HV)
    a = a if a.dim() == 4 else a[..., None].expand(B, T, HV, K)
    o = torch.zeros_like(v)
    finals, states = [], []
    for n, b, spans in _chunks(B, T, cu_seqlens, chunk_size):
        S = v.new_zeros(HV, K, V) if h0 is None else h0[n]
        seq_states = []
        for s, e in spans:
            args = [_heads(x, b, s, e) for x in (q, k, v, beta)]
            t = chunk_terms(args[0], args[1], args[2], _heads(a, b, s, e), args[3], scale)
            seq_states.append(S)
            O, S, _, _ = _chunk_step(t, *args, scale, S)
            o[b, s:e] = O.transpose(0, 1)
        finals.append(S)
        states.append(seq_states)
    return o, torch.stack(finals), states


def chunk_delta_rule_bwd_k2(q, k, v, a, beta, scale, h0, chunk_size, do, dht, cu_seqlens=None):
    """recurrence_bwd: the reverse chunk recurrence and the per-chunk gradients of the derived tensors.

    Returns a dict of per-value-head tensors [B,T,HV,K] b_q, b_kd, b_ki, b_kr and dgT (the
    chunk-total gate gradient dgte⊙gte, repeated on every row of its chunk), plus dv
    [B,T,HV,V], dbeta [B,T,HV], dh0 [N,HV,K,V] and dh_chunks: per sequence, the gradient of the
    state leaving each chunk ([HV,K,V], chunks in order; what a backward's serial dS pass hands on).
    """
    B, T, HV, V = v.shape
    K = q.shape[-1]
    _, _, states = chunk_delta_rule_fwd(q, k, v, a, beta, scale, h0, chunk_size, cu_seqlens)
    q, k = expand_heads(q, HV), expand_heads(k, HV)
    a = a if a.dim() == 4 else a[..., None].expand(B, T, HV, K)
    out = {name: q.new_zeros(B, T, HV, K) for name in ("b_q", "b_kd", "b_ki", "b_kr", "dgT")}
    dv, dbeta = torch.zeros_like(v), torch.zeros_like(beta)
    dh0, dh_chunks = [], []
    for n, b, spans in _chunks(B, T, cu_seqlens, chunk_size):
        dS = v.new_zeros(HV, K, V) if dht is None else dht[n]
        leaving = []
        for (s, e), S in reversed(list(zip(spans, states[n]))):
            leaving.insert(0, dS)
            qc, kc, vc, bc, dO = (_heads(x, b, s, e) for x in (q, k, v, beta, do))
            t = chunk_terms(qc, kc, vc, _heads(a, b, s, e), bc, scale)
            _, _, X, Vn = _chunk_step(t, qc, kc, vc, bc, scale, S)
            A, F, E, R, incl = t["A"], t["F"], t["E"], t["R"], t["incl"]
            dh = dS
            dVn = t["Mqk"].transpose(1, 2) @ dO + (kc * R) @ dh
            dMqk = (dO @ Vn.transpose(1, 2)).masked_fill(~incl, 0)
            dX = A.transpose(1, 2) @ dVn
            dA = dVn @ X.transpose(1, 2)
            dMkk = -(A.transpose(1, 2) @ dA @ A.transpose(1, 2)).tril(-1)
            bdX = bc[..., None] * dX
            P = vc - (kc * E) @ S
            g = {
                "b_q": scale * (dO @ S.transpose(1, 2)) * E
                + scale * torch.einsum("hij,hjd,hijd->hid", dMqk, kc, F),
                "b_kd": -(bdX @ S.transpose(1, 2)) * E
                + bc[..., None] * torch.einsum("hij,hjd,hijd->hid", dMkk, kc, F),
                "b_ki": scale * torch.einsum("hij,hid,hijd->hjd", dMqk, qc, F)
                + torch.einsum("hij,hi,hid,hijd->hjd", dMkk, bc, kc, F),
                "b_kr": (Vn @ dh.transpose(1, 2)) * R,
                "dgT": (t["Gl"].exp() * (S * dh).sum(-1))[:, None, :].expand_as(qc),
            }
            for name, val in g.items():
                out[name][b, s:e] = val.transpose(0, 1)
            dv[b, s:e] = bdX.transpose(0, 1)
            dbeta[b, s:e] = ((dX * P).sum(-1) + (dMkk * t["Kk"]).sum(-1)).transpose(0, 1)
            dS = (t["Gl"].exp()[..., None] * dh + scale * (qc * E).transpose(1, 2) @ dO
                  - (kc * E).transpose(1, 2) @ bdX)
        dh0.append(dS)
        dh_chunks.append(leaving)
    out.update(dv=dv, dbeta=dbeta, dh0=torch.stack(dh0), dh_chunks=dh_chunks)
    return out
