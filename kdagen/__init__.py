"""kdagen: a kernel compiler for chunked linear-attention recurrences (KDA, gated delta rule)."""
__version__ = "0.1.0"
