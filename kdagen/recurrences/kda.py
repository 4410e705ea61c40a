"""KDA (Kimi Delta Attention): the gated delta rule with a per-channel decay, in the DSL."""
from __future__ import annotations

from kdagen import dsl
from kdagen.reference.options import Options

from .delta_rule import gated_delta_rule, options_kwargs


def kda(r: dsl.Recurrence, **options) -> None:
    """Write KDA into r: the decay is a vector over K (options: see delta_rule.py)."""
    gated_delta_rule(r, "K", **options)


def build(lower_bound=None, use_gate_in_kernel=False, use_qk_l2norm_in_kernel=False,
          use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, use_A_log=True,
          use_dt_bias=True) -> dsl.Recurrence:
    """KDA with chunk_kda's options (FLA 0.6.0 defaults); use_A_log/use_dt_bias apply to the in-kernel gate."""
    return dsl.build(kda, lower_bound=lower_bound, use_gate_in_kernel=use_gate_in_kernel,
                     use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                     use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                     use_A_log=use_A_log, use_dt_bias=use_dt_bias)


def from_options(opt: Options, has_A_log: bool = True, has_dt_bias: bool = True) -> dsl.Recurrence:
    return build(**options_kwargs(opt, "kda", has_A_log, has_dt_bias))
