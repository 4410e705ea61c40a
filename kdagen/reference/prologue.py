"""The elementwise maps around the chunked core, forward and hand-written adjoint (docs/math.md §3).

These are the maps flash-linear-attention 0.6.0 applies inside `chunk_kda` and
`chunk_gated_delta_rule` before the recurrence: the in-kernel gate, the L2 norm of q and k, and
the β sigmoid. They are written once here, in float64 torch, so that the recurrence reference
(autograd) and the chunked reference (hand adjoints) share the same forward definitions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

L2_EPS = 1e-6          # FLA: r = (sum x^2 + 1e-6)^-1/2
SOFTPLUS_THRESHOLD = 20.0  # FLA: softplus(x) = x for x > 20


def l2norm(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x̂ = r·x with r = (‖x‖² + ε)^-1/2 over the last dim; returns (x̂, r)."""
    r = torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)
    return x * r, r


def l2norm_bwd(xhat: torch.Tensor, r: torch.Tensor, dxhat: torch.Tensor) -> torch.Tensor:
    """dx = r·(dx̂ − (dx̂·x̂) x̂); exact even with ε > 0."""
    return r * (dxhat - (dxhat * xhat).sum(-1, keepdim=True) * xhat)


def beta_scale(allow_neg_eigval: bool) -> float:
    return 2.0 if allow_neg_eigval else 1.0


def beta_fwd(b: torch.Tensor, use_sigmoid: bool, allow_neg_eigval: bool) -> torch.Tensor:
    """β = s·σ(b) (s = 2 with allow_neg_eigval) when the sigmoid is in-kernel, else b as given."""
    return beta_scale(allow_neg_eigval) * torch.sigmoid(b) if use_sigmoid else b


def beta_bwd(b: torch.Tensor, dbeta: torch.Tensor, use_sigmoid: bool, allow_neg_eigval: bool) -> torch.Tensor:
    if not use_sigmoid:
        return dbeta
    s = torch.sigmoid(b)
    return dbeta * beta_scale(allow_neg_eigval) * s * (1 - s)


def _gate_parts(g: torch.Tensor, A_log, dt_bias, per_channel: bool):
    """x = g + dt_bias (broadcast per head[, channel]) and α = e^{A_log} (1 without A_log)."""
    HV = g.shape[2]
    x = g
    if dt_bias is not None:
        x = x + (dt_bias.view(HV, -1) if per_channel else dt_bias.view(HV))
    alpha = None
    if A_log is not None:
        alpha = A_log.exp().view(HV, 1) if per_channel else A_log.exp().view(HV)
    return x, alpha


def gate_fwd(g: torch.Tensor, A_log, dt_bias, lower_bound, per_channel: bool) -> torch.Tensor:
    """The per-step natural-log decay a from the raw gate input g.

    softplus form: a = −α·softplus(g + dt_bias); lower-bound form: a = lb·σ(α·(g + dt_bias)).
    g is [B,T,HV,K] (per channel, KDA) or [B,T,HV] (per head, GDN).
    """
    x, alpha = _gate_parts(g, A_log, dt_bias, per_channel)
    if lower_bound is None:
        sp = F.softplus(x, threshold=SOFTPLUS_THRESHOLD)
        return -(sp if alpha is None else alpha * sp)
    z = x if alpha is None else alpha * x
    return lower_bound * torch.sigmoid(z)


def gate_bwd(g: torch.Tensor, A_log, dt_bias, lower_bound, per_channel: bool, da: torch.Tensor):
    """Adjoint of gate_fwd: returns (dg, dA_log, ddt_bias), the last two None when absent.

    Parameter gradients are sums over (batch, time[, channel]) in the parameter's own layout:
    dA_log [HV]; ddt_bias [HV*K] (KDA) or [HV] (GDN).
    """
    x, alpha = _gate_parts(g, A_log, dt_bias, per_channel)
    one = torch.ones((), dtype=x.dtype)
    a_scale = one if alpha is None else alpha
    if lower_bound is None:
        dx = -a_scale * torch.sigmoid(x) * da
        # ∂a/∂A_log = a itself
        dA_term = da * (-a_scale * F.softplus(x, threshold=SOFTPLUS_THRESHOLD))
    else:
        z = a_scale * x
        s = torch.sigmoid(z)
        dz = da * lower_bound * s * (1 - s)
        dx = dz * a_scale
        dA_term = dz * z
    reduce_dims = (0, 1)
    dA_log = None
    if A_log is not None:
        dA_log = dA_term.sum(dim=reduce_dims)
        if per_channel:
            dA_log = dA_log.sum(-1)
        dA_log = dA_log.reshape(A_log.shape)
    ddt_bias = None
    if dt_bias is not None:
        ddt_bias = dx.sum(dim=reduce_dims).reshape(dt_bias.shape)
    return dx, dA_log, ddt_bias


def gate_param_magnitudes(g: torch.Tensor, A_log, dt_bias, lower_bound, per_channel: bool, dg: torch.Tensor) -> dict:
    """Σ over tokens of |each token's term| in dA_log and ddt_bias (their own layouts), from the raw gate input g and
    its gradient dg (what gate_bwd returns as dx). A per-head parameter gradient is a sum over every token with
    much cancellation; a floating-point sum's error is bounded by the sum of its terms' magnitudes, not by the sum
    (tests/test_runtime_ops_gpu.py measures those gradients against this).

    ddt_bias's terms are dg itself; dA_log's are da·∂a/∂A_log = dg·w(x), x = g + dt_bias: w = softplus(x)/σ(x)
    in the softplus form (∂a/∂A_log = a, ∂a/∂g = −α·σ(x)), w = x in the lower-bound form (∂a/∂A_log = lb·σ'(z)·z,
    ∂a/∂g = lb·σ'(z)·α, z = α·x)."""
    x, _ = _gate_parts(g, A_log, dt_bias, per_channel)
    out = {}
    if A_log is not None:
        if lower_bound is None:    # softplus(x)/σ(x) = (1 + e^−x)·log(1 + e^x), → 1 as x → −∞
            w = torch.where(x < -30, torch.ones_like(x), F.softplus(x, threshold=SOFTPLUS_THRESHOLD) / torch.sigmoid(x))
        else:
            w = x
        terms = (dg * w).abs().sum(dim=(0, 1))
        out["A_log"] = (terms.sum(-1) if per_channel else terms).reshape(A_log.shape)
    if dt_bias is not None:
        out["dt_bias"] = dg.abs().sum(dim=(0, 1)).reshape(dt_bias.shape)
    return out
