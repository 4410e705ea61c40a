"""Shared-memory layout: byte offsets for a kernel's mbarriers and buffers.

The template carves one byte array at these offsets, so the plan's `smem_bytes` is exactly what the
kernel declares (the nvcc test compares it with ptxas's report). Buffers in one alias group share an
offset (a union); `verify` checks that their lifetimes do not overlap. A buffer's offset is a multiple of
its `align` (1024 for 128-byte swizzled tiles: the swizzle pattern repeats every 8 rows of 128 bytes and is
computed from the shared-memory address), and so is the size of each stage of a swizzled buffer.
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
            buf.offset = off = _round(off, buf.align)
            off = _round(off + buf.bytes)
        elif buf.alias in groups:
            buf.offset = groups[buf.alias]
        else:
            members = [b for b in kernel.buffers if b.alias == buf.alias]
            off = _round(off, max(b.align for b in members))
            groups[buf.alias] = buf.offset = off
            off = _round(off + max(b.bytes for b in members))
    kernel.smem_bytes = off
    kernel.smem_dynamic = off > static_limit
    return kernel
