"""The per-branch gradients of one chunk by 16-row blocks (docs/math.md §7.10): what a chunk-64 prepare_bwd computes.

The direct form (chunked.chunk_delta_rule_bwd_k2) contracts dMqk and dMkk with e^(Γi−Γj) per pair and channel,
O(C) exponentials per token and channel. By blocks, a pair in different blocks I > J splits its factor at the block
boundaries (math.md §6.2), F_ij = P_i · B_IJ · Q_j, so each off-diagonal block is a 16×16 by 16×K product of
operands bounded by |q̂|, |k̂| and scaled afterwards; a diagonal block keeps its running products of α (math.md
§6.3). Every factor is a product of per-token decays ≤ 1: nothing overflows for any gate. The kernels mirror this
split; here it is checked to equal the direct form.
"""
from __future__ import annotations

import torch

BLOCK = 16


def block_factors(a: torch.Tensor) -> dict:
    """For one chunk's log decays a [C, K] (C a multiple of BLOCK; padded rows a = 0): per row P = e^(Γi − Γ_in(I)),
    Q = e^(Γ_out(J) − Γj), per block T = e^(Γ_out − Γ_in), and every pair's diagonal-block factor F_ij =
    Π_{j<t≤i} α_t (j ≤ i in one block), from α = e^a alone."""
    C, K = a.shape
    alpha = a.exp()
    P, Q = torch.empty_like(a), torch.empty_like(a)
    F = torch.zeros(C, C, K, dtype=a.dtype)
    for b in range(C // BLOCK):
        rows = range(b * BLOCK, (b + 1) * BLOCK)
        run = torch.ones(K, dtype=a.dtype)
        for i in rows:                                  # P: the running product down the block
            run = run * alpha[i]
            P[i] = run
        run = torch.ones(K, dtype=a.dtype)
        for j in reversed(rows):                        # Q: the running product up the block, from j + 1
            Q[j] = run
            run = run * alpha[j]
        for j in rows:
            f = torch.ones(K, dtype=a.dtype)
            for i in range(j, (b + 1) * BLOCK):
                if i > j:
                    f = f * alpha[i]
                F[i, j] = f
    T = P[BLOCK - 1::BLOCK]                             # [blocks, K]
    return dict(P=P, Q=Q, T=T, F=F)


def between(T: torch.Tensor, I: int, J: int) -> torch.Tensor:
    """Π_{J<M<I} T_M: the decay across the blocks strictly between J and I (1 when adjacent)."""
    out = torch.ones_like(T[0])
    for M in range(J + 1, I):
        out = out * T[M]
    return out


def branches(q: torch.Tensor, k: torch.Tensor, a: torch.Tensor, beta: torch.Tensor, scale: float,
             d_qd: torch.Tensor, d_kd: torch.Tensor, d_kr: torch.Tensor, dMqk: torch.Tensor,
             dMkk: torch.Tensor) -> dict:
    """b_q, b_kd, b_ki, b_kr of one chunk (docs/math.md §7.3) from the unscaled products a chunk_bwd writes (§7.4:
    d_qd = dO·Sᵀ, d_kd = −(β⊙dX)·Sᵀ, d_kr = Vn·dhᵀ) and dMqk, dMkk, by blocks. q, k [C, K] (q̂, k̂), a [C, K], beta [C];
    C a multiple of BLOCK, rows past the chunk's end zero (a = 0)."""
    C = q.shape[0]
    f = block_factors(a)
    P, Q, T, F = f["P"], f["Q"], f["T"], f["F"]
    nb = C // BLOCK
    into = torch.cumprod(torch.cat([torch.ones_like(T[:1]), T[:-1]]), 0)       # Π_{M<I} T_M
    after = torch.cumprod(torch.cat([T[1:], torch.ones_like(T[:1])]).flip(0), 0).flip(0)   # Π_{M>I} T_M
    blk = torch.arange(C) // BLOCK
    E = into[blk] * P                                   # e^Γ
    R_end = Q * after[blk]                              # e^(Γl − Γ)
    bq = scale * E * d_qd
    R = torch.zeros_like(q)                             # Σ_{j<i} dMkk_ij k̂_j ⊙ F_ij
    bki = torch.zeros_like(q)
    for I in range(nb):
        ri = slice(I * BLOCK, (I + 1) * BLOCK)
        for J in range(I):
            rj = slice(J * BLOCK, (J + 1) * BLOCK)
            mid = between(T, I, J)
            bq[ri] += scale * P[ri] * mid * (dMqk[ri, rj] @ (k[rj] * Q[rj]))
            R[ri] += P[ri] * mid * (dMkk[ri, rj] @ (k[rj] * Q[rj]))
            bki[rj] += Q[rj] * mid * (dMqk[ri, rj].T @ (scale * q[ri] * P[ri])
                                      + (beta[ri, None] * dMkk[ri, rj]).T @ (k[ri] * P[ri]))
        Fd = F[ri, ri]                                   # [16, 16, K], zero above the diagonal
        Mq, Mk = dMqk[ri, ri].tril(), dMkk[ri, ri].tril(-1)
        bq[ri] += scale * torch.einsum("ij,jd,ijd->id", Mq, k[ri], Fd)
        R[ri] += torch.einsum("ij,jd,ijd->id", Mk, k[ri], Fd)
        bki[ri] += torch.einsum("ij,id,ijd->jd", scale * Mq, q[ri], Fd) \
            + torch.einsum("ij,i,id,ijd->jd", Mk, beta[ri], k[ri], Fd)
    return dict(b_q=bq, b_kd=E * d_kd + beta[:, None] * R, b_ki=bki, b_kr=R_end * d_kr)
