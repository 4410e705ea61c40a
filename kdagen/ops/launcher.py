"""Launching a plan's kernels on tensors: sizes and sequence layout from the inputs, operand checks,
arguments by parameter name, grids from the plan. Shared by the forward and the backward; nothing here
knows a kernel by name — the plan says what each kernel takes.
"""
from __future__ import annotations

import math

import torch

from ..plan import Plan
from ..plan.families.base import grad_param, input_param, scalar_param
from ..plan.sizes import evaluate, launch_sizes

TORCH_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "i64": torch.int64}


def chunk_layout(cu_seqlens, B: int, T: int, C: int, device):
    """(cu_seqlens int64 [N+1], chunk_offsets int32 [N+1]) on the device, computed without a host sync."""
    if cu_seqlens is None:
        cu = torch.arange(B + 1, device=device, dtype=torch.int64) * T
    else:
        cu = cu_seqlens.to(device=device, dtype=torch.int64)
    counts = (cu[1:] - cu[:-1] + C - 1) // C
    return cu, torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)


def check_operand(where: str, name: str, t, dtype=None, shape=None, device=None):
    """t as the kernels read it: the plan's dtype and shape (a 1-tuple: the element count, any shape), the
    device, contiguous and 16-byte aligned. None passes (an absent optional input); returns t."""
    if t is None:
        return t
    if shape is not None and ((t.numel(),) if len(shape) == 1 else tuple(t.shape)) != tuple(shape):
        raise ValueError(f"{where}: {name} has shape {tuple(t.shape)}, the plan expects {tuple(shape)}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{where}: {name} has dtype {t.dtype}, the plan expects {dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{where}: {name} is on {t.device}, expected {device}")
    if not t.is_contiguous() or t.data_ptr() % 16:
        raise ValueError(f"{where}: {name} must be contiguous and 16-byte aligned")
    return t


def planned_sizes(plan: Plan, x: dict, where: str) -> dict:
    """B, T, H, HV and the q/k inputs of the tensors x, checked against the plan (plain data: per call)."""
    p = plan.problem
    qk = p["qk_inputs"]
    q, v = x[qk[0]], x[p["value_input"]]
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if (K, V, HV // H) != (p["K"], p["V"], p["gva_ratio"]) or HV % H:
        raise ValueError(f"{where}: {qk[0]} {tuple(q.shape)} and {p['value_input']} {tuple(v.shape)} do not fit the "
                         f"plan (K={p['K']}, V={p['V']}, GVA {p['gva_ratio']})")
    if (x.get("cu_seqlens") is not None) != p["varlen"]:
        raise ValueError(f"{where}: the plan is for {'packed' if p['varlen'] else 'fixed-length'} sequences")
    return {"B": B, "T": T, "H": H, "HV": HV, "qk": qk}


def input_shapes(plan: Plan, recurrence, dims: dict) -> dict:
    """Expected shape of every input the kernels read, by name (the prologue's leaves and the value)."""
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


def check_inputs(plan: Plan, recurrence, x: dict, dims: dict, direction: str, device) -> None:
    """Every input the direction's kernels read is present, in the plan's dtype and shape, on the device: a
    kernel reads its pointer as the plan's C type, so a tensor of another dtype would be read as garbage."""
    p = plan.problem
    dtypes = {prm.name: TORCH_DTYPES[prm.dtype] for k in plan.direction(direction) for prm in k.params
              if prm.kind == "ptr"}
    shapes = input_shapes(plan, recurrence, dims)
    unknown = sorted(set(x) - set(shapes) - {"initial_state", "cu_seqlens"})
    if unknown:
        raise KeyError(f"{direction}: inputs {unknown} are not read by recurrence {recurrence.name!r}")
    for name, shape in shapes.items():
        if x.get(name) is None:
            raise KeyError(f"{direction}: input {name!r} of recurrence {recurrence.name!r} is missing")
        param = "v" if name == p["value_input"] else input_param(name)   # kernels take the value operand as v
        check_operand(direction, f"x[{name!r}]", x[name], dtypes.get(param), shape, device)


def check_scalars(recurrence, scalars: dict, direction: str) -> None:
    missing = [s for s in recurrence.scalars if s not in scalars]
    if missing:
        raise KeyError(f"{direction}: the recurrence's scalars {missing} are not given")


def sequence_layout(plan: Plan, cu_seqlens, B: int, T: int, H: int, HV: int, device) -> tuple[dict, dict]:
    """(kernel arguments that locate sequences and chunks, launch sizes for the plan's symbols)."""
    cu, offsets = chunk_layout(cu_seqlens, B, T, plan.chunk, device)
    N = cu.numel() - 1
    sizes = launch_sizes(B=B, T=T, H=H, HV=HV, chunk=plan.chunk, num_seqs=N if cu_seqlens is not None else None)
    values = {"cu_seqlens": cu, "chunk_offsets": offsets, "T": T if cu_seqlens is None else B * T, "N": N,
              "H": H, "HV": HV, "G": HV // H}
    return values, sizes


def input_values(x: dict, scalars: dict) -> dict:
    """The recurrence's tensors and scalars under the kernels' parameter names (in_<name>, sc_<name>)."""
    out = {input_param(n): t for n, t in x.items() if n not in ("initial_state", "cu_seqlens")}
    out.update({scalar_param(n): s for n, s in scalars.items()})
    return out


def grad_values(grads: dict) -> dict:
    """Gradient outputs by input name under the kernels' parameter names (grad_in_<name>)."""
    return {grad_param(n): t for n, t in grads.items()}


def tensor_map(spec, tensor: torch.Tensor, sizes: dict):
    """The tensor map a plan's TensorMapSpec describes for `tensor`, in the encoding of the device it lives on
    (the driver's on a GPU, the CPU emulator's otherwise)."""
    if tensor is None:
        raise ValueError(f"tensor map of {spec.tensor!r}: the tensor is absent")
    dims = [evaluate(d, sizes) for d in spec.dims]
    strides = [evaluate(s, sizes) for s in spec.strides]
    if tensor.is_cuda:
        from ..runtime.tensormap import encode_tiled
    else:
        from ..codegen.emulate import encode_tiled
    return encode_tiled(tensor, spec.box, spec.swizzle, dims, strides)


def kernel_args(kernel, values: dict, sizes: dict) -> list:
    """Kernel arguments in the plan's parameter order, by name (tensor maps encoded from their tensors)."""
    from ..runtime import f32, i64
    out = []
    for p in kernel.params:
        key = p.tensor_map.tensor if p.kind == "tensor_map" else p.name
        if key not in values:
            raise KeyError(f"{kernel.direction}: no value for parameter {p.name!r} of kernel {kernel.name}")
        v = values[key]
        if p.kind == "tensor_map":
            v = tensor_map(p.tensor_map, v, sizes)
        out.append(f32(float(v)) if p.kind == "f32" else i64(int(v)) if p.kind == "i64" else v)
    return out


def run_kernels(kernels, module, values: dict, sizes: dict) -> None:
    """Launch each kernel on its plan grid (skipping empty grids) with its arguments taken from values."""
    for kernel in kernels:
        grid = tuple(evaluate(d, sizes) for d in kernel.grid)
        if min(grid) == 0:
            continue
        module.launch(kernel.name, grid, (kernel.threads,), kernel_args(kernel, values, sizes),
                      smem_bytes=kernel.smem_bytes if kernel.smem_dynamic else 0)


def workspace_shape(w, sizes: dict) -> tuple:
    return tuple(evaluate(d, sizes) for d in w.shape)


def allocate(workspaces, sizes: dict, device, alloc) -> dict:
    """Every workspace of the list, by plan name, made by `alloc(shape, dtype=, device=)`."""
    return {w.name: alloc(workspace_shape(w, sizes), dtype=TORCH_DTYPES[w.dtype], device=device) for w in workspaces}


def poisoned(shape, *, dtype, device):
    """NaN-filled storage: a kernel that skips a write shows up (tests, KDAGEN_POISON=1)."""
    return torch.full(shape, math.nan, dtype=dtype, device=device)


def state_shape(plan: Plan, N: int, HV: int) -> tuple:
    """h0, the final state and their gradients: [N,HV,K,V], or [N,HV,V,K] with state_v_first."""
    p = plan.problem
    return (N, HV, p["V"], p["K"]) if p["state_layout"] == "vk" else (N, HV, p["K"], p["V"])
