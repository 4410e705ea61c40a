"""kdagen: a kernel compiler for chunked linear-attention recurrences (KDA, gated delta rule)."""
__version__ = "0.1.0"

from .ops import (RecurrenceOp, build_cp_context, chunk_gated_delta_rule, chunk_gdn,  # noqa: E402  (after __version__)
                  chunk_kda, compile)

__all__ = ["RecurrenceOp", "__version__", "build_cp_context", "chunk_gated_delta_rule", "chunk_gdn", "chunk_kda", "compile"]
