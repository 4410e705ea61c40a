"""The serial passes of a training step cut into segments, one by one: `python benchmarks/probe/cut_passes.py
[--ops kda_lb] [--shapes 1x65536x4x128,1x32768x16x128]`.

For each op and shape, one training step (forward with grad, then every gradient) under the planner's cut
(KDAGEN_CUT as set): device time of the C pass (dstate_pass's entry point dstate_starts, from dht = 0, timed
by CUDA events around its launch), of each chain launch (forward, then reverse), and the per-launch averages of
every kernel from torch.profiler (dstate_pass: the backward's ordinary pass). Median of 10 steps after 3 warm-up
steps. --chain-cols sets the chain kernel's state columns per CTA (kdagen.ops.segmented.CHAIN_COLS). Writes
$OUT/cut_passes.md when OUT is set.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backward_timing import step  # noqa: E402
from family_timing import kernel_times  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import segmented  # noqa: E402


def timed(record: dict, label: str, fn):
    """fn wrapped so each call's device time (ms, CUDA events) is appended to record[label]."""
    def wrapper(*args, **kwargs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn(*args, **kwargs)
        b.record()
        b.synchronize()
        record.setdefault(label, []).append(a.elapsed_time(b))
        return out
    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="kda_lb")
    ap.add_argument("--shapes", default="1x65536x4x128,1x32768x16x128")
    ap.add_argument("--chain-cols", type=int, default=segmented.CHAIN_COLS)
    a = ap.parse_args()
    segmented.CHAIN_COLS = a.chain_cols                 # read when the chain is first compiled and at each launch
    print(f"chain: {a.chain_cols} state columns per CTA")
    rows = ["| op | shape | C pass ms | chain ms (fwd, rev) | dstate_pass ms per launch | step kernels (ms per "
            "launch) |",
            "| --- | --- | ---: | --- | ---: | --- |"]
    real_run, real_chain = segmented.run_kernels, segmented.chain
    for key in a.ops.split(","):
        variant = VARIANTS[key]
        for text in a.shapes.split(","):
            shape = Shape(*map(int, text.split("x")))
            s = make_set(variant, shape, device="cuda", seed=0)
            fn = step(variant, s)
            for _ in range(3):
                fn()
            record: dict = {}
            segmented.run_kernels = lambda launches, *rest: (timed(record, "C", real_run) if any(
                launch[0] == "dstate_starts" for launch in launches) else real_run)(launches, *rest)
            calls = []                          # a step's chains: the forward's, then the backward's reverse one
            segmented.chain = lambda *args, **kw: calls.append(1) or timed(
                record, "chain_fwd" if len(calls) % 2 else "chain_rev", real_chain)(*args, **kw)
            for _ in range(10):
                fn()
            segmented.run_kernels, segmented.chain = real_run, real_chain
            kernels = kernel_times(fn, grad=True)
            c = statistics.median(record.get("C", [float("nan")]))
            chains = [statistics.median(record[k]) for k in ("chain_fwd", "chain_rev") if k in record]
            rows.append(f"| {variant.label} | {shape.name} | {c:.3f} | {', '.join(f'{t:.3f}' for t in chains)} | "
                        f"{kernels.get('dstate_pass', float('nan')):.3f} | "
                        + ", ".join(f"{k} {v:.3f}" for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])
                                    if v > 0.02 and not k.startswith("void")) + " |")
            print(rows[-1], flush=True)
            del s, fn
            torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "cut_passes.md").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
