"""Input checks for every op (chunk_kda, chunk_gated_delta_rule, a compiled recurrence), run before anything
touches a GPU: what a call passes against what its recurrence reads.

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

from ..plan.families.base import IO_INPUTS, PASSED_DTYPE_INPUTS
from .launcher import TORCH_DTYPES

HEAD_DIMS = (64, 128)          # K = V values with emitted kernels (the kernel families' head dims; docs/plan.md §6)
IO_DTYPES = (torch.bfloat16,)  # q, k, v, and the dtype of o
GATE_DTYPES = (torch.bfloat16, torch.float32)   # g and beta: as FLA users pass them
PARAM_DTYPE = torch.float32    # head parameters (A_log, dt_bias), initial_state


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


def _shape(name: str, x: torch.Tensor, expected: tuple, layout) -> None:
    """layout: the dims' names as a string, or a tuple of them (formatted only for the error)."""
    if tuple(x.shape) != tuple(expected):
        layout = layout if isinstance(layout, str) else f"[{', '.join(layout)}]"
        raise ValueError(f"{name} must have shape {layout} = {list(expected)}, got {list(x.shape)}")


def _dtype(name: str, x: torch.Tensor, allowed: tuple, why: str) -> None:
    if x.dtype not in allowed:
        names = " or ".join(str(d).removeprefix("torch.") for d in allowed)
        err = NotImplementedError if x.dtype.is_floating_point else ValueError
        raise err(f"{name} has dtype {str(x.dtype).removeprefix('torch.')}; {why} take {names}")


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


def _layout(heads: str, row: str | None) -> tuple[str, ...]:
    return ("B", "T", heads) + ((row,) if row else ())


def _expected_dtypes(spec, name: str) -> tuple[tuple, str]:
    """(allowed torch dtypes, who takes them) of a token input, as the planner reads it (plan.families.base)."""
    if name == spec.value or name in IO_INPUTS:
        return IO_DTYPES, "kdagen's kernels"
    if name in PASSED_DTYPE_INPUTS:
        return GATE_DTYPES, "kdagen's kernels"
    declared = spec.declared[name]
    return (TORCH_DTYPES.get(declared, torch.float32),), f"inputs declared dtype={declared!r} in the recurrence"


def token_checks(spec) -> tuple:
    """Per token input: (name, its layout, whether its shape is checked against it — all but the reference q/k
    input and the value, whose shapes define the sizes —, allowed dtypes, who takes them). Spec.of keeps them
    (Spec.token_checks): the per-call path only compares."""
    ref = spec.qk[0] if spec.qk else spec.value
    return tuple((name, _layout("H" if name in spec.qk else "HV", spec.rows[name]), name not in (ref, spec.value),
                  *_expected_dtypes(spec, name)) for name in spec.token_inputs)


def check_scalar(name: str, x) -> float:
    """A scalar's value as a float: a Python number or a 0-d tensor without gradient, finite."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 0:
            raise ValueError(f"{name} must be a number or a 0-d tensor, got shape {list(x.shape)}")
        if x.requires_grad:
            raise ValueError(f"{name} requires grad, but this scalar takes no gradient here (kdagen.compile(fn) "
                             "learns a 0-d scalar tensor that requires grad; chunk_kda's scale is a float)")
        x = x.item()
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(x).__name__}")
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x}")
    return float(x)


def validate(spec, tensors: dict, scalars: dict, *, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None,
             state_v_first: bool = False, device_type: str = "cuda",
             read_seqlens: bool = True) -> tuple[Dims, list[int] | None, dict]:
    """(Dims, host copy of cu_seqlens or None, the scalars as floats) for a call of a recurrence (a
    kdagen.ops.config.Spec); raises on the first problem found, naming the argument.

    tensors: the recurrence's token inputs and head parameters by name; scalars: its scalars by name (a missing
    "scale" is K^-0.5, as in FLA). q/k inputs (those feeding only query and key) live on H heads, the rest on
    HV = G·H; per-head parameters are [HV] or [HV·K] ([HV, K] too). cu_seqlens is read on the host (one device
    sync, the first time a given tensor is seen: see HostSeqlens) unless cu_seqlens_cpu is given, whose values
    are then trusted to equal cu_seqlens', as in FLA; with read_seqlens=False (torch.compile tracing, CUDA-graph
    capture, FLA's use_graph) only its format is checked and N is its length − 1. device_type: "cuda" (the GPU
    kernels) or "cpu" (the emulator).
    """
    inputs = list(spec.inputs)
    unknown = sorted(set(tensors) - set(inputs))
    if unknown:
        raise TypeError(f"unexpected input(s) {unknown}: recurrence {spec.name!r} reads {inputs} and the scalars "
                        f"{list(spec.scalars)}")
    unknown = sorted(set(scalars) - set(spec.scalars))
    if unknown:
        raise TypeError(f"unexpected scalar(s) {unknown}: recurrence {spec.name!r} has the scalars "
                        f"{list(spec.scalars)}")
    value, qk = spec.value, spec.qk
    ref = qk[0] if qk else value
    for name in inputs:
        if tensors.get(name) is None:
            kind = "token input" if name in spec.token_inputs else "head parameter"
            raise TypeError(f"missing input {name!r}: recurrence {spec.name!r} reads the {kind} {name!r}")
        _is_tensor(name, tensors[name])
    x0 = tensors[ref]
    heads = "H" if qk else "HV"
    if x0.dim() != 4:
        raise ValueError(f"{ref} must be 4-D [B, T, {heads}, K], got shape {list(x0.shape)}")
    B, T, H, K = x0.shape
    v = tensors[value]
    if v.dim() != 4 or tuple(v.shape[:2]) != (B, T):
        raise ValueError(f"{value} must be [B, T, HV, V] = [{B}, {T}, HV, V] like {ref}, got shape {list(v.shape)}")
    HV, V = v.shape[2:]
    if H == 0 or HV == 0 or HV % H:
        raise ValueError(f"{value} has HV = {HV} heads, which must be a positive multiple of the q/k inputs' "
                         f"H = {H} heads ({ref}.shape[2]; GVA)")
    if K not in HEAD_DIMS:
        raise NotImplementedError(f"head dim K = {K} ({ref}.shape[-1]) has no kernel; kdagen emits K in {HEAD_DIMS}")
    if V != K:
        raise NotImplementedError(f"value head dim V = {V} ({value}.shape[-1]) has no kernel; kdagen needs V == K = "
                                  f"{K}")
    sizes = {"B": B, "T": T, "H": H, "HV": HV, "K": K, "V": V}
    checks = spec.token_checks
    for name, layout, shaped, _, _ in checks:
        if shaped:
            _shape(name, tensors[name], tuple(sizes[d] for d in layout), layout)
    for name, _, _, allowed, why in checks:
        _dtype(name, tensors[name], allowed, why)
    resolved = {name: check_scalar(name, s) for name, s in scalars.items()}
    for name in spec.scalars:
        if name not in resolved:
            if name != "scale":
                raise TypeError(f"missing scalar {name!r}: recurrence {spec.name!r} reads it; pass {name}=<float>")
            resolved[name] = K ** -0.5

    for name in spec.head_params:
        x, row = tensors[name], spec.rows[name] is not None
        if row:
            if not (x.dim() == 1 and x.shape[0] == HV * K or x.dim() == 2 and x.shape[0] == HV and x.shape[1] == K):
                raise ValueError(f"{name} must have shape [HV * K] = [{HV * K}] (or [HV, K]), got {list(x.shape)}")
        else:
            _shape(name, x, (HV,), "[HV]")
        _dtype(name, x, (PARAM_DTYPE,), "head parameters")

    N, seqlens = B, None
    if cu_seqlens is not None:
        _is_tensor("cu_seqlens", cu_seqlens)
        if B != 1:
            raise ValueError(f"with cu_seqlens the batch size must be 1 (flatten the sequences), got B = {B}")
        seqlens = seqlens_values(cu_seqlens, cu_seqlens_cpu, T, read_seqlens)
        N = cu_seqlens.shape[0] - 1
    elif cu_seqlens_cpu is not None:
        raise ValueError("cu_seqlens_cpu was given without cu_seqlens")

    if initial_state is not None:
        _is_tensor("initial_state", initial_state)
        layout = "[N, HV, V, K] (state_v_first)" if state_v_first else "[N, HV, K, V]"
        _shape("initial_state", initial_state, (N, HV, V, K) if state_v_first else (N, HV, K, V), layout)
        _dtype("initial_state", initial_state, (PARAM_DTYPE,), "states")

    named = {**{n: tensors[n] for n in inputs}, "initial_state": initial_state, "cu_seqlens": cu_seqlens}
    for name, x in named.items():
        if x is not None and not x.is_contiguous():
            raise ValueError(f"{name} is not contiguous (strides {list(x.stride())}); pass {name}.contiguous()")
    for name, x in named.items():
        if x is not None and x.device != x0.device:
            raise ValueError(f"{name} is on {x.device} but {ref} is on {x0.device}; all tensors must share one device")
    if x0.device.type != device_type:
        where = "kdagen's kernels run on CUDA devices" if device_type == "cuda" else "the emulator runs on the CPU"
        raise ValueError(f"{ref} is on {x0.device}; {where}")
    return Dims(B, T, H, HV, K, V, N), seqlens, resolved


def seqlens_values(cu_seqlens: torch.Tensor, cu_seqlens_cpu, T: int, read_seqlens: bool) -> list[int] | None:
    """The checks of cu_seqlens (a tensor) and cu_seqlens_cpu that read more than their metadata, as `validate`
    makes them: the host values of the offsets (see `validate` on read_seqlens and cu_seqlens_cpu), or None where
    they are not read. A call whose metadata passed `validate` before runs only these again."""
    if not read_seqlens or cu_seqlens.device.type == "meta":      # no values to read (the device check refuses
        check_seqlens_format("cu_seqlens", cu_seqlens)             # a meta tensor)
        return None
    if cu_seqlens_cpu is None:
        return host_seqlens("cu_seqlens", cu_seqlens, T)
    check_seqlens_format("cu_seqlens", cu_seqlens)
    _is_tensor("cu_seqlens_cpu", cu_seqlens_cpu)
    if cu_seqlens_cpu.device.type != "cpu":
        raise ValueError(f"cu_seqlens_cpu must be on the CPU, got {cu_seqlens_cpu.device}")
    if cu_seqlens_cpu.shape != cu_seqlens.shape:
        raise ValueError(f"cu_seqlens_cpu has shape {list(cu_seqlens_cpu.shape)} but cu_seqlens has "
                         f"{list(cu_seqlens.shape)}; they must hold the same offsets")
    return check_seqlens("cu_seqlens_cpu", cu_seqlens_cpu, T)
