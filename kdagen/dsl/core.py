"""The chunked core `delta_rule`: its operand contract, and its forward and adjoint on tensors.

The core's math is not re-derived here: forward and adjoint are kdagen.reference's chunked
functions (chunk_delta_rule_fwd; chunk_delta_rule_bwd_k2 then prepare.combine and
chunk_reverse_cumsum), so the DSL and the hand-written reference cannot disagree about the core.

Operand tensors arrive in the interpreter's layout: query/key [B,T,H,K] on the q/k heads,
everything else on the HV = G·H value heads: value [B,T,HV,V], beta [B,T,HV], decay [B,T,HV,K]
(vector) or [B,T,HV] (scalar), scale a 0-d tensor.
"""
from __future__ import annotations

from ..reference.chunked import chunk_delta_rule_bwd_k2, chunk_delta_rule_fwd
from ..reference.options import reduce_heads
from ..reference.prepare import chunk_reverse_cumsum, combine
from .errors import DSLError, RuleError

CORE_OP = "delta_rule"
ROLES = ("query", "key", "value", "beta", "decay", "scale")
GRAD_ROLES = ROLES[:-1]   # no gradient for the scale: it is a scalar or a constant

# role -> (allowed shapes, allowed kinds)
_CONTRACT = {
    "query": ({("K",)}, {"token"}),
    "key": ({("K",)}, {"token"}),
    "value": ({("V",)}, {"token"}),
    "beta": ({()}, {"token", "head"}),
    "decay": ({("K",), ()}, {"token", "head"}),
    "scale": ({()}, {"scalar", "const"}),
}


def operand_rule(operands: dict) -> dict:
    """Shape rule of the core: operands maps role -> operand attrs (with "id")."""
    for role in ROLES:
        a = operands[role]
        shapes, kinds = _CONTRACT[role]
        if tuple(a["shape"]) not in shapes:
            want = " or ".join(str(s) for s in sorted(shapes, key=len, reverse=True))
            raise RuleError(f"{role} must have shape {want}, got {tuple(a['shape'])} from {a['id']!r}")
        if a["kind"] not in kinds:
            raise RuleError(f"{role} must be of kind {' or '.join(sorted(kinds))}, got {a['kind']!r} "
                            f"from {a['id']!r}")
    return {"shape": ("V",), "kind": "token"}


def decay_kind(decay_shape: tuple) -> str:
    return "vector" if decay_shape else "scalar"


def _heads(core: str, ops: dict) -> int:
    """H, after checking the GVA layout: query and key on H heads, the rest on HV = G·H."""
    H, HV = ops["query"].shape[2], ops["value"].shape[2]
    if ops["key"].shape[2] != H or HV % H:
        raise DSLError(core, f"query/key have {H} and {ops['key'].shape[2]} heads and value {HV}: "
                             "query and key need the same head count, dividing value's (GVA)")
    return H


def forward(core: str, ops: dict, h0, chunk_size: int, cu_seqlens):
    """(o [B,T,HV,V], final state [N,HV,K,V]) of the chunked delta rule."""
    _heads(core, ops)
    o, S, _ = chunk_delta_rule_fwd(ops["query"], ops["key"], ops["value"], ops["decay"], ops["beta"],
                                   ops["scale"], h0, chunk_size, cu_seqlens)
    return o, S


def backward(core: str, ops: dict, h0, chunk_size: int, cu_seqlens, do, dht):
    """The core's adjoint: seeds role -> gradient of that operand, and dh0.

    d_decay is the per-step decay gradient after the chunk-local reverse cumsum; d_query and d_key
    are summed over the value heads sharing a q/k head (GVA), ready for the prologue adjoint.
    """
    H = _heads(core, ops)
    g = chunk_delta_rule_bwd_k2(ops["query"], ops["key"], ops["value"], ops["decay"], ops["beta"],
                                ops["scale"], h0, chunk_size, do, dht, cu_seqlens)
    c = combine(ops["query"], ops["key"], g)
    d_decay = chunk_reverse_cumsum(c["dgc"], c["kbr"], g["dgT"], chunk_size, cu_seqlens)
    if ops["decay"].dim() == 3:
        d_decay = d_decay.sum(-1)
    seeds = {"query": reduce_heads(c["dq"], H), "key": reduce_heads(c["dk"], H), "value": g["dv"],
             "beta": g["dbeta"], "decay": d_decay}
    return seeds, g["dh0"]
