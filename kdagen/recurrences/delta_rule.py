"""The gated delta rule family in the DSL, with flash-linear-attention's options.

KDA and GDN are the same recurrence written with a different gate dim: KDA's gate is per channel
("K"), GDN's per head (None). The options mean what they mean in FLA 0.6.0's chunk_kda /
chunk_gated_delta_rule (docs/math.md §1, §3):

- use_gate_in_kernel: the decay is computed from the raw gate input g,
  softplus form  a = −e^{A_log}·softplus(g + dt_bias),  or with lower_bound  a = lb·σ(e^{A_log}·(g + dt_bias));
  A_log [HV] and dt_bias [HV(·K)] are optional (use_A_log, use_dt_bias). Without it, the decay is
  g itself, a natural log-decay that FLA assumes ≤ 0, and ≥ lower_bound when one is given (the
  caller clamps): those promises become g's declared bounds.
- use_qk_l2norm_in_kernel: q̂, k̂ = l2norm(q), l2norm(k).
- use_beta_sigmoid_in_kernel: β = σ(beta), times 2 with allow_neg_eigval (β ∈ (0, 2)).
"""
from __future__ import annotations

from kdagen import dsl
from kdagen.reference.options import Options


def gate(r: dsl.Recurrence, g: dsl.Value, dim, lower_bound, use_A_log: bool, use_dt_bias: bool) -> dsl.Value:
    """The per-step log decay from the raw gate input (FLA's in-kernel gate)."""
    x = g + r.head_param("dt_bias", dim) if use_dt_bias else g
    alpha = dsl.exp(r.head_param("A_log")) if use_A_log else None
    if lower_bound is None:
        sp = dsl.softplus(x)
        return -(alpha * sp) if alpha is not None else -sp
    return lower_bound * dsl.sigmoid(alpha * x if alpha is not None else x)


def beta_map(beta: dsl.Value, use_sigmoid: bool, allow_neg_eigval: bool) -> dsl.Value:
    if allow_neg_eigval and not use_sigmoid:
        raise ValueError("allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
    if not use_sigmoid:
        return beta
    return 2 * dsl.sigmoid(beta) if allow_neg_eigval else dsl.sigmoid(beta)


def gated_delta_rule(r: dsl.Recurrence, gate_dim, *, lower_bound=None, use_gate_in_kernel=False,
                     use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                     use_A_log=True, use_dt_bias=True) -> None:
    q, k = r.token_input("q", "K"), r.token_input("k", "K")
    v = r.token_input("v", "V")
    g_bounds = None if use_gate_in_kernel else (-float("inf") if lower_bound is None else lower_bound, 0.0)
    g = r.token_input("g", gate_dim, bounds=g_bounds)
    beta = r.token_input("beta")
    decay = gate(r, g, gate_dim, lower_bound, use_A_log, use_dt_bias) if use_gate_in_kernel else g
    qk = dsl.l2norm if use_qk_l2norm_in_kernel else (lambda x: x)
    r.delta_rule(query=qk(q), key=qk(k), value=v,
                 beta=beta_map(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval),
                 decay=decay, scale=r.scalar("scale"))


def options_kwargs(opt: Options, op: str, has_A_log: bool, has_dt_bias: bool) -> dict:
    """Builder keywords from a reference Options (scale and state_v_first are call-time layout/values)."""
    if opt.op != op:
        raise ValueError(f"Options.op is {opt.op!r}, but this builder is for {op!r}")
    kw = dict(use_gate_in_kernel=opt.use_gate_in_kernel, use_qk_l2norm_in_kernel=opt.use_qk_l2norm_in_kernel,
              use_beta_sigmoid_in_kernel=opt.use_beta_sigmoid_in_kernel, allow_neg_eigval=opt.allow_neg_eigval,
              use_A_log=has_A_log, use_dt_bias=has_dt_bias)
    if op == "kda":
        kw["lower_bound"] = opt.lower_bound
    return kw
