"""Timing one call, summarising many, and measuring the machine's ceilings in the same run.

A timer measures `timed(state)` alone; whatever builds `state` (e.g. the forward before a timed
backward) runs outside the measured span. The CUDA timer writes a scratch buffer several times the
L2 size before each call, so no call finds its inputs in cache from the one before, then keeps the
GPU busy (a spin kernel) while the host queues the call: the events then time the device's work,
not the Python launch overhead of either library, which otherwise leaks in as idle gaps between
kernels and makes repeats disagree. The host's own time per call is kept beside it.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

MiB = 1 << 20


class CudaTimer:
    """CUDA events on the current stream around one call, after an L2 flush and a queue-ahead spin.

    Everything runs on the current device: make `device` the current one."""

    description = ("CUDA events on the current stream, L2 flushed before each call, the GPU kept busy while "
                   "the host queues the call (device time; host launch overhead excluded)")
    MAX_AHEAD_MS = 20.0

    def __init__(self, device):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 * MiB
        self._scratch = torch.empty(max(4 * l2, 256 * MiB), dtype=torch.int8, device=device)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._cycles_per_ms = self._spin_rate()
        self.reset()

    def _spin_rate(self, cycles: int = 20_000_000) -> float:
        """Clock cycles of torch.cuda._sleep per millisecond on this GPU."""
        torch.cuda._sleep(cycles // 10)                      # first launch outside the measurement
        self._start.record()
        torch.cuda._sleep(cycles)
        self._end.record()
        self._end.synchronize()
        return cycles / self._start.elapsed_time(self._end)

    def reset(self) -> None:
        """Start a new series: the spin starts at 1 ms and grows to twice the longest host time seen so far
        (at most MAX_AHEAD_MS), so the warm-up calls size it for the timed ones."""
        self._ahead_ms = 1.0
        self.host_ms = []
        self.waited = []    # per call: did the GPU reach the call before the host had issued it all?

    def measure(self, timed: Callable, state=None) -> float:
        self._scratch.zero_()
        torch.cuda._sleep(int(self._ahead_ms * self._cycles_per_ms))
        self._start.record()
        t0 = time.perf_counter()
        timed(state)
        host_ms = 1e3 * (time.perf_counter() - t0)
        # the spin ended before the host returned: a sync inside the call, or host work longer than the spin;
        # either way the events also timed host work (and host_ms includes any wait for the spin)
        self.waited.append(self._start.query())
        self._end.record()
        self._end.synchronize()
        self.host_ms.append(host_ms)
        self._ahead_ms = min(max(self._ahead_ms, 2 * host_ms), self.MAX_AHEAD_MS)
        return self._start.elapsed_time(self._end)


class WallTimer:
    """Host wall clock around one call: for CPU runs of the harness (tests), never for GPU timings."""

    description = "host wall clock (CPU run)"

    def reset(self) -> None:
        self.host_ms = []
        self.waited = []

    def measure(self, timed: Callable, state=None) -> float:
        t0 = time.perf_counter()
        timed(state)
        ms = 1e3 * (time.perf_counter() - t0)
        self.host_ms.append(ms)
        self.waited.append(False)
        return ms


def sample(timer, prepare: Callable[[int], object], timed: Callable, *, sets: int, warmup: int, iters: int) -> list:
    """`iters` timings (ms) after `warmup` untimed-in-the-result calls, cycling through `sets` input sets."""
    out = []
    timer.reset()
    for i in range(warmup + iters):
        ms = timer.measure(timed, prepare(i % sets))
        if i >= warmup:
            out.append(ms)
    return out


def peak_bytes(prepare: Callable[[int], object], timed: Callable, device) -> int | None:
    """Memory one call allocates above what it is handed (its inputs, and in "bwd" mode the forward's saved
    tensors): the highest allocation during `timed` minus the allocation before it. None off CUDA, where the
    allocator keeps no peak."""
    if torch.device(device).type != "cuda":
        return None
    state = prepare(0)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    timed(state)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


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
