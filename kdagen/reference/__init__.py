"""float64 references, written by hand and independent of the DSL.

- `recurrent(x, opt)`: the token-by-token recurrence (docs/math.md §2); differentiate it with autograd.
- `chunked(x, opt, chunk_size)`: the chunked forward (docs/math.md §4).
- `chunked_backward(x, opt, do, dht, chunk_size)`: the hand-derived chunked backward (docs/math.md §7),
  split as the kernels are: recurrence_bwd (`chunk_delta_rule_bwd_k2`) then prepare_bwd prepare (`prepare_bwd`).
- `blocks.branches`: one chunk's per-branch gradients by 16-row blocks (docs/math.md §7.10), the form a chunk-64
  prepare_bwd computes.

`x` is a dict of FLA's tensors by argument name; `opt` an `Options`.
"""
from .api import chunked, chunked_backward
from .chunked import chunk_delta_rule_bwd_k2, chunk_delta_rule_fwd, chunk_terms
from .options import Options, prologue, sequence_spans
from .prepare import prepare_bwd
from .recurrent import delta_rule_recurrent, recurrent

__all__ = [
    "Options", "chunked", "chunked_backward", "chunk_delta_rule_bwd_k2", "chunk_delta_rule_fwd",
    "chunk_terms", "delta_rule_recurrent", "prepare_bwd", "prologue", "recurrent", "sequence_spans",
]
