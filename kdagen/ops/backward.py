"""The backward of chunk_kda / chunk_gated_delta_rule on the GPU: the plan's backward kernels, one module.

`backward(saved, do, dht)` (what kdagen.ops.autograd calls) takes the forward's Config and the workspaces
its plan saves, loads the backward unit (rendered from the same plan, cached per process) and launches
the plan's backward kernels in order on torch's current stream; the workspaces those kernels produce
live only for the call. Kernel names, grids, block sizes, shared memory and workspaces all come from the
plan (`kdagen plan` prints it); docs/math.md gives the math.
"""
from __future__ import annotations

import torch

from ..plan import Plan
from ..runtime import env as runtime_env
from .config import Config, loader_for
from .launcher import (Schedule, Workspaces, check_operand, grad_values, input_values, launch_sized, poisoned,
                       scalar_values, scheduled)


def _require(d: dict, key: str, where: str):
    if d.get(key) is None:
        raise KeyError(f"backward: {where}[{key!r}] is missing; the forward must save it")
    return d[key]


def launch(plan: Plan, recurrence, module, x: dict, workspace: dict, scalars: dict, do: torch.Tensor,
           dht: torch.Tensor | None = None, *, alloc=torch.empty, debug: dict | None = None) -> dict:
    """Run the plan's backward kernels: gradients of Σ o⊙do + Σ final_state⊙dht for every token input and
    head parameter of the recurrence and "initial_state" (None without h0), keyed by input name.

    x: the forward's inputs by name (plus initial_state, cu_seqlens); workspace: what the forward saved, by
    plan name (plan.saved), in the plan's shapes and dtypes; scalars: the recurrence's scalars by name.
    `alloc(shape, dtype=, device=)` makes every output and workspace (tests poison them); `debug` receives
    the backward's own workspaces by plan name."""
    return launch_scheduled(Schedule(plan, recurrence, "backward"), module, x, workspace, scalars, do, dht,
                            alloc=alloc, debug=debug)


def launch_scheduled(schedule: Schedule, module, x: dict, workspace: dict, scalars: dict, do: torch.Tensor,
                     dht: torch.Tensor | None, *, alloc, debug: dict | None, memo: dict | None = None) -> dict:
    """`launch` with the plan read once (kdagen.ops.launcher.scheduled caches it per Config); `memo`: a dict in
    which the inputs' checks already ran (Schedule.checked_sized)."""
    v = x[schedule.value]
    device = v.device
    sized = schedule.checked_sized(x, scalars, device, memo)
    check_operand("backward", "do", do, v.dtype, v.shape, device)
    check_operand("backward", "dht", dht, torch.float32, sized.state, device)
    for name, shape, dtype in sized.saved:
        check_operand("backward", f"workspace[{name!r}]", _require(workspace, name, "workspace"), dtype, shape,
                      device)
    ws = Workspaces(sized, device, alloc, separate=False)
    grads = {n: alloc(x[n].shape, dtype=x[n].dtype, device=device) for n in schedule.names}
    h0 = x.get("initial_state")
    grad_h0 = None if h0 is None else alloc(h0.shape, dtype=h0.dtype, device=device)
    tensors = {**input_values(x, schedule.value), **workspace, **grad_values(grads),
               **schedule.layout_tensors(sized, x.get("cu_seqlens"), device),
               "grad_v": grads[schedule.value], "grad_h0": grad_h0, "dout": do, "dht": dht, "dstate_start": None}
    launch_sized(sized, module, device, tensors, ws, scalar_values(scalars), "backward")
    if debug is not None:
        debug.update(ws.tensors())
    return {**grads, "initial_state": grad_h0}


def backward(saved: dict, do: torch.Tensor, dht: torch.Tensor | None = None, *, alloc=None,
             debug: dict | None = None, loader=None) -> dict:
    """Gradients keyed like the forward's inputs (see `launch`), from what kdagen.ops.forward saved:
    config (an ops.config.Config: the plan and the recurrence), x (the inputs by name), scalars, and workspace
    (the plan's saved workspaces by name); a forward cut into `segments` also saved `segment_states`
    (kdagen.ops.segmented.backward_cut). `loader(config, device, direction, entries=False)` returns the module to launch
    on (default: the runtime's, or the CPU emulation for an emulated call; tests pass a signature checker).
    `alloc` makes outputs and workspaces (default: NaN-filled under KDAGEN_POISON=1, else torch.empty)."""
    config: Config = _require(saved, "config", "saved")
    schedule = scheduled(config, "backward")
    x = {n: t for n, t in _require(saved, "x", "saved").items() if t is not None}
    ws = _require(saved, "workspace", "saved")
    workspace = {name: _require(ws, name, "workspace") for name in schedule.plan.saved}
    module = (loader or loader_for(saved.get("emulate", False)))(config, do.device, "backward")
    if alloc is None:
        alloc = poisoned if runtime_env.poison() else torch.empty
    if saved.get("segments", 1) > 1:                     # a forward cut into segments (kdagen.ops.segmented)
        from .segmented import backward_cut
        entries = (loader or loader_for(saved.get("emulate", False)))(config, do.device, "backward", entries=True)
        return backward_cut(schedule, module, entries, x, workspace, _require(saved, "segment_states", "saved"),
                            _require(saved, "scalars", "saved"), do, dht, saved["segments"], alloc=alloc, debug=debug)
    return launch_scheduled(schedule, module, x, workspace, _require(saved, "scalars", "saved"), do, dht,
                            alloc=alloc, debug=debug)
