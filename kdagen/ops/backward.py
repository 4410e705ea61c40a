"""The backward of chunk_kda / chunk_gated_delta_rule on the GPU: the plan's backward kernels, one module.

`backward(saved, do, dht)` (what kdagen.ops.autograd calls) takes the forward's Config and workspace from
`saved`, loads the backward unit (rendered by kdagen.codegen from the same plan as the forward, cached per
process) and launches, on torch's current stream and in the plan's order:

    k2_states     grid (N, HV, V/64)   K2 again in "store_states" mode: S_c, the state entering each chunk
    k2_bwd        grid (N, HV)         chunks in reverse, dS fp32 on chip: dv, dh0 and the gradients of the
                                       derived tensors qd, kd, kr, gte, Mqk, Mkk, β
    k1_bwd        grid (chunks, H)     intra-chunk contractions, reverse cumsum, prologue adjoint
    param_reduce  grid (⌈HV·K/32⌉, P)  per-head parameter gradients: fixed-order sums of per-chunk partials

Kernel names, grids, block sizes, shared memory and workspaces all come from the plan (`kdagen plan`
prints it). The math is kdagen.reference.chunked.chunk_delta_rule_bwd_k2 then reference.prepare.
"""
from __future__ import annotations

import torch

from ..plan import Plan
from .forward import (_TORCH, WS_KEYS, Config, check_operand, module_source, planned_sizes, run_kernels,
                      runtime_loader, sequence_layout, state_shape, workspace_shape)


def kernel_sources(call, dims, dtypes, arch: str | None = None) -> list[tuple[str, str]]:
    """(uri, CUDA source) of the backward module a call with these sizes and dtypes loads (kdagen compile)."""
    return module_source(call, dims, dtypes, arch, "backward")


def backward_loader(config: Config, device):
    """The compiled backward module for this config (kdagen.runtime: memo, disk cache, NVRTC)."""
    return runtime_loader(config, device, "backward")


def _require(d: dict, key: str, where: str):
    if d.get(key) is None:
        raise KeyError(f"backward: {where}[{key!r}] is missing; the forward must save it")
    return d[key]


def _input_shapes(plan: Plan, recurrence, dims: dict) -> dict:
    """Expected shape of every input the backward reads, by name (the K1_bwd leaves, the value, h0)."""
    p = plan.problem
    B, T, H, HV, K = dims["B"], dims["T"], dims["H"], dims["HV"], p["K"]
    shapes = {p["value_input"]: (B, T, HV, p["V"])}
    for name in recurrence.token_inputs:
        row = bool(recurrence.graph.nodes[name]["shape"])
        if name != p["value_input"]:
            heads = H if name in dims["qk"] else HV
            shapes[name] = (B, T, heads, K) if row else (B, T, heads)
    for name in recurrence.head_params:                  # [HV·K] or [HV, K]: the kernels index h·K + k
        shapes[name] = (HV * K,) if recurrence.graph.nodes[name]["shape"] else (HV,)
    return shapes


def launch(plan: Plan, recurrence, module, x: dict, workspace: dict, scalars: dict, do: torch.Tensor,
           dht: torch.Tensor | None = None, *, alloc=torch.empty, debug: dict | None = None) -> dict:
    """Run the plan's backward kernels: gradients of Σ o⊙do + Σ final_state⊙dht for every token input and
    head parameter of the recurrence and "initial_state" (None without h0), keyed by input name.

    x: the forward's inputs by name (plus initial_state, cu_seqlens); workspace: the forward's K1 workspace
    by plan name (ws_qd, ...), in the plan's shapes and dtypes (rows past a chunk's end zero, as K1 writes
    them); scalars: the recurrence's scalars by name. `alloc(shape, dtype=, device=)` makes every output and
    workspace (tests poison them); `debug` receives the backward workspaces by name without "ws_"."""
    p = plan.problem
    dims = planned_sizes(plan, x, "backward")
    v = x[p["value_input"]]
    device = v.device
    seq, sizes = sequence_layout(plan, x.get("cu_seqlens"), dims["B"], dims["T"], dims["H"], dims["HV"], device)
    dtypes = {prm.name: _TORCH[prm.dtype] for k in plan.direction("backward") for prm in k.params if prm.kind == "ptr"}
    for name, shape in _input_shapes(plan, recurrence, dims).items():
        dtype = dtypes["v" if name == p["value_input"] else name]     # kernels take the value operand as v
        check_operand("backward", f"x[{name!r}]", _require(x, name, "x"), dtype, shape, device)
    check_operand("backward", "do", do, v.dtype, v.shape, device)
    h0 = x.get("initial_state")
    for name, t in (("initial_state", h0), ("dht", dht)):
        if t is not None:
            check_operand("backward", name, t, torch.float32, state_shape(plan, seq["N"], dims["HV"]), device)
    for w in plan.workspaces:
        if w.producer == "k1_prepare":
            check_operand("backward", f"workspace[{w.name!r}]", _require(workspace, w.name, "workspace"),
                          _TORCH[w.dtype], workspace_shape(w, sizes), device)
    missing = [s for s in recurrence.scalars if s not in scalars]
    if missing:
        raise KeyError(f"backward: the recurrence's scalars {missing} are not given")

    def new(shape, dtype):
        return alloc(tuple(shape), dtype=dtype, device=device)

    ws = {w.name: new(workspace_shape(w, sizes), _TORCH[w.dtype]) for w in plan.workspaces
          if w.producer != "k1_prepare"}
    inputs = [*recurrence.token_inputs, *recurrence.head_params]
    grads = {f"grad_{n}": new(x[n].shape, x[n].dtype) for n in inputs}
    grads["grad_h0"] = None if h0 is None else new(h0.shape, h0.dtype)
    values = {**{n: x[n] for n in inputs}, **workspace, **ws, **grads, **scalars, **seq,
              "v": v, "grad_v": grads[f"grad_{p['value_input']}"], "h0": h0, "dout": do, "dht": dht}
    run_kernels(plan.direction("backward"), module, values, sizes)
    if debug is not None:
        debug.update({name.removeprefix("ws_"): t for name, t in ws.items()})
    return {**{n: grads[f"grad_{n}"] for n in inputs}, "initial_state": grads["grad_h0"]}


def backward(saved: dict, do: torch.Tensor, dht: torch.Tensor | None = None, *, alloc=torch.empty,
             debug: dict | None = None, loader=None) -> dict:
    """Gradients keyed like the forward's inputs (see `launch`), from what kdagen.ops.forward saved:
    config (a forward.Config: the plan and the recurrence), x (the inputs by name), scalars, and workspace
    (qd, kd, kr, gte, A, Mqk, beta in the plan's shapes). `loader(config, device)` returns the module to
    launch on (default: the runtime's; tests pass the CPU emulation or a signature checker)."""
    config = _require(saved, "config", "saved")
    plan, recurrence = config.planned()
    x = {n: t for n, t in _require(saved, "x", "saved").items() if t is not None}
    ws = _require(saved, "workspace", "saved")
    workspace = {name: _require(ws, key, "workspace") for name, key in WS_KEYS.items()}
    module = (loader or backward_loader)(config, do.device)
    return launch(plan, recurrence, module, x, workspace, _require(saved, "scalars", "saved"), do, dht,
                  alloc=alloc, debug=debug)
