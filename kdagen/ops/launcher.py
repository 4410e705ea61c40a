"""Launching a plan's kernels on tensors: sizes and sequence layout from the inputs, operand checks,
arguments by parameter name, grids from the plan. Shared by the forward and the backward; nothing here
knows a kernel by name — the plan says what each kernel takes.

What depends on the plan alone is read from it once (`Schedule`, cached per Config by `scheduled`), what depends on
the launch sizes once per shape (`Sized`, cached in its Schedule): an eager call of a shape seen before only checks
its tensors, allocates, and packs arguments. On a runtime module, a Sized's launches are prepared once per module
and device (`Bound`): a call writes only its pointers, float scalars and tensor maps (each address's encoded once)
into each kernel's prebuilt argument block. The workspaces a call does not keep are carved from one allocation
(`Workspaces`).
"""
from __future__ import annotations

import functools
import math
from operator import itemgetter

import torch

from ..plan import Plan
from ..plan.families.base import grad_param, input_param, scalar_param
from ..plan.sizes import evaluate, launch_sizes
from ..runtime.launch import Slot, f32, i64
from . import config as ops_config

TORCH_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "i64": torch.int64}
_LAYOUT = ("cu_seqlens", "chunk_offsets")      # the kernel arguments chunk_layout makes on the device
_AS_IS = ("ptr", "i32")                         # parameter kinds passed as their value (tensor or None, int)
_SLOTS = ("ptr", "f32")                         # parameter kinds a prepared launch takes per call as they come
_SIZES = {"i32": int, "i64": i64}              # parameter kinds a prepared launch fixes from the launch sizes
_CARVE_ALIGN = 256                              # bytes: where each carved workspace starts (a CUDA allocation's too)


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
    """(tensor name, torch dtype, box, swizzle, dims, strides) of a plan's TensorMapSpec at these launch sizes."""
    return (spec.tensor, TORCH_DTYPES[spec.dtype], spec.box, spec.swizzle, [evaluate(d, sizes) for d in spec.dims],
            [evaluate(s, sizes) for s in spec.strides])


class Sized:
    """A Schedule evaluated at one set of launch sizes: everything its launches take except the tensors (plain
    ints and tuples), so a call of a shape seen before evaluates no size expression."""

    def __init__(self, schedule: "Schedule", B: int, T: int, H: int, HV: int, N: int):
        plan, (K, V, _) = schedule.plan, schedule.fit
        self.B, self.T = B, T
        self.sizes = sizes = launch_sizes(B=B, T=T, H=H, HV=HV, chunk=plan.chunk,
                                          num_seqs=N if schedule.varlen else None)
        self.scalars = {"T": B * T if schedule.varlen else T, "N": N, "H": H, "HV": HV, "G": HV // H}
        self.inputs = tuple((name, label, dtype, _input_shape(kind, row, B, T, H, HV, K, V))
                            for name, label, dtype, kind, row in schedule.inputs)
        self.state = state_shape(plan, N, HV)
        self.workspaces = tuple((w.name, workspace_shape(w, sizes), TORCH_DTYPES[w.dtype]) for w in schedule.produced)
        # written only for a backward: a call that keeps nothing allocates none of them and passes null pointers
        self.kept_only = tuple(w.name for w in schedule.produced if w.kept_only)
        self.unkept = tuple(w for w in self.workspaces if w[0] not in self.kept_only)
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
        self.carved = carve(self.unkept)
        self.extents = extents(self, schedule)
        self.bindable = bindable(self.launches, self.scalars, self.extents)
        self._bound: dict[tuple, Bound] = {}

    def bound(self, module, device: torch.device, direction: str):
        """The launches prepared on `module` (a runtime Module: one with `prepare`) and the device, made once;
        None for another module (the CPU emulator, a test's recorder) or launches a prepared block cannot take
        (a size the plan does not give, a tensor map of a tensor whose size the call does not fix)."""
        if not self.bindable or not hasattr(module, "prepare"):
            return None
        key = (module, device.index)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = Bound(self, module, device.index, direction)
        return bound


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
        for prm in (prm for k in self.kernels for prm in k.params if prm.kind == "tensor_map"):
            dtypes.setdefault(prm.tensor_map.tensor, TORCH_DTYPES[prm.tensor_map.dtype])   # read by a map only
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

    def checked_sized(self, x: dict, scalars: dict, device, memo: dict | None = None) -> Sized:
        """The Sized of the tensors x (with initial_state) after the checks the kernels need: check_inputs, the
        initial state's, check_scalars. `memo`: the dict a validated call shares with every call of its signature
        (its tensors' types, shapes, contiguity, dtypes and devices; kdagen.ops.run.checked): those checks ran for
        it once, so only the addresses, which a signature does not fix, are checked again."""
        sized = None if memo is None else memo.get(self)
        if sized is not None:
            self.check_aligned(x, sized)
            return sized
        sized = self.at(*self.dims(x))
        self.check_inputs(x, sized, device)
        check_operand(self.direction, "initial_state", x.get("initial_state"), torch.float32, sized.state, device)
        check_scalars(self.recurrence, scalars, self.direction)
        if memo is not None:
            memo[self] = sized
        return sized

    def check_aligned(self, x: dict, sized: Sized) -> None:
        """The inputs and the initial state at 16-byte aligned addresses (check_operand's last check)."""
        for name, label, _, _ in (*sized.inputs, ("initial_state", "initial_state", None, None)):
            t = x.get(name)
            if t is not None and t.data_ptr() % 16:
                raise ValueError(f"{self.direction}: {label} must be contiguous and 16-byte aligned")

    def call_tensors(self, sized: Sized, x: dict, device, keep: bool) -> dict:
        """The tensor arguments of a forward call's kernels other than o and ht: its inputs under the kernels'
        names, the sequence layout, and null pointers for what only a backward reads when nothing is kept."""
        return {**input_values(x, self.value), **self.layout_tensors(sized, x.get("cu_seqlens"), device),
                **({} if keep else dict.fromkeys(sized.kept_only, NOT_KEPT))}

    def layout_tensors(self, sized: Sized, cu_seqlens, device) -> dict:
        """The kernel arguments that locate sequences and chunks on the device, cu_seqlens and chunk_offsets, only
        where a kernel of the direction reads them (they cost device operations)."""
        if not self.layout:
            return {}
        cu, offsets = chunk_layout(cu_seqlens, sized.B, sized.T, self.plan.chunk, device)
        return {"cu_seqlens": cu, "chunk_offsets": offsets}


@functools.lru_cache(maxsize=128)
def scheduled(config, direction: str) -> Schedule:
    """The Schedule of a direction of a Config's plan (kdagen.ops.config), once per process like the plan."""
    return Schedule(*config.planned(), direction)


def forget_plans() -> None:
    """Drop every plan, unit source and Schedule made so far (each is made once per process), so the next call
    plans afresh: what a test or probe that changes a planning constant does before and after."""
    for cached in (ops_config._planned, ops_config._source, scheduled):
        cached.cache_clear()


def check_scalars(recurrence, scalars: dict, direction: str) -> None:
    missing = [s for s in recurrence.scalars if s not in scalars]
    if missing:
        raise KeyError(f"{direction}: the recurrence's scalars {missing} are not given")


def input_values(x: dict, value: str) -> dict:
    """The recurrence's tensors under the kernels' parameter names (in_<name>), the value input also as v and
    the initial state as h0 (None without one)."""
    out = {input_param(n): t for n, t in x.items() if n not in ("initial_state", "cu_seqlens")}
    out["v"], out["h0"] = x[value], x.get("initial_state")
    return out


def scalar_values(scalars: dict) -> dict:
    """The recurrence's scalars under the kernels' parameter names (sc_<name>)."""
    return {scalar_param(n): s for n, s in scalars.items()}


def grad_values(grads: dict) -> dict:
    """Gradient outputs by input name under the kernels' parameter names (grad_in_<name>)."""
    return {grad_param(n): t for n, t in grads.items()}


def tensor_map(layout: tuple, tensor: torch.Tensor):
    """The tensor map of `tensor` with a `_tensor_map_layout`, in the encoding of the device it lives on (the
    driver's on a GPU, the CPU emulator's otherwise)."""
    name, dtype, box, swizzle, dims, strides = layout
    if tensor is None:
        raise ValueError(f"tensor map of {name!r}: the tensor is absent")
    if tensor.dtype != dtype:
        raise TypeError(f"tensor map of {name!r}: the tensor has dtype {tensor.dtype}, the plan's map reads {dtype}")
    if tensor.is_cuda:
        from ..runtime.tensormap import encode_tiled
    else:
        from ..codegen.emulate import encode_tiled
    return encode_tiled(tensor, box, swizzle, dims, strides)


class _NotKept:
    """The value of a kept-only workspace in a call that keeps nothing: its pointer parameters get null, its tensor
    maps zeros (the kernels test the pointer and never use the map)."""

    def __repr__(self):
        return "NOT_KEPT"


NOT_KEPT = _NotKept()


def kernel_args(params: tuple, values: dict, direction: str, kernel_name: str) -> list:
    """Kernel arguments in the plan's parameter order, by name (tensor maps encoded from their tensors)."""
    from ..runtime.tensormap import TENSOR_MAP_BYTES, TensorMap
    out = []
    for kind, key, name, layout in params:
        if key not in values:
            raise KeyError(f"{direction}: no value for parameter {name!r} of kernel {kernel_name}")
        v = values[key]
        if v is NOT_KEPT:
            out.append(TensorMap(bytes(TENSOR_MAP_BYTES)) if kind == "tensor_map" else None)
            continue
        out.append(v if kind in _AS_IS else f32(float(v)) if kind == "f32" else i64(int(v)) if kind == "i64"
                   else tensor_map(layout, v))
    return out


def run_kernels(launches, module, values: dict, direction: str) -> None:
    """Launch each kernel of a Sized on its grid with its arguments taken from values."""
    for name, grid, block, smem, params in launches:
        module.launch(name, grid, block, kernel_args(params, values, direction, name), smem_bytes=smem)


def launch_sized(sized: Sized, module, device, tensors: dict, workspaces: "Workspaces", scalars: dict,
                 direction: str) -> None:
    """Launch a Sized's kernels with their arguments by parameter name: `tensors` (tensors or None), the
    workspaces, and the kernels' scalars (sc_<name>) and sizes. On a runtime module, through its prepared
    launches (`Sized.bound`), which take addresses (tensor maps too: encoded per address); elsewhere through
    module.launch, which takes tensors."""
    bound = sized.bound(module, device, direction)
    if bound is None:
        run_kernels(sized.launches, module, {**tensors, **workspaces.tensors(), **scalars, **sized.scalars}, direction)
        return
    bound({**{k: 0 if t is None or t is NOT_KEPT else t.data_ptr() for k, t in tensors.items()},
           **workspaces.addresses(), **scalars})


def bindable(launches, sizes: dict, extents: dict) -> bool:
    """Whether a prepared argument block can take every parameter of these launches: pointers and float scalars
    as its slots, the launch sizes (T, N, ...) fixed, and tensor maps of tensors whose dtype and size the call
    fixes (`extents`) as slots of their own, encoded per address."""
    return all(kind in _SLOTS or kind in _SIZES and key in sizes
               or kind == "tensor_map" and extents.get(key, (None,))[0] == layout[1]
               for *_, params in launches for kind, key, _, layout in params)


def extents(sized: Sized, schedule: "Schedule") -> dict:
    """(dtype, bytes) by kernel parameter name of every tensor whose dtype and shape a call at these sizes fixes:
    the workspaces, the saved ones, the checked inputs (the value also as v, and o and dout, which have its shape
    and dtype: the forward allocates o so, the backward checks dout so)."""
    out = {name: (dtype, math.prod(shape) * dtype.itemsize) for name, shape, dtype in (*sized.workspaces, *sized.saved)}
    for name, _, dtype, shape in sized.inputs:
        if dtype is not None:
            out[input_param(name)] = (dtype, math.prod(shape) * dtype.itemsize)
    value = out.get(input_param(schedule.value))
    if value is not None:
        out.update(v=value, o=value, dout=value)
    return out


def _picker(keys: list):
    """values -> the tuple of values[k] for k in keys (itemgetter returns a bare value for one key)."""
    if len(keys) == 1:
        key = keys[0]
        return lambda values: (values[key],)
    return itemgetter(*keys) if keys else lambda values: ()


class Bound:
    """A Sized's launches prepared on one runtime module and device (kdagen.runtime.Module.prepare): the sizes
    (T, N, H, ...) fixed in each kernel's argument block, its pointers, float scalars and tensor maps slots that a
    call fills from a dict of addresses and scalars by parameter name (a map's from its tensor's address: its layout
    is checked here once against the tensor's extent, and each address encoded once: runtime.tensormap.AddressedMap;
    address 0, a kept-only workspace the call does not keep, gives the zero map the generic path passes too)."""

    def __init__(self, sized: Sized, module, device_index, direction: str):
        from ..runtime.tensormap import AddressedMap, map_layout
        self.direction, self.launches = direction, []
        for name, grid, block, smem, params in sized.launches:
            args, keys, maps = [], [], []
            for kind, key, _, layout in params:
                if kind in _SIZES:
                    args.append(_SIZES[kind](sized.scalars[key]))
                    continue
                if kind == "tensor_map":
                    _, dtype, box, swizzle, dims, strides = layout
                    try:
                        layout = map_layout(dtype, sized.extents[key][1], box, swizzle, dims, strides)
                    except ValueError as e:
                        raise ValueError(f"{direction}: kernel {name}'s tensor map of {key!r} at these sizes does "
                                         f"not fit its tensor: {e}") from None
                    maps.append((len(keys), AddressedMap(layout, device_index, key, key in sized.kept_only)))
                args.append(Slot("tmap" if kind == "tensor_map" else kind))
                keys.append(key)
            self.launches.append((name, module.prepare(name, grid, block, args, smem, device_index), _picker(keys),
                                  tuple(maps)))

    def __call__(self, values: dict) -> None:
        for name, launch, pick, maps in self.launches:
            try:
                args = pick(values)
            except KeyError as e:
                raise KeyError(f"{self.direction}: no value for parameter {e.args[0]!r} of kernel {name}") from None
            if maps:
                args = list(args)
                for at, encode in maps:
                    args[at] = encode(args[at])
            launch(args)


def carve(workspaces) -> tuple[tuple, int]:
    """((name, byte offset, shape, dtype) of each workspace, total bytes) of workspaces laid out in one byte
    buffer, each at a multiple of 256 bytes."""
    layout, at = [], 0
    for name, shape, dtype in workspaces:
        layout.append((name, at, shape, dtype))
        at += -(-math.prod(shape) * dtype.itemsize // _CARVE_ALIGN) * _CARVE_ALIGN
    return tuple(layout), at


class Workspaces:
    """A launch's workspaces: separate tensors where a backward keeps them (outputs of the custom op, read by
    name) or the caller brings its own allocator, else carved from one byte buffer — one allocation instead of
    one per workspace; their addresses are all a prepared launch needs, so tensor views of the buffer are made
    only where something reads them as tensors (Module.launch, a debug dict)."""

    def __init__(self, sized: Sized, device, alloc, separate: bool):
        self.separate = self.buffer = None
        if separate or alloc not in _CARVING:
            self.separate = allocate(sized.workspaces if separate else sized.unkept, device, alloc)
            return
        self.layout, nbytes = sized.carved
        if self.layout:
            self.buffer = alloc((nbytes,), dtype=torch.uint8, device=device)

    def tensors(self) -> dict:
        """Every workspace as a tensor by plan name (views of the buffer where carved)."""
        if self.separate is not None:
            return self.separate
        return {name: self.buffer[at:at + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
                for name, at, shape, dtype in self.layout}

    def addresses(self) -> dict:
        """Every workspace's device address by plan name."""
        if self.separate is not None:
            return {name: t.data_ptr() for name, t in self.separate.items()}
        base = 0 if self.buffer is None else self.buffer.data_ptr()
        return {name: base + at for name, at, _, _ in self.layout}


def workspace_shape(w, sizes: dict) -> tuple:
    return tuple(evaluate(d, sizes) for d in w.shape)


def allocate(workspaces, device, alloc) -> dict:
    """Every (name, shape, dtype) of a Sized's list, by plan name, made by `alloc(shape, dtype=, device=)`."""
    return {name: alloc(shape, dtype=dtype, device=device) for name, shape, dtype in workspaces}


def poisoned(shape, *, dtype, device):
    """NaN-filled storage: a kernel that skips a write shows up (tests, KDAGEN_POISON=1). Integer storage gets
    every bit set, so the float workspaces carved from a byte buffer read NaN too."""
    if dtype.is_floating_point:
        return torch.full(shape, math.nan, dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device).fill_(-1 if dtype.is_signed else torch.iinfo(dtype).max)


_CARVING = (torch.empty, poisoned)      # the allocators that make a byte buffer float workspaces can share


def state_shape(plan: Plan, N: int, HV: int) -> tuple:
    """h0, the final state and their gradients: [N,HV,K,V], or [N,HV,V,K] with state_v_first."""
    p = plan.problem
    return (N, HV, p["V"], p["K"]) if p["state_layout"] == "vk" else (N, HV, p["K"], p["V"])
