"""The per-branch gradients by 16-row blocks (kdagen.reference.blocks, docs/math.md §7.10) equal the direct form of
docs/math.md §7.3 (chunked.chunk_terms' e^(Γi−Γj) per pair) at chunk 64, in float64: weak and strong per-channel
decays (down to −30 a step, where e^(−Γ) would be ~e^1900) and a chunk cut short."""
from __future__ import annotations

import pytest
import torch

from kdagen.reference import blocks
from kdagen.reference.chunked import chunk_terms

C, K = 64, 8


def direct(q, k, a, beta, scale, d_qd, d_kd, d_kr, dMqk, dMkk):
    """math.md §7.3 with the per-pair factors of chunk_terms (the reference's own F)."""
    t = chunk_terms(q[None], k[None], q[None, :, :1], a[None], beta[None], scale)
    F, E, R = t["F"][0], t["E"][0], t["R"][0]
    Mq, Mk = dMqk.tril(), dMkk.tril(-1)
    return dict(
        b_q=scale * d_qd * E + scale * torch.einsum("ij,jd,ijd->id", Mq, k, F),
        b_kd=d_kd * E + beta[:, None] * torch.einsum("ij,jd,ijd->id", Mk, k, F),
        b_ki=torch.einsum("ij,id,ijd->jd", scale * Mq, q, F) + torch.einsum("ij,i,id,ijd->jd", Mk, beta, k, F),
        b_kr=d_kr * R)


@pytest.mark.parametrize("low,L", [(-0.05, 64), (-3.0, 64), (-30.0, 64), (-2.0, 37)])
def test_blocks_equal_the_direct_form(low, L):
    g = torch.Generator().manual_seed(int(-low * 10) + L)
    d = torch.float64
    q, k = torch.randn(C, K, generator=g, dtype=d), torch.randn(C, K, generator=g, dtype=d)
    a = low * torch.rand(C, K, generator=g, dtype=d)
    beta = torch.rand(C, generator=g, dtype=d)
    grads = [torch.randn(C, K, generator=g, dtype=d) for _ in range(3)] + \
            [torch.randn(C, C, generator=g, dtype=d) for _ in range(2)]
    rows = torch.arange(C) < L                      # a chunk cut short: rows past its end zero, a = 0
    q, k, beta = q * rows[:, None], k * rows[:, None], beta * rows
    a = a * rows[:, None]
    grads = [x * rows[:, None] for x in grads[:3]] + [x * rows[:, None] * rows[None, :] for x in grads[3:]]
    want = direct(q[:L], k[:L], a[:L], beta[:L], 0.3, *[x[:L] for x in grads[:3]], *[x[:L, :L] for x in grads[3:]])
    got = blocks.branches(q, k, a, beta, 0.3, *grads)
    for name, w in want.items():
        assert torch.isfinite(got[name]).all(), f"{name}: not finite at a = {low}"
        err = ((got[name][:L] - w).norm() / w.norm()).item()
        assert err < 1e-12, f"{name}: {err:.2e} at a = {low}, L = {L}"
        assert not got[name][L:].any(), f"{name}: rows past the chunk's end not zero"
