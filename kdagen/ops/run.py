"""The one path from a call to the kernels, for every op: validate the tensors against the recurrence, then the
autograd Function (kdagen.ops.autograd), which plans, compiles and launches through kdagen.ops.forward and
kdagen.ops.backward. chunk_kda, chunk_gated_delta_rule and kdagen.compile(...) ops all call `run`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .autograd import apply
from .config import Spec
from .validate import validate


@dataclass(frozen=True)
class Call:
    """A validated call, as the forward and backward read it."""
    spec: Spec
    scalars: dict = field(compare=False)       # every scalar of the recurrence as a float (scale defaulted)
    output_final_state: bool = False
    state_layout: str = "kv"                   # "kv": states [N,HV,K,V]; "vk": state_v_first
    cu_seqlens: object = field(default=None, compare=False)
    family: str | None = None                  # a requested kernel family, else KDAGEN_FAMILY or the planner's
    emulate: bool = False                      # the kernels on the CPU, through kdagen.codegen.emulate


def run(spec: Spec, tensors: dict, scalars: dict, *, initial_state=None, output_final_state: bool = False,
        cu_seqlens=None, cu_seqlens_cpu=None, state_v_first: bool = False, family: str | None = None,
        emulate: bool = False):
    """(o [B,T,HV,V], final state [N,HV,K,V] ([N,HV,V,K] with state_v_first) or None) of the recurrence on
    these inputs; differentiable in every tensor of `tensors` and in initial_state."""
    if not isinstance(output_final_state, bool):
        raise TypeError(f"output_final_state must be a bool, got {type(output_final_state).__name__}")
    if not isinstance(state_v_first, bool):
        raise TypeError(f"state_v_first must be a bool, got {type(state_v_first).__name__}")
    _, _, resolved = validate(spec, tensors, scalars, initial_state=initial_state, cu_seqlens=cu_seqlens,
                              cu_seqlens_cpu=cu_seqlens_cpu, state_v_first=state_v_first,
                              device_type="cpu" if emulate else "cuda")
    call = Call(spec, resolved, output_final_state, "vk" if state_v_first else "kv", cu_seqlens, family, emulate)
    ordered = {n: tensors[n] for n in (*spec.recurrence.token_inputs, *spec.recurrence.head_params)}
    return apply(call, ordered, initial_state)
