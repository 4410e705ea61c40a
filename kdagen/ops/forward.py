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
from ..plan.families.base import PASSED_DTYPE_INPUTS
from ..runtime import env as runtime_env
from .config import INFERENCE, TRAINING, config_for, default_arch, loader_for
from .launcher import (allocate, check_inputs, check_operand, check_scalars, input_values, planned_sizes, poisoned,
                       run_kernels, sequence_layout, state_shape)


def launch(plan: Plan, recurrence, module, x: dict, scalars: dict, *, output_final_state: bool = True,
           poison: bool = False):
    """Run the plan's forward kernels on the inputs x (the recurrence's tensors by name, plus
    initial_state and cu_seqlens): returns (o, final state or None, every forward workspace by plan name)."""
    p = plan.problem
    dims = planned_sizes(plan, x, "forward")
    B, T, H, HV = dims["B"], dims["T"], dims["H"], dims["HV"]
    v = x[p["value_input"]]
    device = v.device
    seq, sizes = sequence_layout(plan, x.get("cu_seqlens"), B, T, H, HV, device)
    check_inputs(plan, recurrence, x, dims, "forward", device)
    check_operand("forward", "initial_state", x.get("initial_state"), torch.float32, state_shape(plan, seq["N"], HV),
                  device)
    check_scalars(recurrence, scalars, "forward")
    alloc = poisoned if poison else torch.empty
    ws = allocate(plan.produced_in("forward"), sizes, device, alloc)
    # The chunk dim is an upper bound (chunks = B·T // C + N ≥ the real count, which only the device knows); the
    # surplus, at most the last N entries, is never written. Zeroed first (one multi-tensor launch), what the
    # forward keeps for the backward (an output of kdagen::recurrence_forward) is defined everywhere.
    tails = [ws[n][ws[n].shape[0] - seq["N"]:] for n in plan.saved if plan.workspace(n).shape[0] == "chunks"]
    if tails:
        torch._foreach_zero_(tails)
    o = alloc(v.shape, dtype=v.dtype, device=device)
    ht = alloc(state_shape(plan, seq["N"], HV), dtype=torch.float32, device=device) if output_final_state else None
    values = {**input_values(x, scalars), **ws, **seq, "v": v, "h0": x.get("initial_state"), "o": o, "ht": ht}
    run_kernels(plan.direction("forward"), module, values, sizes)
    return o, ht, ws


def call_config(x: dict, call, keep: bool):
    """The Config of a call from its tensors' shapes and dtypes alone (the fake implementations read it too)."""
    v = x[call.spec.value]
    ref = x[call.spec.qk[0]] if call.spec.qk else v
    # the kernels are specialised on these sizes: under dynamic shapes int() makes them static (B, T, N stay free)
    H, K, HV, V = int(ref.shape[2]), int(ref.shape[3]), int(v.shape[2]), int(v.shape[3])
    if HV % H:
        raise ValueError(f"forward: HV={HV} value heads must be a multiple of H={H} q/k heads")
    dtypes = {n: x[n].dtype for n in PASSED_DTYPE_INPUTS if x.get(n) is not None}
    return config_for(call.spec, K, V, HV // H, x.get("cu_seqlens") is not None, dtypes, default_arch(v.device),
                      state_layout=call.state_layout, directions=TRAINING if keep else INFERENCE, family=call.family)


def forward(x: dict, call, keep: bool = True, *, loader=None, poison: bool = False, debug: dict | None = None):
    """(o [B,T,HV,V], final state or None, saved) for inputs x (the recurrence's tensors by name, plus
    initial_state and cu_seqlens) and a validated call (kdagen.ops.run.Call: the Spec, the scalars, the
    state layout, output_final_state). `keep` says a backward follows (the family must plan one) and makes
    `saved`. `loader(config, device, direction)` returns a module with `launch(...)` (default: the runtime's,
    or the CPU emulation for an emulated call); `poison` fills every output and workspace with NaN first
    (tests; also KDAGEN_POISON=1); `debug` receives every forward workspace by plan name. Sizes come from the
    tensors: nothing here syncs with the host."""
    v = x[call.spec.value]
    config = call_config(x, call, keep)
    plan, recurrence = config.planned()
    tensors = {n: t for n, t in x.items() if t is not None}
    module = (loader or loader_for(call.emulate))(config, v.device, "forward")
    poison = poison or runtime_env.poison()
    o, ht, ws = launch(plan, recurrence, module, tensors, call.scalars, output_final_state=call.output_final_state,
                       poison=poison)
    if debug is not None:
        debug.update(ws)
    saved = None
    if keep:
        saved = {"config": config, "plan": plan, "recurrence": recurrence, "x": dict(x), "scalars": call.scalars,
                 "workspace": {n: ws[n] for n in plan.saved}, "emulate": call.emulate}
    return o, ht, saved
