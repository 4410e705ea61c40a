"""Shared-memory layout: byte offsets for a kernel's mbarriers and buffers.

The template carves one byte array at these offsets, so the plan's `smem_bytes` is exactly what the
kernel declares (the nvcc test compares it with ptxas's report). Buffers in one alias group share an
offset (a union); `verify` checks that their lifetimes do not overlap.
"""
from __future__ import annotations

from .model import Kernel

ALIGN = 16
MBARRIER_BYTES = 8


def _round(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def assign_offsets(kernel: Kernel, static_limit: int) -> Kernel:
    """Fill in offsets, smem_bytes and smem_dynamic (in place; returns the kernel)."""
    off = 0
    for bar in kernel.barriers:
        if bar.kind == "mbarrier":
            bar.offset = off
            off += MBARRIER_BYTES * bar.stages
    off = _round(off)
    groups: dict[str, int] = {}
    for buf in kernel.buffers:
        if buf.alias is None:
            buf.offset = off
            off = _round(off + buf.bytes)
        elif buf.alias in groups:
            buf.offset = groups[buf.alias]
        else:
            size = max(b.bytes for b in kernel.buffers if b.alias == buf.alias)
            groups[buf.alias] = buf.offset = off
            off = _round(off + size)
    kernel.smem_bytes = off
    kernel.smem_dynamic = off > static_limit
    return kernel
