"""Forward + backward time of kdagen on a GPU, and where it goes: `python benchmarks/probe/backward_timing.py
[--ops kda_lb,gdn] [--shapes 1x8192x64x128,...] [--dstate-v-slice 32] [--dstate-k-parts 8]`.

For the bench's ops and inputs (kdagen.bench) times one training step's kernels (forward with grad, then the
gradients of every input) by CUDA events (median of 30 after 5 warm-up calls; a quick look, `kdagen bench` is the
measurement), prints each kernel's device time from torch.profiler and the step's peak memory. Writes the table to
$OUT/backward_timing.md when OUT is set. --dstate-v-slice plans dstate_pass with that many value rows per CTA
(kdagen.plan.families.mma16.backward.DSTATE_V_SLICE), --dstate-k-parts with that many warps per 16 value rows
(DSTATE_K_PARTS, at most K/16; recurrence_bwd sums the same parts) to compare the choices.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kdagen  # noqa: E402
from family_timing import kernel_times, time_ms  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.plan.families.mma16 import backward as mma16_backward  # noqa: E402

SHAPES = "1x8192x64x128,1x32768x16x128,4x4096x16x64,1x65536x4x128"


def step(variant, s):
    fn = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
    kwargs = variant.call_kwargs()
    return lambda: s.grads(fn(**s.inputs, **kwargs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="kda_lb,gdn")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--dstate-v-slice", type=int, default=mma16_backward.DSTATE_V_SLICE)
    ap.add_argument("--dstate-k-parts", type=int, default=mma16_backward.DSTATE_K_PARTS)
    a = ap.parse_args()
    mma16_backward.DSTATE_V_SLICE = a.dstate_v_slice       # read when the plan is made, at the first call
    mma16_backward.DSTATE_K_PARTS = a.dstate_k_parts
    print(f"dstate_pass: {a.dstate_v_slice} value rows per CTA, dVn in {a.dstate_k_parts} parts (at most K/16)")
    rows = ["| op | shape | fwd+bwd ms | peak GB | kernels (ms per call) |", "| --- | --- | ---: | ---: | --- |"]
    for key in a.ops.split(","):
        variant = VARIANTS[key]
        for text in a.shapes.split(","):
            shape = Shape(*map(int, text.split("x")))
            s = make_set(variant, shape, device="cuda", seed=0)
            fn = step(variant, s)
            ms = time_ms(fn, grad=True)
            torch.cuda.reset_peak_memory_stats()
            fn()
            peak = torch.cuda.max_memory_allocated() / 1e9
            kernels = ", ".join(f"{k} {v:.3f}" for k, v in sorted(kernel_times(fn, grad=True).items(),
                                                                   key=lambda kv: -kv[1]) if v > 0.005)
            rows.append(f"| {variant.label} | {shape.name} | {ms:.3f} | {peak:.2f} | {kernels} |")
            print(rows[-1], flush=True)
            del s, fn
            torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "backward_timing.md").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
