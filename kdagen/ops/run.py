"""The one path from a call to the kernels, for every op: validate the tensors against the recurrence, then the
custom op kdagen::recurrence_forward (kdagen.ops.library; its autograd formula runs kdagen::recurrence_backward),
which plans, compiles and launches through kdagen.ops.forward and kdagen.ops.backward. chunk_kda,
chunk_gated_delta_rule and kdagen.compile(...) ops all call `run`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import library
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


def host_reads_allowed() -> bool:
    """False while torch.compile traces or a CUDA graph captures: then nothing may read device values on the
    host (cu_seqlens' values are not checked; their count comes from the shape)."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def checked(spec: Spec, tensors: dict, scalars: dict, *, initial_state=None, output_final_state: bool = False,
            cu_seqlens=None, cu_seqlens_cpu=None, state_v_first: bool = False, family: str | None = None,
            emulate: bool = False, use_graph: bool = False) -> Call:
    """The Call of these arguments once every input check passed (errors name the argument). use_graph:
    cu_seqlens may end with empty sequences padding it to a static count, and its values are not checked on the
    host."""
    if not isinstance(output_final_state, bool):
        raise TypeError(f"output_final_state must be a bool, got {type(output_final_state).__name__}")
    if not isinstance(state_v_first, bool):
        raise TypeError(f"state_v_first must be a bool, got {type(state_v_first).__name__}")
    _, _, resolved = validate(spec, tensors, scalars, initial_state=initial_state, cu_seqlens=cu_seqlens,
                              cu_seqlens_cpu=cu_seqlens_cpu, state_v_first=state_v_first,
                              device_type="cpu" if emulate else "cuda",
                              read_seqlens=cu_seqlens is not None and not use_graph and host_reads_allowed())
    return Call(spec, resolved, output_final_state, "vk" if state_v_first else "kv", cu_seqlens, family, emulate)


def run(spec: Spec, tensors: dict, scalars: dict, *, initial_state=None, **options):
    """(o [B,T,HV,V], final state [N,HV,K,V] ([N,HV,V,K] with state_v_first) or None) of the recurrence on
    these inputs (options: those of `checked`); differentiable in every tensor of `tensors` and in
    initial_state."""
    return apply(checked(spec, tensors, scalars, initial_state=initial_state, **options), tensors, initial_state)


def apply(call: Call, tensors: dict, initial_state):
    """(o, final state or None) through the custom op kdagen::recurrence_forward (kdagen.ops.library), whose
    autograd formula runs kdagen::recurrence_backward; the tensors are not checked here (`run` does)."""
    spec = call.spec
    inputs = [tensors[n] for n in spec.inputs]
    keep = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (*inputs, initial_state))
    args = (library.call_key(spec, call.state_layout, call.family, call.emulate), inputs, initial_state,
            call.cu_seqlens, [call.scalars[n] for n in spec.scalars], call.output_final_state, keep)
    o, ht, _ = library.dispatch(library.recurrence_forward, args, keep)
    return o, ht if call.output_final_state else None
