"""The autograd.Function behind chunk_kda and chunk_gated_delta_rule.

Its forward runs the kernels of kdagen.ops.forward and keeps the workspaces the plan saves; its backward
hands them to kdagen.ops.backward. The kernels are reached through `kernel_forward` and
`kernel_backward`, the only two entry points (CPU tests stand the float64 reference in for them).
"""
from __future__ import annotations

import torch

GRAD_INPUTS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


def kernel_forward(x: dict, call, keep: bool):
    """(o, final_state or None, saved): see kdagen.ops.forward.forward."""
    from .forward import forward
    return forward(x, call, keep)


def kernel_backward(saved, do: torch.Tensor, dht: torch.Tensor | None) -> dict:
    """Gradients keyed like GRAD_INPUTS (None where an input is absent): see kdagen.ops.backward.backward."""
    from .backward import backward
    return backward(saved, do, dht)


class ChunkDeltaRuleFunction(torch.autograd.Function):
    """One Function for both ops: `call.opt.op` says KDA or GDN; non-tensor settings come first."""

    @staticmethod
    def forward(ctx, call, q, k, v, g, beta, A_log, dt_bias, initial_state):
        x = dict(zip(GRAD_INPUTS, (q, k, v, g, beta, A_log, dt_bias, initial_state)))
        x["cu_seqlens"] = call.tensors["cu_seqlens"]
        keep = any(ctx.needs_input_grad)
        o, final_state, saved = kernel_forward(x, call, keep)
        if keep:
            ctx.saved = saved
            ctx.save_for_backward(q, k, v, g, beta, A_log, dt_bias, initial_state)  # in-place edits → error
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
        for name, x, needed in zip(GRAD_INPUTS, inputs, ctx.needs_input_grad[1:]):
            grad = grads.get(name) if needed else None
            if needed and grad is None:
                raise RuntimeError(f"kdagen's backward returned no gradient for {name}, which requires one")
            out.append(None if grad is None else grad.to(x.dtype))
        return (None, *out)


def apply(call, q, k, v, g, beta):
    """(o, final_state) for validated inputs; differentiable in every tensor input."""
    t = call.tensors
    return ChunkDeltaRuleFunction.apply(call, q, k, v, g, beta,
                                        t["A_log"], t["dt_bias"], t["initial_state"])
