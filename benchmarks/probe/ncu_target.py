"""One call for Nsight Compute to profile: `ncu ... python3 benchmarks/probe/ncu_target.py [op] [B T H D] [train]`
runs a warm-up call, then the profiled one (pass --launch-skip to skip the warm-up's kernels); with train = 1 a
training step (forward, then the gradients of every input), else an inference forward."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kdagen  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402


def main(key: str = "kda", B: int = 1, T: int = 4096, H: int = 64, D: int = 128, train: int = 0) -> None:
    variant = VARIANTS[key]
    s = make_set(variant, Shape(B, T, H, D), device="cuda", seed=0)
    fn = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
    if train:
        for _ in range(2):
            s.grads(fn(**s.inputs, **variant.call_kwargs()))
    else:
        x = {n: t.detach() for n, t in s.inputs.items()}
        args = [x.pop(n) for n in ("q", "k", "v", "g", "beta")]
        with torch.no_grad():
            for _ in range(2):
                fn(*args, **variant.call_kwargs(), **x)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "kda", *map(int, sys.argv[2:]))
