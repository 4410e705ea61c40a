"""The benchmark's CUDA timer on the GPU: it times device work, not the host's launch overhead.

A call that spends 4 ms on the host before queuing 0.1 ms of GPU work must read far below 4 ms
(the queue-ahead spin hides the host time), and a call of known device length must read that
length (as bare events read it). Run: python -m pytest -m gpu tests/gpu/test_bench_timer.py -q
"""
from __future__ import annotations

import time

import pytest
import torch

from kdagen.bench.timing import CudaTimer, peak_bytes, sample, summarize

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_host_time_is_excluded_and_device_time_is_kept():
    timer = CudaTimer("cuda")
    rate = timer._cycles_per_ms

    def slow_host(_):
        time.sleep(0.004)
        torch.cuda._sleep(int(0.1 * rate))

    def long_device(_):
        torch.cuda._sleep(int(2.0 * rate))

    hidden = summarize(sample(timer, lambda i: None, slow_host, sets=1, warmup=3, iters=10))
    assert min(timer.host_ms) >= 4.0
    assert hidden["median"] < 1.0, hidden
    kept = summarize(sample(timer, lambda i: None, long_device, sets=1, warmup=3, iters=10))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    long_device(None)                    # the same work timed with bare events, right after
    end.record()
    end.synchronize()
    assert kept["median"] == pytest.approx(start.elapsed_time(end), rel=0.05), kept


def test_a_call_that_syncs_is_marked_as_waiting():
    timer = CudaTimer("cuda")
    sample(timer, lambda i: None, lambda _: torch.cuda.synchronize(), sets=1, warmup=2, iters=5)
    assert all(timer.waited)
    sample(timer, lambda i: None, lambda _: torch.cuda._sleep(1000), sets=1, warmup=2, iters=5)
    assert not any(timer.waited[2:])


def test_peak_memory_counts_what_the_call_allocates_above_its_inputs():
    held = torch.empty(64 << 20, dtype=torch.int8, device="cuda")          # an input: not counted

    def call(x):
        scratch = torch.empty(32 << 20, dtype=torch.int8, device="cuda")  # freed before the call returns
        return scratch.numel() + x.numel()

    peak = peak_bytes(lambda i: held, call, "cuda")
    assert 32 << 20 <= peak < (32 << 20) + (2 << 20), peak
    assert peak_bytes(lambda i: held, call, "cpu") is None
