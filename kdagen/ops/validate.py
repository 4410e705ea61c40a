"""Input checks for chunk_kda / chunk_gated_delta_rule, run before anything touches a GPU.

Every error names the argument and says what was expected. Three kinds:
- TypeError: not a tensor / not a number where one is needed;
- ValueError: malformed input (shapes, cu_seqlens, devices, contiguity);
- NotImplementedError: well-formed input kdagen has no kernel for (dtype, head dim).
Checks run in the order shape → dtype → cu_seqlens → layout → device, so everything but the device
can be tested with CPU tensors.
"""
from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass

import torch

HEAD_DIMS = (64, 128)          # K = V values with emitted kernels (the kernel families' head dims; docs/plan.md §6)
IO_DTYPES = (torch.bfloat16,)  # q, k, v, and the dtype of o
GATE_DTYPES = (torch.bfloat16, torch.float32)   # g and beta: as FLA users pass them
PARAM_DTYPE = torch.float32    # A_log, dt_bias, initial_state


@dataclass(frozen=True)
class Dims:
    """The sizes of one call: N sequences (B, or len(cu_seqlens) − 1 with B = 1), G = HV / H."""
    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int

    @property
    def G(self) -> int:
        return self.HV // self.H


def _is_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _shape(name: str, x: torch.Tensor, expected: tuple, layout: str) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {layout} = {list(expected)}, got {list(x.shape)}")


def _dtype(name: str, x: torch.Tensor, allowed: tuple, why: str) -> None:
    if x.dtype not in allowed:
        names = " or ".join(str(d).removeprefix("torch.") for d in allowed)
        err = NotImplementedError if x.dtype.is_floating_point else ValueError
        raise err(f"{name} has dtype {str(x.dtype).removeprefix('torch.')}; {why} take {names}")


def check_scale(scale) -> None:
    if scale is None:
        return
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")


def check_seqlens_format(name: str, cu: torch.Tensor) -> None:
    if cu.dtype != torch.int64:
        raise ValueError(f"{name} must be int64 (torch.long), got {str(cu.dtype).removeprefix('torch.')}")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must be 1-D [N+1] with N >= 1 sequences, got shape {list(cu.shape)}")


def check_seqlens(name: str, cu: torch.Tensor, T: int) -> list[int]:
    """The host values of a cu_seqlens tensor, after checking it is [N+1] int64, from 0, non-decreasing, to T."""
    check_seqlens_format(name, cu)
    values = [int(c) for c in cu.tolist()]
    if values[0] != 0:
        raise ValueError(f"{name} must start at 0, got {values[0]}")
    drops = [i for i in range(1, len(values)) if values[i] < values[i - 1]]
    if drops:
        i = drops[0]
        raise ValueError(f"{name} must be non-decreasing, but {name}[{i}] = {values[i]} < "
                         f"{name}[{i - 1}] = {values[i - 1]}")
    if values[-1] != T:
        raise ValueError(f"{name}[-1] = {values[-1]} must equal the number of tokens T = {T}")
    return values


class HostSeqlens:
    """The checked host values of recent cu_seqlens tensors, by identity, storage and version.

    Reading cu_seqlens on the host waits for the GPU; a training loop passes the same tensor call
    after call (and the backward again), so the values are read once per tensor and reused while
    the tensor is alive, at the same address and not modified in place (torch bumps `_version` on
    every in-place write through torch). Writes torch does not see — through `.data`, a NumPy or
    DLPack view, another library's kernel — are not noticed: pass a fresh tensor after those.
    Inference tensors have no version counter and are read every call. FLA caches its chunk
    indices by identity alone.
    """

    def __init__(self, size: int = 8):
        self.size = size
        self.entries: dict[int, tuple] = {}    # id -> (weak reference, data_ptr, version, values); oldest first
        self.lock = threading.Lock()

    def __call__(self, name: str, cu: torch.Tensor, T: int) -> list[int]:
        check_seqlens_format(name, cu)
        if cu.is_inference():
            return check_seqlens(name, cu, T)
        stamp = (cu.data_ptr(), cu._version)
        with self.lock:
            hit = self.entries.pop(id(cu), None)
            if hit is not None and hit[0]() is cu and hit[1:3] == stamp and len(hit[3]) == cu.numel() \
                    and hit[3][-1] == T:
                values = hit[3]
            else:
                values = check_seqlens(name, cu, T)
            self.entries[id(cu)] = (weakref.ref(cu), *stamp, values)
            while len(self.entries) > self.size:
                self.entries.pop(next(iter(self.entries)))
        return values


host_seqlens = HostSeqlens()


def validate(op: str, q, k, v, g, beta, *, A_log=None, dt_bias=None, initial_state=None,
             cu_seqlens=None, cu_seqlens_cpu=None, state_v_first: bool = False,
             scale=None) -> tuple[Dims, list[int] | None]:
    """(Dims, host copy of cu_seqlens or None); raises on the first problem found.

    cu_seqlens is read on the host (one device sync, the first time a given tensor is seen: see
    HostSeqlens) unless cu_seqlens_cpu is given, whose values are then trusted to equal
    cu_seqlens', as in FLA.
    """
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        _is_tensor(name, x)
    if q.dim() != 4:
        raise ValueError(f"q must be 4-D [B, T, H, K], got shape {list(q.shape)}")
    B, T, H, K = q.shape
    _shape("k", k, q.shape, "q.shape [B, T, H, K]")
    if v.dim() != 4 or tuple(v.shape[:2]) != (B, T):
        raise ValueError(f"v must be [B, T, HV, V] = [{B}, {T}, HV, V] like q, got shape {list(v.shape)}")
    HV, V = v.shape[2:]
    if H == 0 or HV == 0 or HV % H:
        raise ValueError(f"v has HV = {HV} heads, which must be a positive multiple of q/k's H = {H} heads (GVA)")
    if K not in HEAD_DIMS:
        raise NotImplementedError(f"head dim K = {K} (q.shape[-1]) has no kernel; kdagen emits K in {HEAD_DIMS}")
    if V != K:
        raise NotImplementedError(f"value head dim V = {V} (v.shape[-1]) has no kernel; kdagen needs V == K = {K}")
    per_channel = op == "kda"
    if per_channel:
        _shape("g", g, (B, T, HV, K), "[B, T, HV, K]")
    else:
        _shape("g", g, (B, T, HV), "[B, T, HV] (one decay per head for GDN)")
    _shape("beta", beta, (B, T, HV), "[B, T, HV]")
    for name, x in (("q", q), ("k", k), ("v", v)):
        _dtype(name, x, IO_DTYPES, "kdagen's kernels")
    for name, x in (("g", g), ("beta", beta)):
        _dtype(name, x, GATE_DTYPES, "kdagen's kernels")
    check_scale(scale)

    params = {}
    if A_log is not None:
        params["A_log"] = (_is_tensor("A_log", A_log), (HV,), "[HV]")
    if dt_bias is not None:
        params["dt_bias"] = (_is_tensor("dt_bias", dt_bias), (HV * K,) if per_channel else (HV,),
                             "[HV * K]" if per_channel else "[HV]")
    for name, (x, shape, layout) in params.items():
        _shape(name, x, shape, layout)
        _dtype(name, x, (PARAM_DTYPE,), "gate parameters")

    N, seqlens = B, None
    if cu_seqlens is not None:
        _is_tensor("cu_seqlens", cu_seqlens)
        if B != 1:
            raise ValueError(f"with cu_seqlens the batch size must be 1 (flatten the sequences), got B = {B}")
        if cu_seqlens_cpu is None:
            seqlens = host_seqlens("cu_seqlens", cu_seqlens, T)
        else:
            check_seqlens_format("cu_seqlens", cu_seqlens)
            _is_tensor("cu_seqlens_cpu", cu_seqlens_cpu)
            if cu_seqlens_cpu.device.type != "cpu":
                raise ValueError(f"cu_seqlens_cpu must be on the CPU, got {cu_seqlens_cpu.device}")
            if cu_seqlens_cpu.shape != cu_seqlens.shape:
                raise ValueError(f"cu_seqlens_cpu has shape {list(cu_seqlens_cpu.shape)} but cu_seqlens has "
                                 f"{list(cu_seqlens.shape)}; they must hold the same offsets")
            seqlens = check_seqlens("cu_seqlens_cpu", cu_seqlens_cpu, T)
        N = len(seqlens) - 1
    elif cu_seqlens_cpu is not None:
        raise ValueError("cu_seqlens_cpu was given without cu_seqlens")

    if initial_state is not None:
        _is_tensor("initial_state", initial_state)
        layout = "[N, HV, V, K] (state_v_first)" if state_v_first else "[N, HV, K, V]"
        _shape("initial_state", initial_state, (N, HV, V, K) if state_v_first else (N, HV, K, V), layout)
        _dtype("initial_state", initial_state, (PARAM_DTYPE,), "states")

    named = {"q": q, "k": k, "v": v, "g": g, "beta": beta, **{n: p[0] for n, p in params.items()},
             "initial_state": initial_state, "cu_seqlens": cu_seqlens}
    for name, x in named.items():
        if x is not None and not x.is_contiguous():
            raise ValueError(f"{name} is not contiguous (strides {list(x.stride())}); pass {name}.contiguous()")
    for name, x in named.items():
        if x is not None and x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}; all tensors must share one device")
    if q.device.type != "cuda":
        raise ValueError(f"q is on {q.device}; kdagen's kernels run on CUDA devices")
    return Dims(B, T, H, HV, K, V, N), seqlens
