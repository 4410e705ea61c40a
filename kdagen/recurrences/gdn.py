"""GDN (gated delta net): the gated delta rule with one decay per head, in the DSL."""
from __future__ import annotations

from kdagen import dsl
from kdagen.reference.options import Options

from .delta_rule import gated_delta_rule, options_kwargs


def gdn(r: dsl.Recurrence, **options) -> None:
    """Write GDN into r: the decay is a scalar per token and head (no lower-bound gate form)."""
    gated_delta_rule(r, None, **options)


def build(use_gate_in_kernel=False, use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
          allow_neg_eigval=False, use_A_log=True, use_dt_bias=True) -> dsl.Recurrence:
    """GDN with chunk_gated_delta_rule's options (FLA 0.6.0 defaults); GDN has no lower_bound."""
    return dsl.build(gdn, use_gate_in_kernel=use_gate_in_kernel, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                     use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                     use_A_log=use_A_log, use_dt_bias=use_dt_bias)


def from_options(opt: Options, has_A_log: bool = True, has_dt_bias: bool = True) -> dsl.Recurrence:
    return build(**options_kwargs(opt, "gdn", has_A_log, has_dt_bias))
