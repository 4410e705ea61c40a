"""kdagen's ops as PyTorch custom operators (torch.library): `kdagen::recurrence_forward` and
`kdagen::recurrence_backward`, with fake implementations (output and workspace shapes from input shapes alone)
and the forward's autograd formula. torch.compile(fullgraph=True), torch.export and CUDA-graph capture see one
opaque op per direction instead of Python they would have to trace or skip.

The schema holds only tensors, numbers and strings, so what a call is specialised on besides its tensors travels
as `key` (`call_key`): the recurrence (a Spec of this process, by its key), the state layout, the requested
family and whether the kernels are emulated. Every op (chunk_kda, chunk_gated_delta_rule,
kdagen.compile) makes its Spec, and so its key, before any call.

The ops are registered through torch.library's Library (schema, CompositeExplicitAutograd kernel, fake kernel,
Autograd kernel) rather than the torch.library.custom_op decorator, whose generic autograd wrapper (pytree
flattening of the arguments, a generated Function, an aliasing check per call) cost more host time per eager
call than the rest of the forward: the Autograd kernel here is an autograd.Function over the flattened tensors,
entered only where an input requires grad.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

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
    segments: int
    ranking: str | None


def call_key(spec, state_layout: str, family: str | None, emulate: bool, segments: int = 1,
             ranking: str | None = None) -> str:
    """The string a call's static part travels as: the Spec's key (config.SPECS), the state layout, the family,
    whether the kernels are emulated, a training call's segments per sequence (kdagen.ops.forward.
    training_segments) and its class for ranking families (kdagen.ops.run.training_ranking): what its saved
    workspaces' shapes follow. Plain string formatting, so torch.compile traces it."""
    return (f"{spec.key}|{state_layout}|{family or '-'}|{'emulate' if emulate else 'device'}|{segments}|"
            f"{ranking or '-'}")


@functools.lru_cache(maxsize=256)
def entry(key: str) -> Entry:
    fields = key.split("|")
    if len(fields) != 7:
        raise ValueError(f"kdagen op key {key!r}: expected name|sha|state layout|family|mode|segments|ranking "
                         f"(call_key), got {len(fields)} fields")
    name, sha, state_layout, family, mode, segments, ranking = fields
    spec = SPECS.get(f"{name}|{sha}")
    if spec is None:
        raise KeyError(f"kdagen op key {key!r}: no such recurrence in this process; call the op (or kdagen.compile "
                       "the recurrence) before running a graph that holds it")
    return Entry(spec, state_layout, None if family == "-" else family, mode == "emulate", int(segments),
                 None if ranking == "-" else ranking)


def _call(key: str, scalars: list[float], output_final_state: bool, cu_seqlens):
    """The kdagen.ops.run.Call the kernels read."""
    from .run import Call
    e = entry(key)
    return Call(e.spec, dict(zip(e.spec.scalars, scalars)), output_final_state, e.state_layout, cu_seqlens, e.family,
                e.emulate, segments=e.segments, ranking=e.ranking)


def _inputs(key: str, inputs: list[torch.Tensor], initial_state, cu_seqlens) -> dict:
    return {**dict(zip(entry(key).spec.inputs, inputs)), "initial_state": initial_state, "cu_seqlens": cu_seqlens}


def _sizes(key: str, plan, x: dict, segments: int = 1) -> dict:
    """The plan's launch sizes for the call's tensors; cut into `segments`, for their view [B·S, T/S]."""
    spec = entry(key).spec
    v = x[spec.value]
    ref = x[spec.qk[0]] if spec.qk else v
    cu = x["cu_seqlens"]
    return launch_sizes(B=v.shape[0] * segments, T=v.shape[1] // segments, H=ref.shape[2], HV=v.shape[2],
                        chunk=plan.chunk, num_seqs=None if cu is None else cu.shape[0] - 1)


def _no_state(like: torch.Tensor) -> torch.Tensor:
    """The empty tensor standing for an absent state (the schema has no optional outputs)."""
    return like.new_empty(0, dtype=torch.float32)


_LIB = torch.library.Library("kdagen", "DEF")
_LIB.define("recurrence_forward(str key, Tensor[] inputs, Tensor? initial_state, Tensor? cu_seqlens, float[] scalars, "
            "bool output_final_state, bool keep) -> (Tensor, Tensor, Tensor[])", tags=(torch.Tag.pt2_compliant_tag,))
_LIB.define("recurrence_backward(str key, Tensor[] inputs, Tensor? initial_state, Tensor? cu_seqlens, "
            "float[] scalars, Tensor[] saved, Tensor do, Tensor? dht) -> Tensor[]", tags=(torch.Tag.pt2_compliant_tag,))
# The Autograd kernels below do what torch.library's own autograd registration does, through the same three
# torch._C names (present from torch 2.4 to at least 2.13); missing, kdagen cannot register its ops.
_MISSING = [n for n in ("_after_autograd_keyset", "_AutoDispatchBelowAutograd", "_any_requires_grad")
            if not hasattr(torch._C, n)]
if _MISSING:
    raise ImportError(f"kdagen's custom ops need torch._C.{', '.join(_MISSING)}, which torch {torch.__version__} "
                      "lacks; install a torch version kdagen supports (pyproject.toml)")
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
recurrence_forward = torch.ops.kdagen.recurrence_forward.default
recurrence_backward = torch.ops.kdagen.recurrence_backward.default


def _forward_impl(key: str, inputs: list, initial_state, cu_seqlens, scalars: list, output_final_state: bool,
                  keep: bool):
    """kdagen::recurrence_forward: (o, the final state — empty when not requested —, the workspaces the plan saves
    for the backward — none unless `keep`). `inputs`: the recurrence's token inputs then head parameters, in
    declaration order; `scalars`: its scalars in declaration order."""
    from . import autograd
    x = _inputs(key, inputs, initial_state, cu_seqlens)
    o, ht, saved = autograd.kernel_forward(x, _call(key, scalars, output_final_state, cu_seqlens), keep)
    ws = [] if saved is None else [saved["workspace"][n] for n in saved["plan"].saved]
    if saved is not None and saved.get("segment_states") is not None:
        ws += [saved["segment_states"][n] for n in autograd.SEGMENT_STATES]
    return o, _no_state(o) if ht is None else ht, ws


def _forward_fake(key, inputs, initial_state, cu_seqlens, scalars, output_final_state, keep):
    x = _inputs(key, inputs, initial_state, cu_seqlens)
    v = x[entry(key).spec.value]
    plan = call_config(x, _call(key, scalars, output_final_state, cu_seqlens), keep).planned()[0]
    S = entry(key).segments if keep else 1
    sizes = _sizes(key, plan, x, S)
    ht = v.new_empty(state_shape(plan, sizes["N"] // S, v.shape[2]), dtype=torch.float32) if output_final_state \
        else _no_state(v)
    ws = [v.new_empty([evaluate(d, sizes) for d in plan.workspace(n).shape],
                      dtype=TORCH_DTYPES[plan.workspace(n).dtype]) for n in plan.saved] if keep else []
    if keep and S > 1:                   # the segments' incoming states and maps (kdagen.ops.segmented)
        ws += [v.new_empty(state_shape(plan, sizes["N"], v.shape[2]), dtype=torch.float32) for _ in range(2)]
    return torch.empty_like(v), ht, ws


def _backward_impl(key: str, inputs: list, initial_state, cu_seqlens, scalars: list, saved: list, do, dht) -> list:
    """kdagen::recurrence_backward: the gradients of Σ o⊙do + Σ final_state⊙dht for every input, then the initial
    state's (empty without one); `saved`: what recurrence_forward kept."""
    from . import autograd
    x = _inputs(key, inputs, initial_state, cu_seqlens)
    names = entry(key).spec.inputs
    grads = autograd.kernel_backward(x, _call(key, scalars, dht is not None, cu_seqlens), saved, do, dht)
    missing = [n for n in names if grads.get(n) is None] + \
        (["initial_state"] if initial_state is not None and grads.get("initial_state") is None else [])
    if missing:
        raise RuntimeError(f"kdagen's backward returned no gradient for {', '.join(missing)}")
    return [grads[n] for n in names] + [_no_state(do) if initial_state is None else grads["initial_state"]]


def _backward_fake(key, inputs, initial_state, cu_seqlens, scalars, saved, do, dht):
    return [torch.empty_like(t) for t in inputs] + \
        [_no_state(do) if initial_state is None else torch.empty_like(initial_state)]


def _below_autograd(op, keyset, *args):
    """op(*args) dispatched past its Autograd kernel (what an Autograd kernel does once it has handled autograd)."""
    with torch._C._AutoDispatchBelowAutograd():
        return op.redispatch(keyset & _AFTER_AUTOGRAD, *args)


class _Forward(torch.autograd.Function):
    """recurrence_forward's autograd formula: the inputs (token inputs, head parameters, initial state) flattened
    into arguments, the saved workspaces non-differentiable outputs, the backward kdagen::recurrence_backward."""

    @staticmethod
    def forward(ctx, keyset, key, scalars, output_final_state, keep, initial_state, cu_seqlens, *inputs):
        o, ht, saved = _below_autograd(recurrence_forward, keyset, key, list(inputs), initial_state, cu_seqlens,
                                       scalars, output_final_state, keep)
        ctx.key, ctx.scalars, ctx.output_final_state, ctx.keep, ctx.n = key, scalars, output_final_state, keep, \
            len(inputs)
        ctx.o_like = (o.shape, o.dtype, o.device)
        ctx.set_materialize_grads(False)     # an unused final state gives dht = None, not a tensor of zeros
        ctx.has_state, ctx.has_cu = initial_state is not None, cu_seqlens is not None
        ctx.save_for_backward(*inputs, *([initial_state] if ctx.has_state else []),
                              *([cu_seqlens] if ctx.has_cu else []), *saved)
        ctx.mark_non_differentiable(*saved)
        return (o, ht, *saved)

    @staticmethod
    def backward(ctx, grad_o, grad_ht, *grad_saved):
        if not ctx.keep:
            raise RuntimeError("kdagen::recurrence_forward ran with keep=False, so it kept nothing a backward needs "
                               "(kdagen.ops.run.apply sets keep when an input requires grad)")
        stored = list(ctx.saved_tensors)
        tensors, rest = stored[:ctx.n], stored[ctx.n:]
        initial_state = rest.pop(0) if ctx.has_state else None
        cu_seqlens = rest.pop(0) if ctx.has_cu else None
        if grad_o is None:                   # only the final state was used
            shape, dtype, device = ctx.o_like
            grad_o = torch.zeros(shape, dtype=dtype, device=device)
        dht = grad_ht if ctx.output_final_state and grad_ht is not None else None
        grads = dispatch(recurrence_backward, (ctx.key, tensors, initial_state, cu_seqlens, ctx.scalars, rest,
                                               grad_o.contiguous(), None if dht is None else dht.contiguous()),
                         torch.is_grad_enabled())
        return (None, None, None, None, None, grads[-1] if ctx.has_state else None, None, *grads[:-1])


def _forward_autograd(keyset, key, inputs, initial_state, cu_seqlens, scalars, output_final_state, keep):
    """The forward's Autograd kernel: the autograd formula where an input requires grad, else straight to the
    implementation (no autograd.Function, no argument flattening: the eager inference path)."""
    if torch.is_grad_enabled() and torch._C._any_requires_grad(inputs, initial_state):
        o, ht, *saved = _Forward.apply(keyset, key, scalars, output_final_state, keep, initial_state, cu_seqlens,
                                       *inputs)
        return o, ht, saved
    return _below_autograd(recurrence_forward, keyset, key, inputs, initial_state, cu_seqlens, scalars,
                           output_final_state, keep)


class _NoDerivative(torch.autograd.Function):
    """recurrence_backward called where its outputs would need a gradient (double backward): refused when that
    gradient is asked for."""

    @staticmethod
    def forward(ctx, keyset, key, scalars, n, initial_state, cu_seqlens, do, dht, *tensors):
        return tuple(_below_autograd(recurrence_backward, keyset, key, list(tensors[:n]), initial_state, cu_seqlens,
                                     scalars, list(tensors[n:]), do, dht))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("kdagen::recurrence_backward has no derivative: a double backward through kdagen's ops "
                           "is not supported")


def _backward_autograd(keyset, key, inputs, initial_state, cu_seqlens, scalars, saved, do, dht):
    if torch.is_grad_enabled() and torch._C._any_requires_grad(inputs, initial_state, saved, do, dht):
        return list(_NoDerivative.apply(keyset, key, scalars, len(inputs), initial_state, cu_seqlens, do, dht,
                                        *inputs, *saved))
    return _below_autograd(recurrence_backward, keyset, key, inputs, initial_state, cu_seqlens, scalars, saved, do,
                           dht)


# What `direct` reads of torch's state: private torch._C names (present from torch 2.4 to at least 2.13); where one
# is missing, every call goes through the dispatcher.
_C = torch._C
_DIRECT = all(hasattr(_C, n) for n in ("_len_torch_dispatch_stack", "_is_torch_function_mode_enabled",
                                        "_get_tracing_state", "_dispatch_tls_local_include_set", "DispatchKeySet")) \
    and hasattr(_C._autograd, "_profiler_enabled") and hasattr(_C.DispatchKeySet, "raw_repr")
_PLAIN_KEYS = _C.DispatchKeySet(_C.DispatchKey.BackendSelect).add(_C.DispatchKey.ADInplaceOrView).raw_repr() \
    if _DIRECT else 0


def direct(tensors) -> bool:
    """Whether, for a call asking for no gradient, the dispatcher would do nothing but run the op's
    implementation on these tensors (each a tensor or None): `eager()`, and `plain(tensors)`."""
    return eager() and plain(tensors)


def eager() -> bool:
    """Nothing compiles, traces (torch.jit) or profiles (the profiler records dispatched ops); no
    TorchFunctionMode, no TorchDispatchMode (FakeTensorMode, functionalization and proxy modes included), no
    dispatch key beyond the default ones in the thread's include set (functorch transforms, functionalization,
    the Python dispatcher add theirs)."""
    return _DIRECT and not (torch.compiler.is_compiling() or _C._len_torch_dispatch_stack()
                            or _C._is_torch_function_mode_enabled() or _C._autograd._profiler_enabled()
                            or _C._get_tracing_state() is not None
                            or _C._dispatch_tls_local_include_set().raw_repr() & ~_PLAIN_KEYS)


def plain(tensors) -> bool:
    """Every tensor a plain torch.Tensor (no subclass) off the meta device (the fake kernel serves that)."""
    return all(t is None or type(t) is torch.Tensor and not t.is_meta for t in tensors)


def dispatch(op, args: tuple, grad: bool):
    """op(*args); where no gradient is asked for (`grad` false), past the op's Autograd kernel, as that kernel
    would go — to the implementation without the dispatcher where that is all it would do (`direct`)."""
    if grad or torch.compiler.is_compiling():
        return op(*args)
    if direct(_tensors(args)):
        return _IMPLEMENTATIONS[op](*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def _tensors(args: tuple) -> list:
    """The tensors (and Nones) among an op's arguments, tensor lists flattened."""
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(t for t in a if t is None or isinstance(t, torch.Tensor))
        elif a is None or isinstance(a, torch.Tensor):
            out.append(a)
    return out


_LIB.impl("recurrence_forward", _forward_impl, "CompositeExplicitAutograd")
_LIB.impl("recurrence_backward", _backward_impl, "CompositeExplicitAutograd")
_LIB.impl("recurrence_forward", _forward_autograd, "Autograd", with_keyset=True)
_LIB.impl("recurrence_backward", _backward_autograd, "Autograd", with_keyset=True)
torch.library.register_fake("kdagen::recurrence_forward", _forward_fake, lib=_LIB)
torch.library.register_fake("kdagen::recurrence_backward", _backward_fake, lib=_LIB)
_IMPLEMENTATIONS = {recurrence_forward: _forward_impl, recurrence_backward: _backward_impl}
