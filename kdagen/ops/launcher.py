"""Launching a plan's kernels on tensors: sizes and sequence layout from the inputs, operand checks,
arguments by parameter name, grids from the plan. Shared by the forward and the backward; nothing here
knows a kernel by name — the plan says what each kernel takes.

What depends on the plan alone is read from it once (`Schedule`, cached per Config by `scheduled`), what
depends on the launch sizes once per shape (`Sized`, cached in its Schedule): an eager call of a shape seen
before only checks its tensors, allocates, and packs arguments.
"""
from __future__ import annotations

import functools
import math

import torch

from ..plan import Plan
from ..plan.families.base import grad_param, input_param, scalar_param
from ..plan.sizes import evaluate, launch_sizes
from ..runtime.launch import f32, i64

TORCH_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "i64": torch.int64}
_LAYOUT = ("cu_seqlens", "chunk_offsets")      # the kernel arguments chunk_layout makes on the device
_AS_IS = ("ptr", "i32")                         # parameter kinds passed as their value (tensor or None, int)


def chunk_layout(cu_seqlens, B: int, T: int, C: int, device):
    """(cu_seqlens int64 [N+1], chunk_offsets int32 [N+1]) on the device, computed without a host sync and in
    few device operations (each costs a launch's host time): two aranges for B sequences of T tokens; for
    cu_seqlens, its chunk counts' prefix sum written into a zeroed [N+1]."""
    if cu_seqlens is None:
        if T == 0:
            zeros = torch.zeros(B + 1, dtype=torch.int64, device=device)
            return zeros, zeros.to(torch.int32)
        n = -(-T // C)
        return (torch.arange(0, (B + 1) * T, T, dtype=torch.int64, device=device),
                torch.arange(0, (B + 1) * n, n, dtype=torch.int32, device=device))
    cu = cu_seqlens.to(device=device, dtype=torch.int64)
    offsets = torch.zeros(cu.shape[0], dtype=torch.int32, device=device)
    torch.cumsum(torch.diff(cu).add_(C - 1).div_(C, rounding_mode="floor"), 0, out=offsets[1:])
    return cu, offsets


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


def _input_shape(kind: str, row: bool, B: int, T: int, H: int, HV: int, K: int, V: int) -> tuple:
    """The shape an input of this kind has: the value [B,T,HV,V]; a token input on H or HV heads, with a row of K
    or none; a head parameter [HV·K] (the kernels index h·K + k; [HV, K] passes too) or [HV]."""
    if kind == "value":
        return (B, T, HV, V)
    if kind == "param":
        return (HV * K,) if row else (HV,)
    return (B, T, H if kind == "H" else HV) + ((K,) if row else ())


def _tensor_map_layout(spec, sizes: dict) -> tuple:
    """(tensor name, box, swizzle, dims, strides) of a plan's TensorMapSpec at these launch sizes."""
    return (spec.tensor, spec.box, spec.swizzle, [evaluate(d, sizes) for d in spec.dims],
            [evaluate(s, sizes) for s in spec.strides])


class Sized:
    """A Schedule evaluated at one set of launch sizes: everything its launches take except the tensors (plain
    ints and tuples), so a call of a shape seen before evaluates no size expression."""

    def __init__(self, schedule: "Schedule", B: int, T: int, H: int, HV: int, N: int):
        plan, (K, V, _) = schedule.plan, schedule.fit
        self.sizes = sizes = launch_sizes(B=B, T=T, H=H, HV=HV, chunk=plan.chunk,
                                          num_seqs=N if schedule.varlen else None)
        self.scalars = {"T": B * T if schedule.varlen else T, "N": N, "H": H, "HV": HV, "G": HV // H}
        self.inputs = tuple((name, label, dtype, _input_shape(kind, row, B, T, H, HV, K, V))
                            for name, label, dtype, kind, row in schedule.inputs)
        self.state = state_shape(plan, N, HV)
        self.workspaces = tuple((w.name, workspace_shape(w, sizes), TORCH_DTYPES[w.dtype]) for w in schedule.produced)
        self.saved = tuple((w.name, workspace_shape(w, sizes), TORCH_DTYPES[w.dtype]) for w in schedule.saved)
        # the rows of each saved [chunks, ...] workspace past the real chunk count: at most the last N
        self.tails = tuple((name, shape[0] - N) for (name, shape, _), w in zip(self.saved, schedule.saved)
                           if w.shape[0] == "chunks")
        self.launches = []        # (kernel name, grid, block, dynamic smem, params); empty grids are skipped
        for kernel in schedule.kernels:
            grid = tuple(evaluate(d, sizes) for d in kernel.grid)
            if min(grid) == 0:
                continue
            params = tuple((p.kind, p.tensor_map.tensor if p.kind == "tensor_map" else p.name, p.name,
                            _tensor_map_layout(p.tensor_map, sizes) if p.kind == "tensor_map" else None)
                           for p in kernel.params)
            self.launches.append((kernel.name, grid, (kernel.threads,),
                                  kernel.smem_bytes if kernel.smem_dynamic else 0, params))


class Schedule:
    """One direction of a plan as its launches read it, taken from the plan once: the kernels and their
    parameters, the workspaces it makes and the saved ones it reads, the dtype and shape kind of every input.
    `at(B, T, H, HV, N)` evaluates it at one set of launch sizes, cached per sizes. It holds no tensor and no
    device: every call brings and checks its own."""

    CACHED_SIZES = 64

    def __init__(self, plan: Plan, recurrence, direction: str):
        p = plan.problem
        self.plan, self.recurrence, self.direction = plan, recurrence, direction
        self.value, self.qk, self.varlen = p["value_input"], p["qk_inputs"], p["varlen"]
        self.fit = (p["K"], p["V"], p["gva_ratio"])
        self.kernels = plan.direction(direction)
        dtypes = {prm.name: TORCH_DTYPES[prm.dtype] for k in self.kernels for prm in k.params if prm.kind == "ptr"}
        nodes = recurrence.graph.nodes
        kinds = [(self.value, "v", "value")]            # the kernels take the value operand as v
        kinds += [(n, input_param(n), "H" if n in self.qk else "HV") for n in recurrence.token_inputs
                  if n != self.value]
        kinds += [(n, input_param(n), "param") for n in recurrence.head_params]
        # (name, its name in errors, the dtype its kernel parameter reads, shape kind, has a row dim)
        self.inputs = tuple((n, f"x[{n!r}]", dtypes.get(param), kind, bool(nodes[n]["shape"]))
                            for n, param, kind in kinds)
        self.names = (*recurrence.token_inputs, *recurrence.head_params)
        self.known = frozenset(self.names) | {"initial_state", "cu_seqlens"}
        self.produced = plan.produced_in(direction)
        self.saved = [plan.workspace(n) for n in plan.saved]
        self.layout = any((prm.tensor_map.tensor if prm.kind == "tensor_map" else prm.name) in _LAYOUT
                          for k in self.kernels for prm in k.params)
        self._sized: dict[tuple, Sized] = {}

    def dims(self, x: dict) -> tuple[int, int, int, int, int]:
        """(B, T, H, HV, N) of the tensors x, checked against the plan."""
        qk, p = self.qk, self.plan.problem
        q, v = x[qk[0]], x[self.value]
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        if (K, V, HV // H) != self.fit or HV % H:
            raise ValueError(f"{self.direction}: {qk[0]} {tuple(q.shape)} and {self.value} {tuple(v.shape)} do not "
                             f"fit the plan (K={p['K']}, V={p['V']}, GVA {p['gva_ratio']})")
        cu = x.get("cu_seqlens")
        if (cu is not None) != self.varlen:
            raise ValueError(f"{self.direction}: the plan is for {'packed' if self.varlen else 'fixed-length'} "
                             "sequences")
        return B, T, H, HV, B if cu is None else cu.numel() - 1

    def at(self, B: int, T: int, H: int, HV: int, N: int) -> Sized:
        key = (B, T, H, HV, N)
        sized = self._sized.get(key)
        if sized is None:
            if len(self._sized) >= self.CACHED_SIZES:
                self._sized.clear()
            sized = self._sized[key] = Sized(self, *key)
        return sized

    def check_inputs(self, x: dict, sized: Sized, device) -> None:
        """Every input the direction's kernels read is present, in the plan's dtype and shape, on the device: a
        kernel reads its pointer as the plan's C type, so a tensor of another dtype would be read as garbage."""
        where, name = self.direction, self.recurrence.name
        if not self.known.issuperset(x):
            raise KeyError(f"{where}: inputs {sorted(set(x) - self.known)} are not read by recurrence {name!r}")
        for n, label, dtype, shape in sized.inputs:
            t = x.get(n)
            if t is None:
                raise KeyError(f"{where}: input {n!r} of recurrence {name!r} is missing")
            check_operand(where, label, t, dtype, shape, device)

    def layout_values(self, sized: Sized, cu_seqlens, B: int, T: int, device) -> dict:
        """The kernel arguments that locate sequences and chunks: T, N, H, HV, G, and cu_seqlens / chunk_offsets
        on the device only where a kernel of the direction reads them (they cost device operations)."""
        if not self.layout:
            return sized.scalars
        cu, offsets = chunk_layout(cu_seqlens, B, T, self.plan.chunk, device)
        return {**sized.scalars, "cu_seqlens": cu, "chunk_offsets": offsets}


@functools.lru_cache(maxsize=128)
def scheduled(config, direction: str) -> Schedule:
    """The Schedule of a direction of a Config's plan (kdagen.ops.config), once per process like the plan."""
    return Schedule(*config.planned(), direction)


def check_scalars(recurrence, scalars: dict, direction: str) -> None:
    missing = [s for s in recurrence.scalars if s not in scalars]
    if missing:
        raise KeyError(f"{direction}: the recurrence's scalars {missing} are not given")


def input_values(x: dict, scalars: dict) -> dict:
    """The recurrence's tensors and scalars under the kernels' parameter names (in_<name>, sc_<name>)."""
    out = {input_param(n): t for n, t in x.items() if n not in ("initial_state", "cu_seqlens")}
    out.update({scalar_param(n): s for n, s in scalars.items()})
    return out


def grad_values(grads: dict) -> dict:
    """Gradient outputs by input name under the kernels' parameter names (grad_in_<name>)."""
    return {grad_param(n): t for n, t in grads.items()}


def tensor_map(layout: tuple, tensor: torch.Tensor):
    """The tensor map of `tensor` with a `_tensor_map_layout`, in the encoding of the device it lives on (the
    driver's on a GPU, the CPU emulator's otherwise)."""
    name, box, swizzle, dims, strides = layout
    if tensor is None:
        raise ValueError(f"tensor map of {name!r}: the tensor is absent")
    if tensor.is_cuda:
        from ..runtime.tensormap import encode_tiled
    else:
        from ..codegen.emulate import encode_tiled
    return encode_tiled(tensor, box, swizzle, dims, strides)


def kernel_args(params: tuple, values: dict, direction: str, kernel_name: str) -> list:
    """Kernel arguments in the plan's parameter order, by name (tensor maps encoded from their tensors)."""
    out = []
    for kind, key, name, layout in params:
        if key not in values:
            raise KeyError(f"{direction}: no value for parameter {name!r} of kernel {kernel_name}")
        v = values[key]
        out.append(v if kind in _AS_IS else f32(float(v)) if kind == "f32" else i64(int(v)) if kind == "i64"
                   else tensor_map(layout, v))
    return out


def run_kernels(launches, module, values: dict, direction: str) -> None:
    """Launch each kernel of a Sized on its grid with its arguments taken from values."""
    for name, grid, block, smem, params in launches:
        module.launch(name, grid, block, kernel_args(params, values, direction, name), smem_bytes=smem)


def workspace_shape(w, sizes: dict) -> tuple:
    return tuple(evaluate(d, sizes) for d in w.shape)


def allocate(workspaces, device, alloc) -> dict:
    """Every (name, shape, dtype) of a Sized's list, by plan name, made by `alloc(shape, dtype=, device=)`."""
    return {name: alloc(shape, dtype=dtype, device=device) for name, shape, dtype in workspaces}


def poisoned(shape, *, dtype, device):
    """NaN-filled storage: a kernel that skips a write shows up (tests, KDAGEN_POISON=1)."""
    return torch.full(shape, math.nan, dtype=dtype, device=device)


def state_shape(plan: Plan, N: int, HV: int) -> tuple:
    """h0, the final state and their gradients: [N,HV,K,V], or [N,HV,V,K] with state_v_first."""
    p = plan.problem
    return (N, HV, p["V"], p["K"]) if p["state_layout"] == "vk" else (N, HV, p["K"], p["V"])
