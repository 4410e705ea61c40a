"""Random inputs shaped like FLA's, for tests of every path against the references."""
from __future__ import annotations

import math

import torch

from .options import Options


def make_inputs(opt: Options, *, B=1, T=37, H=2, G=1, K=8, V=6, cu_seqlens=None, initial_state=True,
                dtype=torch.float64, device="cpu", generator=None) -> dict:
    """A dict of FLA-named tensors for `opt`.

    Gates are drawn so that decays are moderate but not trivial: the raw gate input ~ N(0,1) with
    the in-kernel gate (A_log = log U(1,4), dt_bias ~ N(0,0.5)); otherwise a = logsigmoid(N(0,1))
    clamped to [-5, 0]. β logits ~ N(0,1), or β = σ(N(0,1)) without the in-kernel sigmoid.
    """
    gen = generator
    HV = H * G
    if cu_seqlens is not None:
        cu_seqlens = torch.as_tensor(cu_seqlens, dtype=torch.int64, device=device)
        B, T = 1, int(cu_seqlens[-1])
        N = len(cu_seqlens) - 1
    else:
        N = B

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, dtype=dtype).to(device)

    gshape = (B, T, HV, K) if opt.per_channel else (B, T, HV)
    x = {"q": randn(B, T, H, K), "k": randn(B, T, H, K), "v": randn(B, T, HV, V)}
    if not opt.use_qk_l2norm_in_kernel:
        x["q"] = torch.nn.functional.normalize(x["q"], dim=-1)
        x["k"] = torch.nn.functional.normalize(x["k"], dim=-1)
    if opt.use_gate_in_kernel:
        x["g"] = randn(*gshape)
        x["A_log"] = (1 + 3 * rand(HV)).log()
        x["dt_bias"] = 0.5 * randn(HV * K if opt.per_channel else HV)
    else:
        x["g"] = torch.nn.functional.logsigmoid(randn(*gshape)).clamp(-5, 0)
    x["beta"] = randn(B, T, HV) if opt.use_beta_sigmoid_in_kernel else torch.sigmoid(randn(B, T, HV))
    if initial_state:
        shape = (N, HV, V, K) if opt.state_v_first else (N, HV, K, V)
        x["initial_state"] = randn(*shape) / math.sqrt(K)
    if cu_seqlens is not None:
        x["cu_seqlens"] = cu_seqlens
    return x
