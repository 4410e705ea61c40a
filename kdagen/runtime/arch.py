"""Which code a device gets: sm_90a on Hopper (compute capability 9.0), sm_80 everywhere else it can run.

A cubin runs only on its own major version (sm_80 on 8.x, sm_90a on exactly 9.0). Newer majors
(10.x, 12.x) get the sm_80 code as PTX, which the driver compiles for them on load; below 8.0
there are no bf16 tensor cores and kdagen refuses with a clear error.
"""
from __future__ import annotations

import functools
import re

import torch

from . import env

ARCHES = ("sm_90a", "sm_80")
_ALIASES = {"sm_90a": "sm_90a", "90a": "sm_90a", "9.0a": "sm_90a", "compute_90a": "sm_90a",
            "sm_80": "sm_80", "80": "sm_80", "8.0": "sm_80", "compute_80": "sm_80"}


class UnsupportedArchError(RuntimeError):
    """The device cannot run any code kdagen emits, or a requested arch does not exist."""


def normalize_arch(name: str, source: str = "arch") -> str:
    """'sm_90a' / '90a' / '9.0a' → 'sm_90a'; 'sm_80' / '80' / '8.0' → 'sm_80'; `source` names the setting in errors."""
    arch = _ALIASES.get(re.sub(r"\s+", "", str(name)).lower())
    if arch is None:
        raise UnsupportedArchError(f"{source}={name!r}: kdagen emits code for {' and '.join(ARCHES)} only")
    return arch


def arch_for_capability(capability: tuple[int, int]) -> str:
    major, minor = capability
    if (major, minor) == (9, 0):
        return "sm_90a"
    if major >= 8:
        return "sm_80"
    raise UnsupportedArchError(
        f"compute capability {major}.{minor} is not supported: kdagen's kernels need bf16 tensor cores "
        f"(mma.sync m16n8k16), i.e. compute capability 8.0 or newer")


def image_kind(arch: str, capability: tuple[int, int]) -> str:
    """'cubin' where the arch's machine code runs on the device as is, 'ptx' where the driver must JIT it."""
    major, minor = capability
    if arch == "sm_90a":
        if (major, minor) == (9, 0):
            return "cubin"
        raise UnsupportedArchError(f"sm_90a code runs only on compute capability 9.0, not {major}.{minor}; "
                                   f"unset KDAGEN_ARCH or set it to sm_80")
    if arch == "sm_80":
        if major == 8:
            return "cubin"
        if major > 8:
            return "ptx"
        raise UnsupportedArchError(f"sm_80 code cannot run on compute capability {major}.{minor}")
    raise UnsupportedArchError(f"unknown arch {arch!r}; expected one of {ARCHES}")


def device_index(device=None) -> int:
    """Index of a CUDA device given as None (current), int, 'cuda:1' or torch.device."""
    if device is None:
        return torch.cuda.current_device()
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device {device} is not a CUDA device")
    return torch.cuda.current_device() if device.index is None else device.index


@functools.cache
def _capability_of(index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))


def capability(device=None) -> tuple[int, int]:
    if not torch.cuda.is_available():
        raise UnsupportedArchError("no CUDA device is visible; set KDAGEN_ARCH=sm_90a (or sm_80) "
                                   "to compile without a GPU")
    return _capability_of(device_index(device))


def detect_arch(device=None) -> str:
    """The arch to compile for: KDAGEN_ARCH when set, else from the device's compute capability."""
    override = env.arch_override()
    if override is not None:
        return normalize_arch(override, "KDAGEN_ARCH")
    return arch_for_capability(capability(device))
