"""Kernel arguments and launches through the CUDA driver, on torch's current stream.

Arguments are packed by hand into the driver's `void*[]` because the C signature is fixed and
CuPy's launcher does no type checking: a Python int would silently become a 64-bit value where the
kernel reads 32 bits. The CPU emulator (kdagen.codegen.emulate) packs through the same `pack_args`.

`Module.launch` packs every argument afresh (a ctypes object each). A launch repeated with only its
pointers, float scalars and tensor maps changing — the ops' per-call path — is prepared once instead
(`Module.prepare`): its fixed arguments are checked and packed when it is made, and each launch writes the
changing ones into the prebuilt argument block with one `struct.pack_into`.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import struct
import threading
from dataclasses import dataclass

import torch

from .tensormap import TENSOR_MAP_BYTES, TensorMap

_INT32 = (-(2 ** 31), 2 ** 31 - 1)
_SMEM_DEFAULT_LIMIT = 48 * 1024     # above this the kernel must opt in to dynamic shared memory


@dataclass(frozen=True)
class i64:
    """A kernel argument declared `long long` / `int64_t`."""
    value: int


@dataclass(frozen=True)
class f32:
    """A kernel argument declared `float` (Python floats are doubles; kernels never take those)."""
    value: float


def device_pointer(tensor: torch.Tensor, position: int) -> int:
    """A CUDA tensor's data pointer (the runtime's kernels run on the GPU)."""
    if tensor.device.type != "cuda":
        raise ValueError(f"kernel argument {position} is a tensor on {tensor.device}, not on a CUDA device")
    return tensor.data_ptr()


def c_value(arg, position: int, pointer=device_pointer):
    """The ctypes value the kernel's parameter at `position` receives; errors name the position. `pointer`
    turns a tensor into its address (the CPU emulator passes host tensors through its own)."""
    if isinstance(arg, torch.Tensor):
        return ctypes.c_void_p(pointer(arg, position))
    if arg is None:
        return ctypes.c_void_p(None)           # an absent optional tensor: the kernel sees nullptr
    if isinstance(arg, TensorMap):
        return arg.c_value()                   # 128 bytes, passed by value
    if isinstance(arg, i64):
        return ctypes.c_int64(int(arg.value))
    if isinstance(arg, f32):
        return ctypes.c_float(float(arg.value))
    if isinstance(arg, bool):
        raise TypeError(f"kernel argument {position} is a bool; pass int(flag) for an int parameter")
    if isinstance(arg, int):
        if not _INT32[0] <= arg <= _INT32[1]:
            raise OverflowError(f"kernel argument {position} = {arg} does not fit in int32; wrap it in runtime.i64")
        return ctypes.c_int32(arg)
    if isinstance(arg, float):
        raise TypeError(f"kernel argument {position} is a Python float; wrap it in runtime.f32")
    raise TypeError(f"kernel argument {position} has unsupported type {type(arg).__name__}")


@dataclass(frozen=True)
class Slot:
    """A parameter of a prepared launch whose value each launch supplies: "ptr" (a device address as an int,
    0 for nullptr), "f32" (a float) or "tmap" (a tensor map's 128 bytes, passed by value)."""
    kind: str

    def __post_init__(self):
        if self.kind not in _SLOT_FORMATS:
            raise ValueError(f"a launch slot is one of {sorted(_SLOT_FORMATS)}, got {self.kind!r}")


# struct codes of the slots, each a multiple of 8 bytes (the pad keeps every slot 8-aligned)
_SLOT_FORMATS = {"ptr": "Q", "f32": "f4x", "tmap": f"{TENSOR_MAP_BYTES}s"}
_ALIGN = 8


def pack_args(args, pointer=device_pointer) -> tuple[ctypes.Array, list]:
    """(the void*[] the kernel's launch reads, the values it points to — keep both alive until the launch returns)."""
    values = [c_value(a, i, pointer) for i, a in enumerate(args)]
    pointers = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    return pointers, values


def dim3(dims, what: str) -> tuple[int, int, int]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 0 for d in dims):
        raise ValueError(f"{what} must be up to three non-negative ints, got {dims!r}")
    return dims + (1,) * (3 - len(dims))


def args_device(args) -> torch.device | None:
    """The one CUDA device the tensor arguments live on (None when there are none)."""
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"kernel arguments are on several devices: {sorted(map(str, devices))}")
    return devices.pop() if devices else None


@functools.cache
def _driver():
    from cupy.cuda import driver
    return driver


def _raw_stream(index: int) -> int:
    """The current stream's handle on device `index`: torch's C accessor where it has one (no Stream object per
    launch), else the public API."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return get(index) if get is not None else torch.cuda.current_stream(index).cuda_stream


_CONTEXTS: dict[int, int] = {}      # device index -> the context _ensure_context made current for it


def _ensure_context(index: int) -> None:
    """Make device `index`'s primary context current on this thread (shared with torch) for driver calls.

    torch skips cudaSetDevice when the device already is its current one, so a thread that has not run
    CUDA work yet has no current context; cudaSetDevice (CUDA >= 12) makes the primary one current.
    """
    driver = _driver()
    if driver.ctxGetCurrent() == 0 or driver.ctxGetDevice() != index:
        from cupy.cuda import runtime as cudart
        cudart.setDevice(index)
    _CONTEXTS[index] = driver.ctxGetCurrent()


@contextlib.contextmanager
def on_device(index: int):
    """torch's current device is `index` and its context the current one, for the driver calls inside."""
    with torch.cuda.device(index):
        _ensure_context(index)
        yield


def _launch(index: int, fn: int, grid: tuple, block: tuple, smem_bytes: int, params: int) -> None:
    """cuLaunchKernel of `fn` with the argument array at address `params`, on device `index`'s current torch
    stream. Where that device's context already is this thread's current one (one driver query), the launch
    needs no device switch (`torch.cuda.device` in and out costs several µs)."""
    driver = _driver()
    if _CONTEXTS.get(index, 0) == driver.ctxGetCurrent() != 0:
        driver.launchKernel(fn, *grid, *block, smem_bytes, _raw_stream(index), params, 0)
        return
    with on_device(index):
        driver.launchKernel(fn, *grid, *block, smem_bytes, _raw_stream(index), params, 0)


class Module:
    """A compiled image, loaded lazily into each device's context where it is launched.

    `launch` runs on torch.cuda.current_stream() of the arguments' device, so it orders correctly
    with the torch work around it (never the NULL stream, never a CuPy stream).
    """

    def __init__(self, uri: str, arch: str, image: bytes, kind: str):
        self.uri, self.arch, self.image, self.kind = uri, arch, image, kind
        self._loaded = {}        # device index → cupy Module (owns the CUmodule)
        self._functions = {}     # (device index, name) → cupy Function
        self._smem_set = {}      # (device index, name) → dynamic smem bytes opted in

    def __repr__(self):
        return f"Module({self.uri!r}, {self.arch}, {self.kind}, {len(self.image)} bytes)"

    def function(self, name: str, device_index: int):
        fn = self._functions.get((device_index, name))
        if fn is not None:
            return fn
        from cupy.cuda import function
        if device_index not in self._loaded:
            with on_device(device_index):
                mod = function.Module()
                mod.load(self.image + b"\0" if self.kind == "ptx" else self.image)
            self._loaded[device_index] = mod
        try:
            fn = self._loaded[device_index].get_function(name)
        except _driver().CUDADriverError as e:
            raise KeyError(f"kernel {name!r} not found in module {self.uri} ({e}); "
                           f"kernels must be declared extern \"C\" __global__") from None
        self._functions[(device_index, name)] = fn
        return fn

    def _launchable(self, name: str, device_index: int, smem_bytes: int) -> int:
        """The kernel's function handle on the device, opted in to `smem_bytes` of dynamic shared memory where
        that exceeds the default limit."""
        fn = self.function(name, device_index)
        if smem_bytes > _SMEM_DEFAULT_LIMIT and self._smem_set.get((device_index, name), 0) < smem_bytes:
            driver = _driver()
            with on_device(device_index):
                driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes)
            self._smem_set[(device_index, name)] = smem_bytes
        return fn.ptr

    def launch(self, kernel_name: str, grid, block, args, smem_bytes: int = 0) -> None:
        grid, block = dim3(grid, "grid"), dim3(block, "block")
        if 0 in block:
            raise ValueError(f"block {block} of {kernel_name} has a zero dimension")
        if 0 in grid:
            return                              # nothing to do (e.g. no tokens); CUDA rejects empty grids
        device = args_device(args)
        index = torch.cuda.current_device() if device is None else device.index
        fn = self._launchable(kernel_name, index, smem_bytes)
        pointers, _keep = pack_args(args)
        _launch(index, fn, grid, block, smem_bytes, ctypes.addressof(pointers))

    def prepare(self, kernel_name: str, grid, block, params, smem_bytes: int = 0,
                device_index: int | None = None) -> "PreparedLaunch":
        """The launch of `kernel_name` on a device (default: the current one) at this grid, block and dynamic
        shared memory, with `params`: per kernel parameter a value as `launch` takes it, fixed for every launch,
        or a `Slot` its launches fill (see PreparedLaunch)."""
        return PreparedLaunch(self, kernel_name, grid, block, params, smem_bytes,
                              torch.cuda.current_device() if device_index is None else device_index)

    def attributes(self, kernel_name: str, device_index: int | None = None) -> dict:
        """Registers, local (spill) memory and static shared memory per thread block, as the driver reports."""
        index = torch.cuda.current_device() if device_index is None else device_index
        fn, driver = self.function(kernel_name, index), _driver()
        names = {"num_regs": driver.CU_FUNC_ATTRIBUTE_NUM_REGS,
                 "local_size_bytes": driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                 "shared_size_bytes": driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                 "max_threads_per_block": driver.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
        return {k: driver.funcGetAttribute(a, fn.ptr) for k, a in names.items()}


class PreparedLaunch:
    """One kernel of a Module on one device at a fixed grid, block and dynamic shared memory, its argument block
    laid out once. The fixed arguments are checked (as `pack_args` checks them: int32 range, f32 and i64
    wrappers, no bools) and packed when it is made; a launch, `prepared(values)`, writes the slots' values
    (in parameter order) into the block with one struct.pack_into and calls the driver. Slots come first in
    the block (8 bytes each, a tensor map's 128), the fixed arguments after them; the driver's void*[] points into
    it.

    The block is per thread: the driver reads it during cuLaunchKernel, which runs without the GIL, while
    another thread may be launching the same kernel."""

    def __init__(self, module: Module, kernel_name: str, grid, block, params, smem_bytes: int, device_index: int):
        self.kernel_name, self.grid, self.block = kernel_name, dim3(grid, "grid"), dim3(block, "block")
        if 0 in self.block or 0 in self.grid:
            raise ValueError(f"grid {self.grid} and block {self.block} of {kernel_name} must have no zero dimension")
        self.smem_bytes, self.device_index = smem_bytes, device_index
        self.format = struct.Struct("<" + "".join(_SLOT_FORMATS[p.kind] for p in params if isinstance(p, Slot)))
        template, slot, self.offsets = bytearray(self.format.size), 0, []
        for i, p in enumerate(params):          # the slots first, then each fixed argument, 8-aligned
            if isinstance(p, Slot):
                self.offsets.append(slot)
                slot += struct.calcsize(_SLOT_FORMATS[p.kind])
            else:
                self.offsets.append(len(template))
                data = bytes(c_value(p, i, _no_tensor))
                template += data.ljust(-(-len(data) // _ALIGN) * _ALIGN, b"\0")
        self.template = bytes(template or b"\0")
        self.fn = module._launchable(kernel_name, device_index, smem_bytes)
        self._local = threading.local()

    def __repr__(self):
        return f"PreparedLaunch({self.kernel_name!r}, grid={self.grid}, block={self.block}, smem={self.smem_bytes})"

    def _block(self) -> tuple:
        """(this thread's argument block, the address of its void*[], the array) — made on a thread's first
        launch."""
        try:
            return self._local.block
        except AttributeError:
            block = ctypes.create_string_buffer(self.template, len(self.template))
            base = ctypes.addressof(block)
            pointers = (ctypes.c_void_p * max(len(self.offsets), 1))(*[base + o for o in self.offsets])
            self._local.block = (block, ctypes.addressof(pointers), pointers)
            return self._local.block

    def __call__(self, values) -> None:
        block, params, _ = self._block()
        self.format.pack_into(block, 0, *values)
        _launch(self.device_index, self.fn, self.grid, self.block, self.smem_bytes, params)


def _no_tensor(tensor, position: int) -> int:
    raise TypeError(f"kernel argument {position} is a tensor: a prepared launch takes its address through a Slot")


class KernelModules:
    """A direction's kernels compiled as one module each (kdagen.ops.config.PER_KERNEL), behind the interface of one
    Module: a launch, a prepared launch or a function finds its kernel's module by the kernel's name."""

    def __init__(self, modules: dict):
        self.modules = dict(modules)

    def __repr__(self):
        return f"KernelModules({sorted(self.modules)})"

    def _of(self, kernel_name: str) -> Module:
        try:
            return self.modules[kernel_name]
        except KeyError:
            raise KeyError(f"kernel {kernel_name!r} is in none of the modules {sorted(self.modules)}") from None

    def function(self, name: str, device_index: int):
        return self._of(name).function(name, device_index)

    def launch(self, kernel_name: str, grid, block, args, smem_bytes: int = 0) -> None:
        self._of(kernel_name).launch(kernel_name, grid, block, args, smem_bytes)

    def prepare(self, kernel_name: str, grid, block, params, smem_bytes: int = 0,
                device_index: int | None = None) -> PreparedLaunch:
        return self._of(kernel_name).prepare(kernel_name, grid, block, params, smem_bytes, device_index)

    def attributes(self, kernel_name: str, device_index: int | None = None) -> dict:
        return self._of(kernel_name).attributes(kernel_name, device_index)
