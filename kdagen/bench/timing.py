"""Timing one call, summarising many, and measuring the machine's ceilings in the same run.

A timer measures `timed(state)` alone; whatever builds `state` (e.g. the forward before a timed
backward) runs outside the measured span. The CUDA timer writes a scratch buffer several times the
L2 size before each call, so no call finds its inputs in cache from the one before.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

MiB = 1 << 20


class CudaTimer:
    """CUDA events on the current stream around one call, after an L2 flush."""

    description = "CUDA events on the current stream, L2 flushed before each call"

    def __init__(self, device):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 * MiB
        self._scratch = torch.empty(max(4 * l2, 256 * MiB), dtype=torch.int8, device=device)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def measure(self, timed: Callable, state=None) -> float:
        self._scratch.zero_()
        self._start.record()
        timed(state)
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end)


class WallTimer:
    """Host wall clock around one call: for CPU runs of the harness (tests), never for GPU timings."""

    description = "host wall clock (CPU run)"

    def measure(self, timed: Callable, state=None) -> float:
        t0 = time.perf_counter()
        timed(state)
        return 1e3 * (time.perf_counter() - t0)


def sample(timer, prepare: Callable[[int], object], timed: Callable, *, sets: int, warmup: int, iters: int) -> list:
    """`iters` timings (ms) after `warmup` untimed-in-the-result calls, cycling through `sets` input sets."""
    out = []
    for i in range(warmup + iters):
        ms = timer.measure(timed, prepare(i % sets))
        if i >= warmup:
            out.append(ms)
    return out


def summarize(samples) -> dict:
    """Median and spread, the interquartile range relative to the median."""
    xs = sorted(samples)
    med = statistics.median(xs)
    p25, _, p75 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (med, med, med)
    return {"median": med, "p25": p25, "p75": p75, "min": xs[0], "max": xs[-1], "n": len(xs),
            "spread": (p75 - p25) / med if med > 0 else 0.0}


def agreement(summaries: list[dict]) -> dict:
    """Do repeated measurements agree: (max − min median) / mean median within the largest spread?"""
    medians = [s["median"] for s in summaries]
    mean = statistics.fmean(medians)
    rel = (max(medians) - min(medians)) / mean if mean > 0 else 0.0
    allowed = max(s["spread"] for s in summaries)
    return {"rel_diff": rel, "allowed": allowed, "agree": rel <= allowed}


def copy_bandwidth(timer, device, *, nbytes: int, warmup: int = 3, iters: int = 20) -> dict:
    """Device-to-device copy: bytes read plus bytes written per second."""
    src = torch.ones(nbytes, dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    s = summarize(sample(timer, lambda i: None, lambda _: dst.copy_(src), sets=1, warmup=warmup, iters=iters))
    return {"bytes_per_s": 2 * nbytes / (s["median"] * 1e-3), "spread": s["spread"], "nbytes": nbytes}


def matmul_rate(timer, device, *, n: int, warmup: int = 3, iters: int = 20) -> dict:
    """A square bf16 matmul (fp32 accumulate): 2·n³ FLOPs per call."""
    a = torch.randn(n, n, device=device).to(torch.bfloat16)
    b = torch.randn(n, n, device=device).to(torch.bfloat16)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    s = summarize(sample(timer, lambda i: None, lambda _: torch.mm(a, b, out=c), sets=1, warmup=warmup, iters=iters))
    return {"flops_per_s": 2 * n ** 3 / (s["median"] * 1e-3), "spread": s["spread"], "n": n}
