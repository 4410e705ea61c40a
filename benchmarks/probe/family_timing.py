"""Forward time of each kernel family on a GPU, and where it goes: `python benchmarks/probe/family_timing.py
[--one-cta] [--cut TOKENS] [BxTxHxD ...]` (default: three bench shapes with 32 or more (sequence, head) pairs;
--one-cta adds wgmma64 with its recurrence in one CTA per (sequence, head), not split over value rows:
wgmma64.forward.SPLIT_VALUE; every row runs uncut (KDAGEN_CUT=off) except those --cut adds: each family with the
inference forward cut into segments of TOKENS tokens on its own kernels, kdagen.ops.segmented).

For the bench's ops and inputs (kdagen.bench) at a few shapes, times kdagen's inference forward (no grad)
with KDAGEN_FAMILY set to each family that serves it, by CUDA events around one call (median of 30 after 5
warm-up calls, L2 not flushed: a quick look, `kdagen bench` is the measurement), then prints each kernel's
device time from torch.profiler. Writes the table to $OUT/family_timing.md when OUT is set.
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kdagen  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import launcher  # noqa: E402
from kdagen.plan.families.wgmma64 import forward as wgmma64_forward  # noqa: E402

SHAPES = [Shape(1, 8192, 64, 128), Shape(8, 4096, 32, 128), Shape(4, 4096, 16, 64)]
FAMILIES = ("mma16", "wgmma64")


def call(variant, s):
    fn = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
    x = {n: t.detach() for n, t in s.inputs.items()}
    args = [x.pop(n) for n in ("q", "k", "v", "g", "beta")]
    kwargs = {**variant.call_kwargs(), **x}
    return lambda: fn(*args, **kwargs)


def time_ms(fn, iters=30, warmup=5, grad=False) -> float:
    with torch.set_grad_enabled(grad):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def kernel_times(fn, grad=False) -> dict:
    with torch.set_grad_enabled(grad), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
            out[e.key] = e.device_time_total / e.count / 1e3
    return out


def planned_with(split: bool) -> None:
    """Plans made from here on split the wgmma64 recurrence over value rows (the default), or not (plans are
    cached per process: the caches are cleared)."""
    wgmma64_forward.SPLIT_VALUE = split
    launcher.forget_plans()


def main() -> None:
    rows = ["| op | shape | family | forward ms | kernels (ms) |", "| --- | --- | --- | ---: | --- |"]
    args = sys.argv[1:]
    cut = int(args[args.index("--cut") + 1]) if "--cut" in args else None
    if cut is not None:
        del args[args.index("--cut"):args.index("--cut") + 2]
    families = [(f, True, None) for f in FAMILIES] + ([("wgmma64", False, None)] if "--one-cta" in args else [])
    families += [(f, True, cut) for f in FAMILIES] if cut is not None else []
    shapes = [Shape(*map(int, a.split("x"))) for a in args if a != "--one-cta"] or SHAPES
    for key in ("kda", "kda_lb", "gdn"):
        variant = VARIANTS[key]
        for shape in shapes:
            s = make_set(variant, shape, device="cuda", seed=0)
            for family, split, tokens in families:
                os.environ["KDAGEN_FAMILY"] = family
                planned_with(split)
                os.environ["KDAGEN_CUT"] = str(tokens) if tokens else "off"
                fn = call(variant, s)
                ms = time_ms(fn)
                kernels = ", ".join(f"{k} {v:.3f}" for k, v in sorted(kernel_times(fn).items()) if v > 0.001)
                name = family + ("" if split else " (one CTA per pair)") + (f" (cut every {tokens})" if tokens else "")
                rows.append(f"| {variant.label} | {shape.name} | {name} | {ms:.3f} | {kernels} |")
                print(rows[-1], flush=True)
            del os.environ["KDAGEN_FAMILY"]
            del s
            torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "family_timing.md").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
