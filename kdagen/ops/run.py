"""The one path from a call to the kernels, for every op: validate the tensors against the recurrence, then the
custom op kdagen::recurrence_forward (kdagen.ops.library; its autograd formula runs kdagen::recurrence_backward),
which plans, compiles and launches through kdagen.ops.forward and kdagen.ops.backward. chunk_kda,
chunk_gated_delta_rule and kdagen.compile(...) ops all call `run`.

A call repeats a signature (its tensors' types, shapes, contiguity, dtypes and devices, its scalars and options)
more often than not. `checked` validates a signature once; a later call of it only runs the checks that read
values (cu_seqlens), and shares with the earlier ones a memo where the forward keeps what it derives from the
signature (Config, sizes, its own checks). An eager call that asks for no gradient runs the op's implementation
without the dispatcher where that is all the dispatcher would do (kdagen.ops.library.eager and plain).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..plan.families import ranking, requested
from ..runtime import env as runtime_env
from . import autograd, library
from .config import TRAINING, Spec
from .validate import seqlens_values, validate


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
    # shared by the calls of one validated signature: what is derived from it (Config, Sized...), each by its key
    memo: dict | None = field(default=None, compare=False, repr=False)
    segments: int = 1                          # a training call's segments per sequence (forward.training_segments)
    ranking: str | None = None                 # a training call's class for ranking families (training_ranking),
    #                                            else ranked by its pairs where the Config is made


def host_reads_allowed() -> bool:
    """False while torch.compile traces or a CUDA graph captures: then nothing may read device values on the
    host (cu_seqlens' values are not checked; their count comes from the shape)."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


_CHECKED: dict[tuple, Call] = {}       # checked's memo: the Call of each signature validated, cu_seqlens left out
_CACHED_SIGNATURES = 256
KEYED = frozenset({bool, int, float, str, type(None)})     # the types of scalars and options a memo keys on


def checked(spec: Spec, tensors: dict, scalars: dict, *, initial_state=None, output_final_state: bool = False,
            cu_seqlens=None, cu_seqlens_cpu=None, state_v_first: bool = False, family: str | None = None,
            emulate: bool = False, use_graph: bool = False) -> Call:
    """The Call of these arguments once every input check passed (errors name the argument). use_graph:
    cu_seqlens may end with empty sequences padding it to a static count, and its values are not checked on the
    host. Memoised on the call's signature (outside torch.compile, which traces the checks): a signature seen
    before is not validated again, but cu_seqlens' values are (`seqlens_values`)."""
    options = (output_final_state, state_v_first, family, emulate, use_graph)
    key = None if torch.compiler.is_compiling() else \
        signature(spec, tensors, scalars, initial_state, cu_seqlens, cu_seqlens_cpu, options)
    try:
        call = None if key is None else _CHECKED.get(key)
    except TypeError:                   # symbolic sizes (a tracer's fake tensors) do not hash
        key = call = None
    read_seqlens = cu_seqlens is not None and not use_graph and host_reads_allowed()
    if call is None:
        call = _checked(spec, tensors, scalars, initial_state, cu_seqlens, cu_seqlens_cpu, options, read_seqlens)
        if key is None:
            return call
        if len(_CHECKED) >= _CACHED_SIGNATURES:
            _CHECKED.clear()
        call = _CHECKED[key] = Call(spec, call.scalars, output_final_state, call.state_layout, None, family, emulate,
                                    {})
    elif cu_seqlens is not None:
        seqlens_values(cu_seqlens, cu_seqlens_cpu, tensors[spec.qk[0] if spec.qk else spec.value].shape[1],
                       read_seqlens)
    if cu_seqlens is None:
        return call
    return Call(spec, call.scalars, output_final_state, call.state_layout, cu_seqlens, family, emulate, call.memo)


def _checked(spec: Spec, tensors: dict, scalars: dict, initial_state, cu_seqlens, cu_seqlens_cpu, options: tuple,
             read_seqlens: bool) -> Call:
    output_final_state, state_v_first, family, emulate, use_graph = options
    if not isinstance(output_final_state, bool):
        raise TypeError(f"output_final_state must be a bool, got {type(output_final_state).__name__}")
    if not isinstance(state_v_first, bool):
        raise TypeError(f"state_v_first must be a bool, got {type(state_v_first).__name__}")
    _, _, resolved = validate(spec, tensors, scalars, initial_state=initial_state, cu_seqlens=cu_seqlens,
                              cu_seqlens_cpu=cu_seqlens_cpu, state_v_first=state_v_first,
                              device_type="cpu" if emulate else "cuda", read_seqlens=read_seqlens)
    return Call(spec, resolved, output_final_state, "vk" if state_v_first else "kv", cu_seqlens, family, emulate)


def signature(spec: Spec, tensors: dict, scalars: dict, initial_state, cu_seqlens, cu_seqlens_cpu,
              options: tuple) -> tuple | None:
    """What `validate` reads of a call besides cu_seqlens' values: per tensor its type, shape, contiguity (its
    strides are read for nothing else), dtype and device; the scalars and options with their types (True and 1
    check differently). None where something else was passed — a tensor scalar (its value is checked), an input
    that is not a tensor —: such a call is validated in full."""
    values = (*scalars.values(), *options)
    if not KEYED.issuperset(map(type, values)):
        return None
    optional = [t for t in (initial_state, cu_seqlens, cu_seqlens_cpu) if t is not None]
    try:
        metas = tuple((type(t), t.size(), t.is_contiguous(), t.dtype, t.device) for t in (*tensors.values(), *optional))
    except (AttributeError, TypeError, RuntimeError):
        return None
    # the Spec by identity: the memo's Call holds it, so its id is not reused while the entry lives
    return (id(spec), tuple(tensors), tuple(scalars), values, tuple(map(type, values)),
            (initial_state is None, cu_seqlens is None, cu_seqlens_cpu is None), metas)


def run(spec: Spec, tensors: dict, scalars: dict, *, initial_state=None, **options):
    """(o [B,T,HV,V], final state [N,HV,K,V] ([N,HV,V,K] with state_v_first) or None) of the recurrence on
    these inputs (options: those of `checked`); differentiable in every tensor of `tensors` and in
    initial_state."""
    return apply(checked(spec, tensors, scalars, initial_state=initial_state, **options), tensors, initial_state)


def _plain(call: Call, inputs: list, initial_state) -> bool:
    """library.plain of the call's tensors: once per signature (types and devices are part of it) where the call
    has a memo."""
    tensors = (*inputs, initial_state, call.cu_seqlens)
    if call.memo is None:
        return library.plain(tensors)
    plain = call.memo.get("plain")
    if plain is None:
        plain = call.memo["plain"] = library.plain(tensors)
    return plain


def training_segments(call: Call, inputs: list) -> int:
    """kdagen.ops.forward.training_segments of the call, memoised per validated signature (its shapes); 1 while
    torch.compile traces (the graph keeps the uncut step: the planner's code is not traced)."""
    if torch.compiler.is_compiling():
        return 1
    memo = call.memo
    # what the decision reads besides the signature: KDAGEN_CUT, and the family and arch the plan is made for
    key = ("segments", runtime_env.cut(), call.family or requested(), runtime_env.arch_override())
    segments = None if memo is None else memo.get(key)
    if segments is None:
        from .forward import training_segments as decide
        segments = decide({**dict(zip(call.spec.inputs, inputs)), "cu_seqlens": call.cu_seqlens}, call)
        if memo is not None:
            memo[key] = segments
    return segments


def training_ranking(call: Call, inputs: list) -> str:
    """The class a training call ranks families by (families.ranking), decided before the custom op runs and carried
    in its key: torch.compile's fake implementation may not know the call's (sequence, head) pairs (a symbolic batch
    size), and it must plan the same family, so the same saved workspaces, as the kernels. Shape arithmetic only."""
    from .forward import call_pairs
    v = inputs[call.spec.inputs.index(call.spec.value)]
    ref = inputs[call.spec.inputs.index(call.spec.qk[0])] if call.spec.qk else v   # the head dim K, as the Config
    return ranking(TRAINING, call_pairs(v, call.cu_seqlens, int(v.shape[2])), int(ref.shape[3]), call.spec.rank_kind)


def apply(call: Call, tensors: dict, initial_state):
    """(o, final state or None) through the custom op kdagen::recurrence_forward (kdagen.ops.library), whose
    autograd formula runs kdagen::recurrence_backward; the tensors are not checked here (`run` does). Where no
    gradient is asked for and the dispatcher would only pass the call on (library.direct), its implementation
    runs directly, with the Call and its per-signature memo."""
    spec = call.spec
    inputs = [tensors[n] for n in spec.inputs]
    keep = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (*inputs, initial_state))
    if not keep and library.eager() and _plain(call, inputs, initial_state):
        x = {**dict(zip(spec.inputs, inputs)), "initial_state": initial_state, "cu_seqlens": call.cu_seqlens}
        o, ht, _ = autograd.kernel_forward(x, call, False)
    else:
        segments = training_segments(call, inputs) if keep else 1
        key = library.call_key(spec, call.state_layout, call.family, call.emulate, segments,
                               training_ranking(call, inputs) if keep else None)
        args = (key, inputs, initial_state, call.cu_seqlens, [call.scalars[n] for n in spec.scalars],
                call.output_final_state, keep)
        o, ht, _ = library.dispatch(library.recurrence_forward, args, keep)
    return o, ht if call.output_final_state else None
