"""The public ops, with flash-linear-attention 0.6.0's exact signatures.

`resolve` is the one place where FLA's options become a `kdagen.reference.Options` (the math)
plus the few settings that only steer the kernels. Options FLA accepts are handled so:
- same math, only a hint → accepted: `chunk_size` (kdagen always tiles by 16; validated as FLA does),
  `disable_recompute` (kdagen's backward recomputes from its forward workspace either way),
  `safe_gate` (with the in-kernel gate: lower_bound is checked to lie in [-5, 0) as FLA does; with a
  precomputed g: the caller's promise that g ∈ [lower_bound, 0), passed on as `Call.gate_bound`),
  `cu_seqlens_cpu` (a host copy of cu_seqlens that spares a sync; trusted, as in FLA),
  `chunk_indices` (FLA's chunk list for its own chunk size; kdagen builds its own);
- `use_graph` / `max_num_seqs` (cu_seqlens padded to a static count for CUDA-graph capture): accepted with FLA's
  meaning; kdagen never reads cu_seqlens on the host then (nor while torch.compile traces or a graph captures);
- `cp_context`: the tokens of one packed batch sharded across the ranks of a process group, with FLA's
  semantics (kdagen.ops.context_parallel; initial_state / output_final_state for the whole batch with kdagen's
  own context);
- different outputs or semantics → NotImplementedError naming the option: `return_intermediate_states`;
- meaningless here (nothing would read it) → ValueError, so nothing is silently ignored:
  `A_log` / `dt_bias` without `use_gate_in_kernel`, `lower_bound` without the in-kernel gate or safe_gate,
  and GDN's `head_first` (removed from FLA, which raises on it too);
- anything else in **kwargs → TypeError naming it;
- a value of the wrong kind, before it can reach the recurrence → TypeError / ValueError naming the option: a
  flag that is not a bool (FLA types them so; 'False' would read as true), a lower_bound that is not a finite
  negative number (it bounds a decay that must stay ≤ 0).
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass, field
from numbers import Real

import torch

from ..reference import Options
from ..runtime import env as runtime_env
from . import context_parallel, segments
from .run import KEYED

KDA_CHUNK_SIZES = (32, 64)
GDN_CHUNK_SIZES = (16, 32, 64)
SAFE_GATE_RANGE = (-5.0, 0.0)        # FLA: lower_bound in [-5, 0) with safe_gate and the in-kernel gate
BOOL_OPTIONS = ("use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
                "safe_gate", "disable_recompute", "return_intermediate_states", "state_v_first", "use_graph",
                "transpose_state_layout")


@dataclass(frozen=True)
class Call:
    """One call's settings: the math (`opt`) and what only steers the kernels."""
    opt: Options
    output_final_state: bool
    chunk_size: int                  # FLA's requested tile; kdagen's planner picks its own
    gate_bound: float | None         # safe_gate's promise: precomputed g lies in [gate_bound, 0)
    tensors: dict = field(default_factory=dict, compare=False)   # A_log, dt_bias, initial_state, cu_seqlens[_cpu]
    use_graph: bool = False          # FLA's use_graph: cu_seqlens' values are never read on the host


def _pop_kwargs(op: str, kwargs: dict, state_v_first: bool) -> tuple[dict, bool]:
    """The **kwargs FLA reads, checked; returns (them by name, state_v_first after the deprecated alias)."""
    kwargs = dict(kwargs)
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise ValueError("pass either state_v_first or the deprecated transpose_state_layout, not both")
        warnings.warn("transpose_state_layout is deprecated; use state_v_first", DeprecationWarning, stacklevel=5)
        state_v_first = kwargs.pop("transpose_state_layout")
    if op == "gdn" and "head_first" in kwargs:
        raise ValueError("head_first was removed from FLA; pass q, k, v as [B, T, H, D] and drop head_first")
    read = {"A_log": None, "dt_bias": None, "chunk_size": 64}
    if op == "gdn":
        read["use_gate_in_kernel"] = False
    found = {name: kwargs.pop(name, default) for name, default in read.items()}
    if kwargs:
        fn = "chunk_kda" if op == "kda" else "chunk_gated_delta_rule"
        raise TypeError(f"{fn}() got unexpected keyword argument(s) {sorted(kwargs)}; "
                        f"**kwargs may hold only {sorted([*read, 'transpose_state_layout'])}")
    return found, state_v_first


def _unsupported(p: dict) -> None:
    if p.get("return_intermediate_states"):
        raise NotImplementedError("return_intermediate_states=True is not supported by kdagen")


def _graph_options(p: dict) -> bool:
    """FLA's use_graph / max_num_seqs: cu_seqlens padded with empty tail sequences to a static count, read by
    no host code (kdagen never needs its values on the host: the chunk grid is an upper bound from shapes)."""
    use_graph, max_num_seqs, cu = bool(p.get("use_graph", False)), p.get("max_num_seqs"), p.get("cu_seqlens")
    if max_num_seqs is None:
        return use_graph
    if not use_graph:
        raise ValueError("max_num_seqs is only used with use_graph=True; it would be ignored here")
    if cu is None:
        raise ValueError("max_num_seqs bounds the sequences of cu_seqlens; without cu_seqlens it would be ignored")
    if isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int) or max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be a positive int, got {max_num_seqs!r}")
    if isinstance(cu, torch.Tensor) and cu.dim() == 1 and cu.shape[0] - 1 != max_num_seqs:
        raise ValueError(f"with use_graph, cu_seqlens must hold max_num_seqs + 1 = {max_num_seqs + 1} entries (pad "
                         f"it with empty tail sequences), got {cu.shape[0]}")
    return use_graph


def _check_bools(options: dict) -> None:
    """FLA types these options as bool: anything else is refused, or a string such as 'False' would act as true."""
    for name in BOOL_OPTIONS:
        value = options.get(name, False)
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def _lower_bound(lower_bound, use_gate: bool, safe_gate: bool) -> float | None:
    """lower_bound as a float, checked here: it becomes a constant (the in-kernel gate lb·σ(·)) or a declared
    bound (safe_gate's precomputed g ∈ [lb, 0)) of the recurrence, where a bad value would surface as an error
    about an internal node, or as a positive decay whose kernels overflow."""
    if lower_bound is None:
        if safe_gate and use_gate:
            raise ValueError(f"safe_gate=True with use_gate_in_kernel=True needs lower_bound in "
                             f"[{SAFE_GATE_RANGE[0]}, {SAFE_GATE_RANGE[1]}), got None")
        return None
    if not (use_gate or safe_gate):
        raise ValueError("lower_bound only acts with use_gate_in_kernel=True or safe_gate=True; it would be ignored")
    if isinstance(lower_bound, bool) or not isinstance(lower_bound, Real):
        raise TypeError(f"lower_bound must be a float, got {type(lower_bound).__name__} {lower_bound!r}")
    lower_bound = float(lower_bound)
    if not math.isfinite(lower_bound) or lower_bound >= 0:
        raise ValueError(f"lower_bound must be a finite negative number (the decay lies in [lower_bound, 0]; a "
                         f"positive one would grow the state), got {lower_bound}")
    lo, hi = SAFE_GATE_RANGE
    if safe_gate and use_gate and not lo <= lower_bound < hi:
        raise ValueError(f"safe_gate=True with use_gate_in_kernel=True needs lower_bound in [{lo}, {hi}), "
                         f"got {lower_bound}")
    return lower_bound


def resolve(op: str, params: dict) -> Call:
    """A call's parameters by name (q … beta excluded or ignored, `kwargs` the **kwargs dict) → Call."""
    p = dict(params)
    _check_bools(p)
    _check_bools(p.get("kwargs", {}))
    _unsupported(p)
    kw, state_v_first = _pop_kwargs(op, p.pop("kwargs", {}), p.get("state_v_first", False))
    use_gate = p["use_gate_in_kernel"] if op == "kda" else kw["use_gate_in_kernel"]
    safe_gate = p.get("safe_gate", False)
    lower_bound = _lower_bound(p.get("lower_bound"), use_gate, safe_gate)
    sizes = KDA_CHUNK_SIZES if op == "kda" else GDN_CHUNK_SIZES
    if kw["chunk_size"] not in sizes:
        raise ValueError(f"chunk_size must be one of {sizes} for {op.upper()}, got {kw['chunk_size']!r}")
    if p["allow_neg_eigval"] and not p["use_beta_sigmoid_in_kernel"]:
        raise ValueError("allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
    if use_gate:
        if kw["A_log"] is None and lower_bound is None:
            raise ValueError("A_log must be given (in **kwargs) when use_gate_in_kernel=True"
                             + (" and lower_bound is not set" if op == "kda" else ""))
    else:
        for name in ("A_log", "dt_bias"):
            if kw[name] is not None:
                raise ValueError(f"{name} is only used with use_gate_in_kernel=True; it would be ignored here")
    opt = Options(op=op, scale=p["scale"], use_qk_l2norm_in_kernel=p["use_qk_l2norm_in_kernel"],
                  use_gate_in_kernel=use_gate, use_beta_sigmoid_in_kernel=p["use_beta_sigmoid_in_kernel"],
                  allow_neg_eigval=p["allow_neg_eigval"], lower_bound=lower_bound if use_gate else None,
                  state_v_first=state_v_first)
    gate_bound = lower_bound if safe_gate and not use_gate else None
    return Call(opt, p["output_final_state"], kw["chunk_size"], gate_bound, call_tensors(params), _graph_options(p))


def call_tensors(params: dict) -> dict:
    """The tensors among a call's parameters (Call.tensors): A_log and dt_bias from the **kwargs, the initial
    state and the sequence offsets."""
    kwargs = params.get("kwargs", {})
    return {"A_log": kwargs.get("A_log"), "dt_bias": kwargs.get("dt_bias"), "initial_state": params["initial_state"],
            "cu_seqlens": params["cu_seqlens"], "cu_seqlens_cpu": params["cu_seqlens_cpu"]}


def call_params(op: str, **options) -> dict:
    """The parameters `chunk_kda(q, k, v, g, beta, **options)` ("kda") or `chunk_gated_delta_rule` ("gdn")
    sees, defaults filled in and the extra keywords under "kwargs": what `resolve` reads."""
    fn = {"kda": chunk_kda, "gdn": chunk_gated_delta_rule}[op]
    names = inspect.signature(fn).parameters
    params = {n: p.default for n, p in names.items() if p.default is not inspect.Parameter.empty}
    params["kwargs"] = {}
    for name, value in options.items():
        (params if name in names and name != "kwargs" else params["kwargs"])[name] = value
    return params


def make_call(op: str, **options) -> Call:
    """The Call for `chunk_kda(q, k, v, g, beta, **options)` ("kda") or `chunk_gated_delta_rule` ("gdn"),
    under the same rules as the call itself; tensors among the options land in `Call.tensors`."""
    return resolve(op, call_params(op, **options))


def reference_options(op: str, **options) -> Options:
    """The float64 reference's Options for a call with these keyword arguments (for the GPU tests)."""
    return make_call(op, **options).opt


def recurrence_inputs(call: Call, given: dict) -> tuple:
    """(Spec, the recurrence's tensors by name, scalars) of a chunk_kda / chunk_gated_delta_rule call: KDA and
    GDN are DSL recurrences (kdagen.recurrences) whose inputs carry FLA's names. `given`: q, k, v, g, beta."""
    from .config import call_spec
    spec = call_spec(call)
    return spec, _inputs(spec, given, call.tensors), ({} if call.opt.scale is None else {"scale": call.opt.scale})


def _inputs(spec, given: dict, tensors: dict) -> dict:
    """The recurrence's tensors by name: q … beta as given, A_log and dt_bias from the call's `tensors`."""
    given = {**given, "A_log": tensors["A_log"], "dt_bias": tensors["dt_bias"]}
    return {n: given[n] for n in spec.inputs}


def kernel_call(call: Call, given: dict, *, family: str | None = None, emulate: bool = False):
    """(kdagen.ops.run.Call, tensors) for calling kdagen.ops.forward directly, past the input checks (tests and
    probes); `given` holds q, k, v, g, beta."""
    from .run import Call as RunCall
    spec, tensors, scalars = recurrence_inputs(call, given)
    scale = scalars.get("scale", given["q"].shape[-1] ** -0.5)
    return RunCall(spec, {"scale": float(scale)}, call.output_final_state, "vk" if call.opt.state_v_first else "kv",
                   call.tensors["cu_seqlens"], family, emulate), tensors


def run_arguments(call: Call, given: dict) -> tuple:
    """(Spec, tensors, scalars, options) of kdagen.ops.run.run (or .checked) for a chunk_kda /
    chunk_gated_delta_rule call; `given`: q, k, v, g, beta."""
    spec, tensors, scalars = recurrence_inputs(call, given)
    t = call.tensors
    options = dict(initial_state=t["initial_state"], output_final_state=call.output_final_state,
                   cu_seqlens=t["cu_seqlens"], cu_seqlens_cpu=t["cu_seqlens_cpu"],
                   state_v_first=call.opt.state_v_first, use_graph=call.use_graph)
    return spec, tensors, scalars, options


_RESOLVED: dict[tuple, tuple] = {}     # _run's memo: (Spec, scalars, run options) by what resolve reads
_CACHED_OPTIONS = 256
_TENSOR_ARGUMENTS = frozenset({"initial_state", "cu_seqlens", "cu_seqlens_cpu", "chunk_indices", "A_log", "dt_bias"})
_PER_CALL = ("initial_state", "cu_seqlens", "cu_seqlens_cpu")     # run's options that are tensors of the call


def _resolve_key(op: str, params: dict) -> tuple | None:
    """What `resolve` reads of the parameters chunk_kda / chunk_gated_delta_rule pass `_run` (each op's names in a
    fixed order, so only the **kwargs' are spelled out), hashable: of a tensor argument its presence (and
    cu_seqlens' shape where max_num_seqs is given, which use_graph checks), of any other argument its type and
    value (True and 1 resolve differently). None where that is not all resolve reads — a value of another type
    where a number or flag is expected (a tensor scale, say) — or where resolve must run again: the deprecated
    transpose_state_layout warns at every call."""
    kwargs = params["kwargs"]
    if "transpose_state_layout" in kwargs:
        return None
    values = []
    for name, value in (*params.items(), *kwargs.items()):
        if name in _TENSOR_ARGUMENTS:
            values.append(value is None)
        elif type(value) in KEYED:
            values += (type(value), value)
        elif value is not kwargs:
            return None
    cu = params.get("cu_seqlens")
    if params.get("max_num_seqs") is not None and isinstance(cu, torch.Tensor):
        values.append(cu.shape)
    return op, tuple(kwargs), tuple(values)


def _run(op: str, params: dict, q, k, v, g, beta):
    """chunk_kda / chunk_gated_delta_rule: resolve, then kdagen.ops.run.run. What resolve makes of the options
    (the Spec, the scalars, the run options) is memoised on `_resolve_key` (outside torch.compile, which traces
    resolve); the tensors are the call's own."""
    from .run import run
    fn = chunk_kda if op == "kda" else chunk_gated_delta_rule
    if params.get("cp_context") is not None:    # tokens sharded across ranks (docs/context_parallel.md)
        return context_parallel.run(fn, q, k, v, g, beta, params["cp_context"], params, resolve(op, params))
    setting = runtime_env.segments()
    if setting != "off":                # KDAGEN_SEGMENTS: long sequences cut into segments (docs/segments.md)
        out = segments.maybe_run(fn, q, k, v, g, beta, params, resolve(op, params), setting)
        if out is not None:
            return out
    given = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    key = None if torch.compiler.is_compiling() else _resolve_key(op, params)
    try:
        resolved = None if key is None else _RESOLVED.get(key)
    except TypeError:                   # a symbolic shape (a tracer's fake tensor) does not hash
        key = resolved = None
    if resolved is None:
        spec, _, scalars, options = run_arguments(resolve(op, params), given)
        resolved = spec, scalars, {n: o for n, o in options.items() if n not in _PER_CALL}
        if key is not None:
            if len(_RESOLVED) >= _CACHED_OPTIONS:
                _RESOLVED.clear()
            _RESOLVED[key] = resolved
    spec, scalars, options = resolved
    tensors = call_tensors(params)
    return run(spec, _inputs(spec, given, tensors), scalars, **options, **{n: tensors[n] for n in _PER_CALL})


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, disable_recompute=False,
              return_intermediate_states=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              cp_context=None, use_graph=False, max_num_seqs=None, **kwargs):
    """KDA (Kimi Delta Attention): the chunked gated delta rule with one decay per key channel, with the
    signature and semantics of `fla.ops.kda.chunk_kda` 0.6.0, forward and backward on kdagen's kernels.

    Per token t and value head: S_t = Diag(e^{a_t}) S_{t-1} + β_t k_t (v_t − (Diag(e^{a_t}) S_{t-1})ᵀ k_t)ᵀ and
    o_t = scale · S_tᵀ q_t (docs/math.md §1–2).

    Args:
        q, k: [B, T, H, K] bfloat16, the queries and keys (H q/k heads; K ∈ {64, 128}).
        v: [B, T, HV, V] bfloat16, the values; HV a multiple of H (grouped value attention), V = K.
        g: [B, T, HV, K] bfloat16 or float32: the per-step log decay a_t (≤ 0), or with use_gate_in_kernel the
            raw gate input the decay is computed from.
        beta: [B, T, HV] bfloat16 or float32: β, or its logits with use_beta_sigmoid_in_kernel.
        scale: the output scale (default K^-½).
        initial_state: float32 [N, HV, K, V] ([N, HV, V, K] with state_v_first), N = B or the sequences of
            cu_seqlens; default zeros.
        output_final_state: return the final states as the second output.
        use_qk_l2norm_in_kernel: q, k ← q/‖q‖, k/‖k‖ per head.
        use_gate_in_kernel: a = −e^{A_log}·softplus(g + dt_bias), or lower_bound·σ(e^{A_log}·(g + dt_bias)) with
            lower_bound; A_log [HV] and dt_bias [HV·K] (float32) come in **kwargs (either may be omitted when
            lower_bound is given).
        use_beta_sigmoid_in_kernel: β = σ(beta); allow_neg_eigval: β = 2σ(beta) ∈ (0, 2) (needs the former).
        safe_gate, lower_bound: as FLA: with the in-kernel gate, lower_bound ∈ [−5, 0) selects the sigmoid form;
            without it (safe_gate=True), the caller's promise that g ∈ [lower_bound, 0) (kdagen plans the faster
            factored form from it).
        disable_recompute: accepted (kdagen's backward recomputes from its forward workspace either way).
        return_intermediate_states: not supported (NotImplementedError).
        cp_context: this rank's share of a packed batch sharded over a process group (kdagen.build_cp_context or
            FLA's build_cp_context; docs/context_parallel.md); then B = 1, and initial_state / the final
            states are the whole batch's [N, ...] (kdagen's context only; each row on the rank where it ends).
        state_v_first: states laid out [.., V, K] (also the deprecated transpose_state_layout in **kwargs).
        cu_seqlens: int64 [N + 1] offsets of N packed sequences along T (B = 1); cu_seqlens_cpu: a host copy
            that spares kdagen its one read of cu_seqlens' values (trusted, as in FLA).
        use_graph, max_num_seqs: FLA's CUDA-graph mode: cu_seqlens padded with empty tail sequences to
            max_num_seqs + 1 entries, never read on the host; outputs of tokens past cu_seqlens[-1] are undefined.
        **kwargs: A_log, dt_bias, chunk_size (32 or 64, as FLA validates it; kdagen picks its own tiles).

    Returns:
        (o [B, T, HV, V] bfloat16, final state float32 or None). Differentiable in every tensor argument.

    Raises:
        TypeError, ValueError, NotImplementedError naming the argument (see README "Using the ops").
    """
    params = dict(scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  safe_gate=safe_gate, lower_bound=lower_bound, disable_recompute=disable_recompute,
                  return_intermediate_states=return_intermediate_states, state_v_first=state_v_first,
                  cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, cp_context=cp_context, use_graph=use_graph,
                  max_num_seqs=max_num_seqs, kwargs=kwargs)     # not locals(): torch 2.11's dynamo cannot trace it
    return _run("kda", params, q, k, v, g, beta)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                           allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                           chunk_indices=None, cp_context=None, **kwargs):
    """The gated delta rule (GDN): one decay per head and token, with the signature and semantics of
    `fla.ops.gated_delta_rule.chunk_gated_delta_rule` 0.6.0, forward and backward on kdagen's kernels.

    Args:
        q, k: [B, T, H, K] bfloat16 (K ∈ {64, 128}); v: [B, T, HV, V] bfloat16, HV a multiple of H, V = K.
        g: [B, T, HV] bfloat16 or float32: the per-step log decay (≤ 0), or with use_gate_in_kernel=True (in
            **kwargs) the raw gate input of a = −e^{A_log}·softplus(g + dt_bias), A_log and dt_bias [HV] float32
            in **kwargs.
        beta: [B, T, HV] bfloat16 or float32: β, or its logits with use_beta_sigmoid_in_kernel.
        scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel,
        allow_neg_eigval, state_v_first, cu_seqlens, cu_seqlens_cpu: as in chunk_kda.
        chunk_indices: FLA's chunk list for its own chunk size; accepted, kdagen builds its own.
        cp_context: as in chunk_kda; head_first (FLA removed it): ValueError.
        **kwargs: use_gate_in_kernel, A_log, dt_bias, chunk_size (16, 32 or 64).

    Returns:
        (o [B, T, HV, V] bfloat16, final state float32 or None). Differentiable in every tensor argument.
    """
    params = dict(scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                  cu_seqlens_cpu=cu_seqlens_cpu, chunk_indices=chunk_indices, cp_context=cp_context, kwargs=kwargs)
    return _run("gdn", params, q, k, v, g, beta)


chunk_gdn = chunk_gated_delta_rule
