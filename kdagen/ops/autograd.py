"""The autograd.Function behind every op: chunk_kda, chunk_gated_delta_rule and a compiled recurrence.

Its forward runs the kernels of kdagen.ops.forward and keeps the workspaces the plan saves; its backward
hands them to kdagen.ops.backward. The tensors it takes are the recurrence's inputs by name (token inputs,
then head parameters) and the initial state; the gradients come back keyed the same way. The kernels are
reached through `kernel_forward` and `kernel_backward`, the only two entry points (CPU tests stand the
float64 interpreter in for them).
"""
from __future__ import annotations

import torch


def kernel_forward(x: dict, call, keep: bool):
    """(o, final_state or None, saved): see kdagen.ops.forward.forward."""
    from .forward import forward
    return forward(x, call, keep)


def kernel_backward(saved, do: torch.Tensor, dht: torch.Tensor | None) -> dict:
    """Gradients by input name and "initial_state": see kdagen.ops.backward.backward."""
    from .backward import backward
    return backward(saved, do, dht)


class RecurrenceFunction(torch.autograd.Function):
    """One Function for every recurrence: `names` labels the tensors that follow (the last is initial_state);
    the call (kdagen.ops.run.Call) carries the rest."""

    @staticmethod
    def forward(ctx, call, names, *tensors):
        x = dict(zip(names, tensors))
        x["cu_seqlens"] = call.cu_seqlens
        keep = any(ctx.needs_input_grad)
        o, final_state, saved = kernel_forward(x, call, keep)
        if keep:
            ctx.saved = saved
            ctx.names = names
            ctx.save_for_backward(*tensors)            # an in-place edit before the backward → error
            ctx.o_like = (o.shape, o.dtype, o.device)
        ctx.set_materialize_grads(False)       # an unused final_state gets dht = None, not a zero tensor
        return o, final_state

    @staticmethod
    @torch.autograd.function.once_differentiable     # the kernels' gradients carry no graph: no double backward
    def backward(ctx, do, dht):
        inputs = ctx.saved_tensors
        if do is None:
            shape, dtype, device = ctx.o_like
            do = torch.zeros(shape, dtype=dtype, device=device)
        grads = kernel_backward(ctx.saved, do.contiguous(), None if dht is None else dht.contiguous())
        out = []
        for name, x, needed in zip(ctx.names, inputs, ctx.needs_input_grad[2:]):
            grad = grads.get(name) if needed else None
            if needed and grad is None:
                raise RuntimeError(f"kdagen's backward returned no gradient for {name}, which requires one")
            out.append(None if grad is None else grad.to(x.dtype))
        return (None, None, *out)


def apply(call, tensors: dict, initial_state):
    """(o, final_state) for validated inputs; differentiable in every tensor input and the initial state."""
    names = (*tensors, "initial_state")
    return RecurrenceFunction.apply(call, names, *tensors.values(), initial_state)
