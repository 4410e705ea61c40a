"""The public ops: chunk_kda and chunk_gated_delta_rule with flash-linear-attention 0.6.0's signatures, and
`compile(recurrence)`, the op of any recurrence written in kdagen.dsl — all one path (kdagen.ops.run).

Kernels compile on first use (or come from the cache); KDAGEN_PRECOMPILE names configurations to
compile right here, when kdagen is imported (see `kdagen compile --help`).
"""
from ..runtime import env as _env
from .api import chunk_gated_delta_rule, chunk_gdn, chunk_kda, make_call, reference_options
from .compiled import RecurrenceOp, compile
from .context_parallel import build_cp_context


def _precompile_from_environment() -> None:
    """KDAGEN_PRECOMPILE at import: a configuration that does not parse or compile is a warning, so a typo in
    the environment cannot make `import kdagen` fail (the calls compile what they need anyway)."""
    configs = _env.precompile_list()
    if configs:
        from .precompile import precompile
        try:
            precompile(configs)
        except (ImportError, NotImplementedError, RuntimeError, TypeError, ValueError) as e:
            import warnings
            warnings.warn(f"KDAGEN_PRECOMPILE not compiled: {type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)


_precompile_from_environment()

__all__ = ["RecurrenceOp", "build_cp_context", "chunk_gated_delta_rule", "chunk_gdn", "chunk_kda", "compile", "make_call",
           "reference_options"]
