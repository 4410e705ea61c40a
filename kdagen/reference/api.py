"""The full ops on the chunked reference: forward, and the hand-derived backward (no autograd)."""
from __future__ import annotations

from .chunked import chunk_delta_rule_bwd_k2, chunk_delta_rule_fwd
from .options import Options, prologue, scale_of, state_in, state_out
from .prepare import prepare_bwd


def _core_args(x: dict, opt: Options, p: dict, chunk_size: int) -> dict:
    return dict(q=p["q"], k=p["k"], v=x["v"], a=p["a"], beta=p["beta"], scale=scale_of(opt, x["q"].shape[-1]),
                h0=state_in(x, opt), chunk_size=chunk_size, cu_seqlens=x.get("cu_seqlens"))


def chunked(x: dict, opt: Options, chunk_size: int = 64):
    """Forward of the full op in chunked form: returns (o, final_state), like `recurrent`."""
    p = prologue(x, opt)
    o, S, _ = chunk_delta_rule_fwd(**_core_args(x, opt, p, chunk_size))
    return o, state_out(S, opt)


def chunked_backward(x: dict, opt: Options, do, dht=None, chunk_size: int = 64) -> dict:
    """Gradients of Σ o⊙do + Σ final_state⊙dht w.r.t. every input, by recurrence_bwd then prepare_bwd.

    Returns a dict keyed like the inputs: q, k, v, g, beta, A_log, dt_bias, initial_state
    (None where the input is absent or does not take part).
    """
    p = prologue(x, opt)
    dht_core = None if dht is None else state_in({"initial_state": dht}, opt)
    g = chunk_delta_rule_bwd_k2(**_core_args(x, opt, p, chunk_size), do=do, dht=dht_core)
    grads = prepare_bwd(x, p, opt, g, chunk_size)
    grads["initial_state"] = None if x.get("initial_state") is None else state_out(g["dh0"], opt)
    return grads
