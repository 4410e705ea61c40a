"""kdagen's ops as PyTorch custom operators (torch.library): `kdagen::recurrence_forward` and
`kdagen::recurrence_backward`, with fake implementations (output and workspace shapes from input shapes alone)
and the forward's autograd formula. torch.compile(fullgraph=True), torch.export and CUDA-graph capture see one
opaque op per direction instead of Python they would have to trace or skip.

The schema holds only tensors, numbers and strings, so what a call is specialised on besides its tensors travels
as `key` (`call_key`): the recurrence (a Spec of this process, by its key), the state layout, the requested
family and whether the kernels are emulated. Every op (chunk_kda, chunk_gated_delta_rule,
kdagen.compile) makes its Spec, and so its key, before any call.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch

from ..plan.sizes import evaluate, launch_sizes
from .config import SPECS
from .forward import call_config
from .launcher import TORCH_DTYPES, state_shape


@dataclass(frozen=True)
class Entry:
    """The static part of a call: what `key` stands for."""
    spec: object                 # kdagen.ops.config.Spec
    state_layout: str
    family: str | None
    emulate: bool


def call_key(spec, state_layout: str, family: str | None, emulate: bool) -> str:
    """The string a call's static part travels as: the Spec's key (config.SPECS), the state layout, the family,
    and whether the kernels are emulated. Plain string formatting, so torch.compile traces it."""
    return f"{spec.key}|{state_layout}|{family or '-'}|{'emulate' if emulate else 'device'}"


@functools.lru_cache(maxsize=256)
def entry(key: str) -> Entry:
    name, sha, state_layout, family, mode = key.split("|")
    spec = SPECS.get(f"{name}|{sha}")
    if spec is None:
        raise KeyError(f"kdagen op key {key!r}: no such recurrence in this process; call the op (or kdagen.compile "
                       "the recurrence) before running a graph that holds it")
    return Entry(spec, state_layout, None if family == "-" else family, mode == "emulate")


def _call(key: str, scalars: list[float], output_final_state: bool, cu_seqlens):
    """The kdagen.ops.run.Call the kernels read."""
    from .run import Call
    e = entry(key)
    return Call(e.spec, dict(zip(e.spec.scalars, scalars)), output_final_state, e.state_layout, cu_seqlens, e.family,
                e.emulate)


def _inputs(key: str, inputs: list[torch.Tensor], initial_state, cu_seqlens) -> dict:
    return {**dict(zip(entry(key).spec.inputs, inputs)), "initial_state": initial_state, "cu_seqlens": cu_seqlens}


def _sizes(key: str, plan, x: dict) -> dict:
    spec = entry(key).spec
    v = x[spec.value]
    ref = x[spec.qk[0]] if spec.qk else v
    cu = x["cu_seqlens"]
    return launch_sizes(B=v.shape[0], T=v.shape[1], H=ref.shape[2], HV=v.shape[2], chunk=plan.chunk,
                        num_seqs=None if cu is None else cu.shape[0] - 1)


def _no_state(like: torch.Tensor) -> torch.Tensor:
    """The empty tensor standing for an absent state (the schema has no optional outputs)."""
    return like.new_empty(0, dtype=torch.float32)


@torch.library.custom_op("kdagen::recurrence_forward", mutates_args=())
def recurrence_forward(key: str, inputs: list[torch.Tensor], initial_state: Optional[torch.Tensor],
                       cu_seqlens: Optional[torch.Tensor], scalars: list[float], output_final_state: bool,
                       keep: bool) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """(o, the final state — empty when not requested —, the workspaces the plan saves for the backward — none
    unless `keep`). `inputs`: the recurrence's token inputs then head parameters, in declaration order;
    `scalars`: its scalars in declaration order."""
    from . import autograd
    x = _inputs(key, inputs, initial_state, cu_seqlens)
    o, ht, saved = autograd.kernel_forward(x, _call(key, scalars, output_final_state, cu_seqlens), keep)
    ws = [] if saved is None else [saved["workspace"][n] for n in saved["plan"].saved]
    return o, _no_state(o) if ht is None else ht, ws


@recurrence_forward.register_fake
def _(key, inputs, initial_state, cu_seqlens, scalars, output_final_state, keep):
    x = _inputs(key, inputs, initial_state, cu_seqlens)
    v = x[entry(key).spec.value]
    plan = call_config(x, _call(key, scalars, output_final_state, cu_seqlens), keep).planned()[0]
    sizes = _sizes(key, plan, x)
    ht = v.new_empty(state_shape(plan, sizes["N"], v.shape[2]), dtype=torch.float32) if output_final_state \
        else _no_state(v)
    ws = [v.new_empty([evaluate(d, sizes) for d in plan.workspace(n).shape],
                      dtype=TORCH_DTYPES[plan.workspace(n).dtype]) for n in plan.saved] if keep else []
    return torch.empty_like(v), ht, ws


@torch.library.custom_op("kdagen::recurrence_backward", mutates_args=())
def recurrence_backward(key: str, inputs: list[torch.Tensor], initial_state: Optional[torch.Tensor],
                        cu_seqlens: Optional[torch.Tensor], scalars: list[float], saved: list[torch.Tensor],
                        do: torch.Tensor, dht: Optional[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of Σ o⊙do + Σ final_state⊙dht for every input, then the initial state's (empty without
    one); `saved`: what recurrence_forward kept."""
    from . import autograd
    x = _inputs(key, inputs, initial_state, cu_seqlens)
    e = entry(key)
    grads = autograd.kernel_backward(x, _call(key, scalars, dht is not None, cu_seqlens), saved, do, dht)
    names = e.spec.inputs
    missing = [n for n in names if grads.get(n) is None] + \
        (["initial_state"] if initial_state is not None and grads.get("initial_state") is None else [])
    if missing:
        raise RuntimeError(f"kdagen's backward returned no gradient for {', '.join(missing)}")
    return [grads[n] for n in names] + [_no_state(do) if initial_state is None else grads["initial_state"]]


@recurrence_backward.register_fake
def _(key, inputs, initial_state, cu_seqlens, scalars, saved, do, dht):
    return [torch.empty_like(t) for t in inputs] + \
        [_no_state(do) if initial_state is None else torch.empty_like(initial_state)]


def _setup_context(ctx, inputs, output):
    key, tensors, initial_state, cu_seqlens, scalars, output_final_state, keep = inputs
    _, _, saved = output
    ctx.key, ctx.scalars, ctx.output_final_state, ctx.n = key, scalars, output_final_state, len(tensors)
    ctx.keep = keep
    ctx.o_like = (output[0].shape, output[0].dtype, output[0].device)
    ctx.set_materialize_grads(False)         # an unused final state gives dht = None, not a tensor of zeros
    ctx.has_state, ctx.has_cu = initial_state is not None, cu_seqlens is not None
    ctx.save_for_backward(*tensors, *([initial_state] if ctx.has_state else []),
                          *([cu_seqlens] if ctx.has_cu else []), *saved)


def _backward(ctx, grad_o, grad_ht, grad_saved):
    if not ctx.keep:
        raise RuntimeError("kdagen::recurrence_forward ran with keep=False, so it kept nothing a backward needs "
                           "(kdagen.ops.run.apply sets keep when an input requires grad)")
    stored = list(ctx.saved_tensors)
    tensors, rest = stored[:ctx.n], stored[ctx.n:]
    initial_state = rest.pop(0) if ctx.has_state else None
    cu_seqlens = rest.pop(0) if ctx.has_cu else None
    if grad_o is None:                      # only the final state was used
        shape, dtype, device = ctx.o_like
        grad_o = torch.zeros(shape, dtype=dtype, device=device)
    dht = grad_ht if ctx.output_final_state and grad_ht is not None else None
    grads = recurrence_backward(ctx.key, tensors, initial_state, cu_seqlens, ctx.scalars, rest,
                                grad_o.contiguous(), None if dht is None else dht.contiguous())
    return None, list(grads[:-1]), grads[-1] if ctx.has_state else None, None, None, None, None


recurrence_forward.register_autograd(_backward, setup_context=_setup_context)
