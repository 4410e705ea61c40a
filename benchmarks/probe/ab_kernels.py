"""Kernel device times of one kdagen tree, for an A/B of two trees on one machine: `python
benchmarks/probe/ab_kernels.py TREE [--train] [BxTxHxD ...]` imports kdagen from the checkout (or copy) at TREE and
prints, for the bench's KDA (softplus and lower-bound gates) and GDN inputs, each kdagen kernel's mean device time
(torch.profiler, 20 calls after 5 warm-up; 5 after 3 with --train) of an inference forward, or with --train of a
training step (forward, then every input's gradient). Run it once per tree in its own process, main first and
last to see the machine drift: session 19 copied main beside the checkout (`mkdir -p ab/main && git archive main
kdagen templates pyproject.toml | tar -x -C ab/main`) and timed both trees in one device call
(benchmarks/results/2026-12-02-session19/run3.sh, run4.sh)."""
from __future__ import annotations

import os
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
TREE = os.path.abspath(sys.argv[1])
sys.path.insert(0, TREE)

import torch  # noqa: E402

import kdagen  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402

KERNELS = ("prepare", "recurrence", "dstate", "chunk_bwd", "prepare_bwd", "param_reduce")


def times(step, warmup: int, calls: int) -> dict:
    for _ in range(warmup):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / e.count / 1e3 for e in prof.key_averages()
            if e.device_type == torch.autograd.DeviceType.CUDA and e.count}


def main(args: list[str]) -> None:
    if not kdagen.__file__.startswith(TREE):
        sys.exit(f"kdagen imported from {kdagen.__file__}, not from {TREE}")
    os.environ.update(KDAGEN_FAMILY="wgmma64", KDAGEN_CUT="off")
    train = "--train" in args
    shapes = [Shape(*map(int, a.split("x"))) for a in args if a != "--train"] or [Shape(1, 8192, 64, 128)]
    for key in ("kda", "kda_lb", "gdn"):
        variant = VARIANTS[key]
        fn = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
        for shape in shapes:
            s = make_set(variant, shape, device="cuda", seed=0)
            if train:
                t = times(lambda: s.grads(fn(**s.inputs, **variant.call_kwargs())), 3, 5)
            else:
                x = {n: v.detach() for n, v in s.inputs.items()}
                args_ = [x.pop(n) for n in ("q", "k", "v", "g", "beta")]
                with torch.no_grad():
                    t = times(lambda: fn(*args_, **variant.call_kwargs(), **x), 5, 20)
            print(f"| {sys.argv[1]} | {key} | {shape.name} | "
                  + " | ".join(f"{n} {t[n]:.4f}" for n in KERNELS if n in t) + " |", flush=True)
            s = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[2:])
