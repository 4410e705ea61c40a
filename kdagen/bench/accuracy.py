"""Both libraries against the float64 token recurrence on the same inputs: relative L2 per tensor.

The reference (kdagen.reference.recurrent, differentiated by autograd) sees the exact bf16/fp32
input values upcast to float64, and the loss Σ o⊙dO + Σ ht⊙dht that the libraries' backward uses.
"""
from __future__ import annotations

import torch

from kdagen.reference import recurrent

from .cases import Variant
from .inputs import InputSet, float64_copy
from .libraries import Library, error_text


def rel_l2(x: torch.Tensor | None, ref: torch.Tensor) -> float | None:
    """‖x − ref‖ / ‖ref‖ in float64 (NaN stays NaN); None when the library gave no tensor."""
    if x is None:
        return None
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-300))


def reference(variant: Variant, s: InputSet) -> dict:
    """o, ht and the gradient of every input (keyed by the input's name) from the float64 recurrence."""
    x = float64_copy(s)
    o, ht = recurrent(x, variant.options())
    loss = (o * s.do.double()).sum() + (ht * s.dht.double()).sum()
    grads = torch.autograd.grad(loss, [x[n] for n in s.leaves])
    return {"o": o.detach(), "ht": ht.detach(), **dict(zip(s.leaves, grads))}


def library_errors(lib: Library, variant: Variant, s: InputSet, ref: dict) -> dict:
    """{"errors": {tensor: rel L2 or None}, "note": why something is missing, or None}."""
    if lib.unavailable(variant.function):
        return {"errors": {}, "note": lib.unavailable(variant.function)}
    fn = lib.functions[variant.function]
    try:
        o, ht = fn(**s.inputs, **variant.call_kwargs())
    except Exception as e:
        return {"errors": {}, "note": f"forward {lib.failure_prefix}: {error_text(e)}"}
    errors = {"o": rel_l2(o, ref["o"]), "ht": rel_l2(ht, ref["ht"])}
    note = None
    try:
        grads = s.grads((o, ht))
        errors.update({n: rel_l2(grads[n], ref[n]) for n in s.leaves})
    except Exception as e:
        note = f"backward {lib.failure_prefix}: {error_text(e)}"
    return {"errors": errors, "note": note}
