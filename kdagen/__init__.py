"""kdagen: a kernel compiler for chunked linear-attention recurrences (KDA, gated delta rule)."""
__version__ = "0.1.0"

from .ops import (RecurrenceOp, chunk_gated_delta_rule, chunk_gdn, chunk_kda,  # noqa: E402  (after __version__)
                  compile)

__all__ = ["RecurrenceOp", "__version__", "chunk_gated_delta_rule", "chunk_gdn", "chunk_kda", "compile"]
