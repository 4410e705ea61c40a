"""Where the custom ops (kdagen.ops.library) reach the kernels: `kernel_forward` runs kdagen.ops.forward and
keeps the workspaces the plan saves, `kernel_backward` hands them to kdagen.ops.backward. These two functions
are the only entry points from autograd to the kernels; CPU tests stand the float64 interpreter in for them.
"""
from __future__ import annotations

import torch

SEGMENT_STATES = ("segment_h0", "segment_maps")     # what a cut forward saves after the plan's workspaces


def kernel_forward(x: dict, call, keep: bool):
    """(o, final_state or None, saved): see kdagen.ops.forward.forward."""
    from .forward import forward
    return forward(x, call, keep)


def kernel_backward(x: dict, call, workspace: list, do: torch.Tensor, dht: torch.Tensor | None) -> dict:
    """Gradients by input name and "initial_state" (see kdagen.ops.backward.backward) of the call whose forward
    kept `workspace` (the plan's saved workspaces, in its order, then — cut into call.segments — the segments'
    incoming states and maps)."""
    from .backward import backward
    from .forward import call_config
    config = call_config(x, call, keep=True)
    names = config.planned()[0].saved
    states = dict(zip(SEGMENT_STATES, workspace[len(names):])) if call.segments > 1 else None
    saved = {"config": config, "x": x, "scalars": call.scalars, "emulate": call.emulate,
             "workspace": dict(zip(names, workspace)), "segments": call.segments, "segment_states": states}
    return backward(saved, do, dht)
