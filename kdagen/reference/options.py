"""What a call of `chunk_kda` / `chunk_gated_delta_rule` means mathematically, as plain data.

`Options` holds every flash-linear-attention 0.6.0 option that changes the math; the tensors go
in a plain dict keyed by FLA's argument names (q, k, v, g, beta, A_log, dt_bias, initial_state,
cu_seqlens). `prologue` turns them into the core's operands (q̂, k̂, a, β); both references start
from it, so they cannot disagree on what an option means.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import prologue as P

OPS = ("kda", "gdn")


@dataclass(frozen=True)
class Options:
    op: str = "kda"                        # "kda": per-channel decay; "gdn": one decay per head
    scale: float | None = None             # default K^-1/2
    use_qk_l2norm_in_kernel: bool = False
    use_gate_in_kernel: bool = False
    use_beta_sigmoid_in_kernel: bool = False
    allow_neg_eigval: bool = False
    lower_bound: float | None = None       # KDA only: switches the gate to lb·σ(α·x)
    state_v_first: bool = False            # states stored [V, K] instead of [K, V]

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"Options.op must be one of {OPS}, got {self.op!r}")
        if self.allow_neg_eigval and not self.use_beta_sigmoid_in_kernel:
            raise ValueError("allow_neg_eigval requires use_beta_sigmoid_in_kernel=True")
        if self.lower_bound is not None and self.op == "gdn":
            raise ValueError("lower_bound is a KDA option; chunk_gated_delta_rule has no lower-bound gate")

    @property
    def per_channel(self) -> bool:
        return self.op == "kda"


def scale_of(opt: Options, K: int) -> float:
    return K ** -0.5 if opt.scale is None else float(opt.scale)


def sequence_spans(B: int, T: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int, int]]:
    """(batch row, bos, eos) per sequence: B rows of T tokens, or the cu_seqlens segments of row 0."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    return [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]


def chunk_spans(bos: int, eos: int, C: int) -> list[tuple[int, int]]:
    """Chunks never straddle sequences; the last one may be short."""
    return [(s, min(s + C, eos)) for s in range(bos, eos, C)]


def expand_heads(x: torch.Tensor, HV: int) -> torch.Tensor:
    """q/k head j serves value heads j·G … j·G+G−1 (GVA): repeat along the head dim."""
    G = HV // x.shape[2]
    return x if G == 1 else x.repeat_interleave(G, dim=2)


def reduce_heads(dx: torch.Tensor, H: int) -> torch.Tensor:
    """Adjoint of expand_heads: sum the G value heads of each q/k head."""
    B, T, HV = dx.shape[:3]
    G = HV // H
    return dx if G == 1 else dx.reshape(B, T, H, G, *dx.shape[3:]).sum(3)


def prologue(x: dict, opt: Options) -> dict:
    """The core's operands from the raw inputs: q̂, k̂ (with the L2 factors r_q, r_k), a, β."""
    q, k = x["q"], x["k"]
    out = {}
    if opt.use_qk_l2norm_in_kernel:
        out["q"], out["r_q"] = P.l2norm(q)
        out["k"], out["r_k"] = P.l2norm(k)
    else:
        out["q"], out["k"] = q, k
    if opt.use_gate_in_kernel:
        out["a"] = P.gate_fwd(x["g"], x.get("A_log"), x.get("dt_bias"), opt.lower_bound, opt.per_channel)
    else:
        out["a"] = x["g"]
    out["beta"] = P.beta_fwd(x["beta"], opt.use_beta_sigmoid_in_kernel, opt.allow_neg_eigval)
    return out


def state_in(x: dict, opt: Options):
    """initial_state in the core's [N, HV, K, V] layout (or None)."""
    h0 = x.get("initial_state")
    if h0 is None:
        return None
    return h0.transpose(-1, -2) if opt.state_v_first else h0


def state_out(S: torch.Tensor, opt: Options) -> torch.Tensor:
    return S.transpose(-1, -2) if opt.state_v_first else S
