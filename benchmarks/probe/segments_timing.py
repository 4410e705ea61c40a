"""Sequence parallelism inside one GPU against the uncut call, on the GPU:
`python benchmarks/probe/segments_timing.py [B T H D ...]` (default 1x32768x16x128 and 1x65536x4x128).

For chunk_kda with the bench's lb·σ gate inputs, per shape: device time of the forward (no grad) and of
forward + backward with KDAGEN_SEGMENTS=off and cut into as many segments per sequence as fill the SMs (the
retired `auto` rule: ⌈SMs / (sequence, head) pairs⌉ segments of whole 64-token chunks; CUDA events, median of 5
after a warm-up), o's and the gradients' relative L2 difference between the two, and peak memory.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kdagen  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402


def timed(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(shapes) -> None:
    variant = VARIANTS["kda_lb"]
    print("| shape | segments | fwd ms | fwd+bwd ms | peak GB (fwd+bwd) | o diff | grad diff (max) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for shape in shapes:
        s = make_set(variant, shape, device="cuda", seed=0)
        x = {n: t.detach() for n, t in s.inputs.items()}
        args = [x.pop(n) for n in ("q", "k", "v", "g", "beta")]
        leaves = [t.requires_grad_() for t in args]
        kw = {**variant.call_kwargs(), **x}
        results = {}
        pairs = shape.B * shape.H
        cuts = math.ceil(torch.cuda.get_device_properties(0).multi_processor_count / pairs)
        tokens = math.ceil(shape.T / cuts / 64) * 64
        for setting in ("off", str(tokens)):
            os.environ["KDAGEN_SEGMENTS"] = setting

            def fwd():
                with torch.no_grad():
                    return kdagen.chunk_kda(*args, **kw)

            def train():
                o, ht = kdagen.chunk_kda(*args, **kw)
                grads = torch.autograd.grad(o.float().square().mean() + ht.square().mean(), leaves)
                return o, grads

            t_fwd = timed(fwd)
            torch.cuda.reset_peak_memory_stats()
            t_train = timed(train)
            peak = torch.cuda.max_memory_allocated() / 2 ** 30
            o, grads = train()
            results[setting] = (o, grads)
            if setting != "off":
                o0, g0 = results["off"]
                rel = lambda a, b: ((a.float() - b.float()).norm() / b.float().norm()).item()  # noqa: E731
                diff = f"{rel(o, o0):.2e} | {max(rel(a, b) for a, b in zip(grads, g0)):.2e}"
            else:
                diff = "— | —"
            print(f"| {shape.B}x{shape.T}x{shape.H}x{shape.D} | {setting} | {t_fwd:.3f} | "
                  f"{t_train:.3f} | {peak:.2f} | {diff} |", flush=True)
    os.environ.pop("KDAGEN_SEGMENTS", None)


if __name__ == "__main__":
    dims = list(map(int, sys.argv[1:]))
    shapes = [Shape(*dims[i:i + 4]) for i in range(0, len(dims), 4)] or [Shape(1, 32768, 16, 128),
                                                                         Shape(1, 65536, 4, 128)]
    main(shapes)
