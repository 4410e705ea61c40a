"""kdagen as a backend of flash-linear-attention's registry (`fla.backends`): with FLA_KDAGEN=1, FLA's own
`chunk_kda` and `chunk_gated_delta_rule` — and so `fla.layers.KimiDeltaAttention` and `GatedDeltaNet` — run on
kdagen's kernels, with no change to the model code.

    import kdagen.integrations.fla      # once, anywhere: registers the backends (FLA 0.6 must be importable)
    # FLA_KDAGEN=1 python train.py      # opt in; FLA logs "[FLA Backend] ... -> kdagen" on first dispatch

A call kdagen cannot serve (an option it lacks, a head dim without kernels, a CPU tensor...) is refused by the
verifier with the reason kdagen's own checks give, and FLA falls back to its Triton kernels and logs why
(kdagen.integrations.fla_adapter has the conversions and the verdicts).
"""
from __future__ import annotations

from .fla_adapter import BACKEND_TYPE, ENV, PRIORITY, run, verdict


def register_with_fla() -> list:
    """Register kdagen for FLA's chunk_kda and gated_delta_rule; returns the backend classes. Needs FLA 0.6's
    `fla.backends` (ImportError otherwise)."""
    from fla.backends import BaseBackend, register
    from fla.ops.kda.chunk import chunk_kda

    class _Kdagen(BaseBackend):
        backend_type = BACKEND_TYPE
        package_name = "kdagen"
        env_var = ENV
        default_enable = False
        priority = PRIORITY

    @register(chunk_kda)
    class KdagenKDABackend(_Kdagen):
        """kdagen's chunk_kda (forward and backward)."""

        def chunk_kda_verifier(self, *args, **kwargs):
            return verdict("kda", args, kwargs)

        def chunk_kda(self, *args, **kwargs):
            return run("kda", args, kwargs)

    @register("gated_delta_rule")
    class KdagenGDNBackend(_Kdagen):
        """kdagen's chunk_gated_delta_rule (forward and backward)."""

        def chunk_gated_delta_rule_verifier(self, *args, **kwargs):
            return verdict("gdn", args, kwargs)

        def chunk_gated_delta_rule(self, *args, **kwargs):
            return run("gdn", args, kwargs)

    return [KdagenKDABackend, KdagenGDNBackend]


BACKENDS = register_with_fla()
