"""The public ops: torch.autograd functions with flash-linear-attention 0.6.0's signatures.

Kernels compile on first use (or come from the cache); KDAGEN_PRECOMPILE names configurations to
compile right here, when kdagen is imported (see `kdagen compile --help`).
"""
from ..runtime import env as _env
from .api import chunk_gated_delta_rule, chunk_gdn, chunk_kda, make_call, reference_options


def _precompile_from_environment() -> None:
    configs = _env.precompile_list()
    if configs:
        from .precompile import precompile
        precompile(configs)


_precompile_from_environment()

__all__ = ["chunk_gated_delta_rule", "chunk_gdn", "chunk_kda", "make_call", "reference_options"]
