"""The forward of every op on the GPU: the plan's forward kernels, one module.

`forward(x, call, keep)` (what kdagen.ops.autograd calls) builds the Config of the call (kdagen.ops.config:
the family is chosen for the directions the call runs), loads the forward unit and launches the plan's
forward kernels on torch's current stream (`kdagen plan` prints them: grids, block sizes, shared memory,
workspaces). Fixed-length batches run as B sequences of T tokens on the flattened B·T token axis; varlen
runs the cu_seqlens segments; the chunk grid is an upper bound (no host sync) whose surplus CTAs exit.
`saved` is what kdagen.ops.backward reads: the Config, the inputs, the scalars and the workspaces the
plan names in `saved`.
"""
from __future__ import annotations

import torch

from ..plan import Plan
from ..plan.cut import MIN_SEGMENT
from ..plan.families import ranking, requested
from ..plan.families.base import PASSED_DTYPE_INPUTS
from ..runtime import env as runtime_env
from . import segmented
from .config import INFERENCE, TRAINING, config_for, default_arch, loader_for
from .launcher import Schedule, Workspaces, launch_sized, poisoned, scalar_values, scheduled


def launch(plan: Plan, recurrence, module, x: dict, scalars: dict, *, output_final_state: bool = True,
           poison: bool = False, keep: bool = True):
    """Run the plan's forward kernels on the inputs x (the recurrence's tensors by name, plus
    initial_state and cu_seqlens): returns (o, final state or None, every forward workspace by plan name).
    `keep`: a backward will read the saved workspaces (their surplus chunk rows are zeroed)."""
    o, ht, ws = launch_scheduled(Schedule(plan, recurrence, "forward"), module, x, scalars,
                                 output_final_state=output_final_state, alloc=poisoned if poison else torch.empty,
                                 keep=keep)
    return o, ht, ws.tensors()


def launch_scheduled(schedule: Schedule, module, x: dict, scalars: dict, *, output_final_state: bool, alloc,
                     keep: bool, memo: dict | None = None):
    """`launch` with the plan read once (kdagen.ops.launcher.scheduled caches it per Config), returning the
    Workspaces; `memo`: a validated call's per-signature dict (Schedule.checked_sized)."""
    v = x[schedule.value]
    device = v.device
    sized = schedule.checked_sized(x, scalars, device, memo)
    ws = Workspaces(sized, device, alloc, separate=keep)
    # The chunk dim is an upper bound (chunks = B·T // C + N ≥ the real count, which only the device knows); the
    # surplus, at most the last N entries, is never written. Zeroed first (one multi-tensor launch), what the
    # forward keeps for the backward (an output of kdagen::recurrence_forward) is defined everywhere.
    if keep and sized.tails:
        torch._foreach_zero_([ws.separate[name][start:] for name, start in sized.tails])
    o = alloc(v.shape, dtype=v.dtype, device=device)
    ht = alloc(sized.state, dtype=torch.float32, device=device) if output_final_state else None
    tensors = {**schedule.call_tensors(sized, x, device, keep), "o": o, "ht": ht}
    launch_sized(sized, module, device, tensors, ws, scalar_values(scalars), "forward")
    return o, ht, ws


_CONFIGS: dict[tuple, object] = {}      # call_config's memo, by everything a Config is made of
_CACHED_CONFIGS = 256


def call_config(x: dict, call, keep: bool):
    """The Config of a call from its tensors' shapes and dtypes alone (the fake implementations read it too),
    memoised on what makes it: the Spec, the head counts and dims, varlen, the dtypes of g and beta, the device
    (its arch), the state layout, the directions, the family and the KDAGEN_FAMILY / KDAGEN_ARCH settings — in a
    validated call's per-signature memo (kdagen.ops.run.checked), which fixes all but the last three, on those."""
    family, arch = call.family or requested(), runtime_env.arch_override()
    memo = call.memo
    config = None if memo is None else memo.get((keep, family, arch))
    if config is None:
        config = _call_config(x, call, keep, family, arch)
        if memo is not None:
            memo[(keep, family, arch)] = config
    return config


def _call_config(x: dict, call, keep: bool, family: str | None, arch: str | None):
    spec = call.spec
    v = x[spec.value]
    ref = x[spec.qk[0]] if spec.qk else v
    # the kernels are specialised on these sizes: under dynamic shapes int() makes them static (B, T, N stay free)
    H, K, HV, V = int(ref.shape[2]), int(ref.shape[3]), int(v.shape[2]), int(v.shape[3])
    dtypes = {n: x[n].dtype for n in PASSED_DTYPE_INPUTS if x.get(n) is not None}
    cu = x.get("cu_seqlens")
    varlen = cu is not None
    pairs = call_pairs(v, cu, HV)
    rank = call.ranking or ranking(TRAINING if keep else INFERENCE, pairs, K, spec.rank_kind)
    key = (spec, H, K, HV, V, varlen, *dtypes.items(), v.device, call.state_layout, keep, family, arch, rank)
    config = _CONFIGS.get(key)
    if config is None:
        if HV % H:
            raise ValueError(f"forward: HV={HV} value heads must be a multiple of H={H} q/k heads")
        config = config_for(spec, K, V, HV // H, varlen, dtypes, default_arch(v.device), state_layout=call.state_layout,
                            directions=TRAINING if keep else INFERENCE, family=family, pairs=pairs, rank=rank)
        if len(_CONFIGS) >= _CACHED_CONFIGS:
            _CONFIGS.clear()
        _CONFIGS[key] = config
    return config


def call_pairs(v, cu_seqlens, HV: int) -> int | None:
    """The (sequence, value head) pairs of a call, N·HV, or None where the batch size is a symbol (torch.compile
    traces its fake implementations with dynamic shapes): reading it would specialise the graph on it, and the
    trace needs no family (an inference call's outputs have the same shapes whichever family runs). The compiled
    graph's real calls have plain sizes and rank families as an eager call does."""
    N = v.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return N * HV if isinstance(N, int) else None


def forward(x: dict, call, keep: bool = True, *, loader=None, poison: bool = False, debug: dict | None = None):
    """(o [B,T,HV,V], final state or None, saved) for inputs x (the recurrence's tensors by name, plus
    initial_state and cu_seqlens) and a validated call (kdagen.ops.run.Call: the Spec, the scalars, the
    state layout, output_final_state; for a training call, `segments`: see training_segments). `keep` says a
    backward follows (the family must plan one) and makes `saved`. `loader(config, device, direction,
    entries=False)` returns a module with `launch(...)` (default: the runtime's, or the CPU emulation for an
    emulated call; `entries=True`, asked only by a call cut into segments, the module of the kernels' further
    entry points); `poison` fills every output and workspace with NaN first (tests; also
    KDAGEN_POISON=1); `debug` receives every forward workspace by plan name. Sizes come from the tensors: nothing
    here syncs with the host."""
    v = x[call.spec.value]
    config = call_config(x, call, keep)
    schedule = scheduled(config, "forward")
    module = (loader or loader_for(call.emulate))(config, v.device, "forward")
    alloc = poisoned if poison or runtime_env.poison() else torch.empty
    S = call.segments if keep else segmented.cut_of(schedule, v, x.get("cu_seqlens") is not None, keep).segments
    if keep and S > 1:
        _check_segments(S, v, x, config)
    states = None
    if S > 1:
        entries = (loader or loader_for(call.emulate))(config, v.device, "forward", entries=True) \
            if segmented.has_maps_pass(schedule.plan) else None
        o, ht, ws, states = segmented.launch_cut(schedule, module, entries, x, call.scalars, S,
                                                 output_final_state=call.output_final_state, alloc=alloc, keep=keep)
    else:
        o, ht, ws = launch_scheduled(schedule, module, x, call.scalars, output_final_state=call.output_final_state,
                                     alloc=alloc, keep=keep, memo=call.memo)
    if debug is not None:
        debug.update(ws.tensors())
    saved = None
    if keep:
        plan = schedule.plan
        saved = {"config": config, "plan": plan, "recurrence": schedule.recurrence, "x": dict(x),
                 "scalars": call.scalars, "workspace": {n: ws.separate[n] for n in plan.saved}, "emulate": call.emulate,
                 "segments": S, "segment_states": states}
    return o, ht, saved


def _check_segments(S: int, v, x: dict, config) -> None:
    """A training call's `segments` (from the op's key) is one the cut can run: fixed length, K = V, T a multiple of
    S segments of whole 64-token chunks."""
    T = v.shape[1]
    if x.get("cu_seqlens") is not None or config.K != config.V or T % S or (T // S) % 64:
        raise ValueError(f"segments={S}: a training call is cut only with fixed-length sequences, K = V and T a "
                         f"multiple of S·64 (here T={T}, K={config.K}, V={config.V}, "
                         f"varlen={x.get('cu_seqlens') is not None})")


def training_segments(x: dict, call) -> int:
    """The segments per sequence of a training call (kdagen.plan.cut's model for its plan, shapes and device under
    KDAGEN_CUT): decided before the custom op runs, so its fake implementation and its kernels agree on the saved
    workspaces' shapes. 1 where the sizes are symbols (torch.compile's dynamic shapes) or the batch is varlen."""
    v = x[call.spec.value]
    B, T, HV = v.shape[:3]
    if not all(isinstance(n, int) for n in (B, T, HV)) or x.get("cu_seqlens") is not None:
        return 1
    tokens = runtime_env.cut()
    if tokens == "off" or T <= (tokens if isinstance(tokens, int) else MIN_SEGMENT):   # no segment fits: no plan read
        return 1
    return segmented.cut_of(scheduled(call_config(x, call, True), "forward"), v, False, True).segments
