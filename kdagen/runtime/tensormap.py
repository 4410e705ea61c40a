"""Tensor maps: the 128-byte descriptors of bulk tensor copies (TMA), encoded on the host and passed to a
kernel by value (`const __grid_constant__ kdg::TensorMap`).

`encode_tiled(tensor, box, swizzle=0, dims=None, strides=None)` describes a tensor as `dims` (elements,
innermost first) with `strides` (elements, of dims 1..; the innermost dimension is contiguous) read in
boxes of `box` elements, and encodes it with the driver's cuTensorMapEncodeTiled. `tiled_layout` checks
the arguments against the driver's rules first, naming the one at fault; the CPU emulator
(kdagen.codegen.emulate.encode_tiled) checks the same and writes its own encoding.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
from dataclasses import dataclass

import torch

TENSOR_MAP_BYTES = 128
# torch dtype -> (CUtensorMapDataType, element bytes)
DTYPES = {torch.uint8: (0, 1), torch.int32: (3, 4), torch.int64: (5, 8), torch.float16: (6, 2),
          torch.float32: (7, 4), torch.float64: (8, 8), torch.bfloat16: (9, 2)}
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}     # span in bytes -> CUtensorMapSwizzle
_L2_PROMOTION_128B = 2
_MAX_RANK, _MAX_BOX, _MAX_DIM, _MAX_STRIDE = 5, 256, 2 ** 32, 2 ** 40


@dataclass(frozen=True)
class TensorMap:
    """An encoded tensor map: the driver's CUtensorMap or the emulator's encoding, 128 bytes either way."""
    data: bytes

    def __post_init__(self):
        if len(self.data) != TENSOR_MAP_BYTES:
            raise ValueError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(self.data)}")

    def c_value(self) -> ctypes.Array:
        """The kernel parameter's bytes, as the launch's argument array points to them."""
        return (ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8)).from_buffer_copy(self.data)


@dataclass(frozen=True)
class TiledLayout:
    """Checked arguments of a tiled tensor map: strides in bytes (dims 1..), everything innermost first."""
    address: int
    dtype_code: int
    elem_bytes: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int


def _ints(values, what: str) -> tuple[int, ...]:
    values = tuple(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{what} must be ints, got {values!r}")
    return values


def tiled_layout(tensor: torch.Tensor, box, swizzle: int = 0, dims=None, strides=None) -> TiledLayout:
    """The arguments checked against cuTensorMapEncodeTiled's rules; dims / strides default to the tensor's
    own shape and strides (reversed: innermost first)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in DTYPES:
        raise TypeError(f"tensor dtype {tensor.dtype} has no tensor-map type; use one of {sorted(map(str, DTYPES))}")
    if dims is None:
        if tensor.dim() == 0 or tensor.stride(-1) != 1:
            raise ValueError("dims: the tensor's innermost dimension must be contiguous to take its shape; pass dims "
                             "and strides")
        dims, strides = tensor.shape[::-1], tensor.stride()[::-1][1:]
    available = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
    return at_address(map_layout(tensor.dtype, available, box, swizzle, dims, strides), tensor.data_ptr())


def map_layout(dtype: torch.dtype, available: int, box, swizzle: int = 0, dims=(), strides=None) -> TiledLayout:
    """The address-free part of `tiled_layout`: dims, strides, box and swizzle checked against the driver's rules
    and against `available`, the bytes from the tensor's start that the map may reach. Its address is 0 until
    `at_address` gives one."""
    if dtype not in DTYPES:
        raise TypeError(f"tensor dtype {dtype} has no tensor-map type; use one of {sorted(map(str, DTYPES))}")
    code, esize = DTYPES[dtype]
    dims, box = _ints(dims, "dims"), _ints(box, "box")
    strides = _ints(() if strides is None else strides, "strides")
    rank = len(dims)
    if not 1 <= rank <= _MAX_RANK:
        raise ValueError(f"dims: rank {rank} outside 1..{_MAX_RANK}")
    if len(box) != rank or len(strides) != rank - 1:
        raise ValueError(f"box needs {rank} entries and strides {rank - 1} (dims 1..), got {len(box)} and "
                         f"{len(strides)}")
    if swizzle not in SWIZZLES:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLES)} bytes, got {swizzle!r}")
    for i, d in enumerate(dims):
        if not 1 <= d <= _MAX_DIM:
            raise ValueError(f"dims[{i}] = {d} outside 1..2^32")
    byte_strides = tuple(s * esize for s in strides)
    for i, s in enumerate(byte_strides):
        if s <= 0 or s % 16 or s >= _MAX_STRIDE:
            raise ValueError(f"strides[{i}] = {strides[i]} elements = {s} bytes: must be a positive multiple of 16 "
                             f"bytes below 2^40")
    for i, b in enumerate(box):
        if not 1 <= b <= _MAX_BOX:
            raise ValueError(f"box[{i}] = {b} outside 1..{_MAX_BOX}")
    inner = box[0] * esize
    if inner % 16:
        raise ValueError(f"box[0] = {box[0]} elements = {inner} bytes: the inner box must be a multiple of 16 bytes")
    if swizzle and inner > swizzle:
        raise ValueError(f"box[0] = {box[0]} elements = {inner} bytes exceeds the {swizzle}-byte swizzle span")
    reach = esize * (dims[0] - 1) + sum((d - 1) * s for d, s in zip(dims[1:], byte_strides)) + esize
    if reach > available:
        raise ValueError(f"dims {dims} with strides {strides} reach {reach} bytes past the tensor's start; its storage "
                         f"holds {available}")
    return TiledLayout(0, code, esize, dims, byte_strides, box, swizzle)


def at_address(layout: TiledLayout, address: int) -> TiledLayout:
    """A checked layout at a global address (which the driver wants 16-byte aligned)."""
    if address % 16:
        raise ValueError(f"tensor: the global address 0x{address:x} is not 16-byte aligned")
    return dataclasses.replace(layout, address=address)


@functools.cache
def _encode_function():
    """cuTensorMapEncodeTiled from the driver library, loaded on first use."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise RuntimeError(f"tensor maps need the CUDA driver (libcuda.so.1): {e}") from e
    fn = lib.cuTensorMapEncodeTiled
    u32, u64p, u32p = ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return lib, fn


def _error_name(lib, code: int) -> str:
    name = ctypes.c_char_p()
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return name.value.decode() if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value else str(code)


# Encoded maps by everything the encoding and its checks read (address, dtype, shape, strides, the storage it may
# reach, the box, swizzle, dims and strides asked for): a map is a pure function of these, so a call that meets an
# address and shape again (the caching allocator's steady state) skips ≈ 30 µs of checks and the driver call.
_ENCODED: dict[tuple, TensorMap] = {}
_ENCODED_LIMIT = 4096


def encode_tiled(tensor: torch.Tensor, box, swizzle: int = 0, dims=None, strides=None) -> TensorMap:
    """A CUDA tensor's tiled tensor map (out-of-bounds elements read 0, L2 promotion of 128 bytes)."""
    if isinstance(tensor, torch.Tensor) and tensor.device.type != "cuda":
        raise ValueError(f"tensor is on {tensor.device}; tensor maps describe CUDA memory (the CPU emulator has "
                         f"kdagen.codegen.emulate.encode_tiled)")
    key = _encoding_key(tensor, box, swizzle, dims, strides)
    encoded = _ENCODED.get(key) if key is not None else None
    if encoded is None:
        encoded = _encode_on(tiled_layout(tensor, box, swizzle, dims, strides), tensor.device.index)
        if key is not None:
            if len(_ENCODED) >= _ENCODED_LIMIT:
                _ENCODED.clear()
            _ENCODED[key] = encoded
    return encoded


class AddressedMap:
    """The tensor maps of one layout at any address: a prepared launch's tensor-map slot. The layout (a `map_layout`,
    checked once against the bytes its tensor holds) is fixed by the launch sizes; a launch supplies the address, and
    each address is encoded once (the caching allocator hands the same ones back; past LIMIT addresses the oldest
    is dropped). Address 0 gives 128 zero bytes where `absent_ok` (a kept-only workspace of a call that keeps none,
    which the kernel never reads) and is refused elsewhere: a kernel would copy through a zero descriptor."""

    LIMIT = 1024

    def __init__(self, layout: TiledLayout, device_index: int, name: str, absent_ok: bool = False):
        self.layout, self.device_index, self.name = layout, device_index, name
        self._encoded = {0: bytes(TENSOR_MAP_BYTES)} if absent_ok else {}

    def __call__(self, address: int) -> bytes:
        data = self._encoded.get(address)
        if data is None:
            if not address:
                raise ValueError(f"tensor map of {self.name!r}: the tensor is absent")
            data = _encode_on(at_address(self.layout, address), self.device_index).data
            if len(self._encoded) >= self.LIMIT:
                del self._encoded[next(a for a in self._encoded if a)]     # the oldest address (0 stays)
            self._encoded[address] = data
        return data


def _encode_on(layout: TiledLayout, device_index: int) -> TensorMap:
    """_encode with the device's context current: the driver wants one, and the autograd thread may have none."""
    from .launch import on_device          # (launch imports this module)
    with on_device(device_index):
        return _encode(layout)


def _encoding_key(tensor, box, swizzle, dims, strides) -> tuple | None:
    """The cache key of an encoding; None unless every size is a plain int (the checks then say what is wrong)."""
    given = [box] + [a for a in (dims, strides) if a is not None]
    if not isinstance(tensor, torch.Tensor) or type(swizzle) is not int or not all(
            isinstance(a, (tuple, list)) and all(type(v) is int for v in a) for a in given):
        return None
    return (tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.stride(), tensor.storage_offset(),
            tensor.untyped_storage().nbytes(), tuple(box), swizzle,
            None if dims is None else tuple(dims), None if strides is None else tuple(strides))


def _encode(t: TiledLayout) -> TensorMap:
    """cuTensorMapEncodeTiled of checked arguments."""
    lib, fn = _encode_function()
    rank = len(t.dims)
    storage = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + 64))()            # the driver wants 64-byte alignment
    at = (ctypes.addressof(storage) + 63) // 64 * 64
    res = fn(at, t.dtype_code, rank, t.address, (ctypes.c_uint64 * rank)(*t.dims),
             (ctypes.c_uint64 * max(rank - 1, 1))(*t.strides), (ctypes.c_uint32 * rank)(*t.box),
             (ctypes.c_uint32 * rank)(*([1] * rank)), 0, SWIZZLES[t.swizzle], _L2_PROMOTION_128B, 0)
    if res:
        raise ValueError(f"cuTensorMapEncodeTiled failed with {_error_name(lib, res)} for dims {t.dims}, byte strides "
                         f"{t.strides}, box {t.box}, swizzle {t.swizzle}")
    return TensorMap(ctypes.string_at(at, TENSOR_MAP_BYTES))
