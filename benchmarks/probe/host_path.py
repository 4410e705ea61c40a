"""The Python part of kdagen's host path, on any machine: `python benchmarks/probe/host_path.py [kda|kda_lb|gdn]`.

Runs what `chunk_kda` / `chunk_gated_delta_rule` run per eager call — option resolution, the argument checks,
the custom op kdagen::recurrence_forward through the dispatcher and its autograd formula, the plan lookup,
workspace allocation and argument packing of every launch — and the backward through torch.autograd, on CPU
tensors (the call marked emulated, so the checks accept the CPU) with the launches themselves stubbed out.
Prints µs per call (the median of REPEATS means of CALLS calls) of an inference forward (no grad), a training
forward (inputs require grad) and its backward alone, then the top of a cProfile of each. It leaves out what
needs a GPU (CUDA allocations, driver launches, context switches); `benchmarks/probe/device_probe.py` and the
GPU run's host-time table (`kdagen bench`) have the whole. Shape: B=1 T=256 H=4 D=128.
"""
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import config  # noqa: E402
from kdagen.ops.api import call_params, resolve, run_arguments  # noqa: E402
from kdagen.ops.run import run  # noqa: E402

CALLS, REPEATS = 200, 7


class NoLaunch:
    def launch(self, *args, **kwargs):
        pass


def stubbed(config, device, direction):
    return NoLaunch()


def per_call_us(fn, calls: int = CALLS, repeats: int = REPEATS) -> float:
    """Median over repeats of the mean time of `calls` calls of fn() (µs); fn returns the seconds to count, or
    None to count the whole call."""
    fn()
    means = []
    for _ in range(repeats):
        spent = 0.0
        for _ in range(calls):
            t0 = time.perf_counter()
            counted = fn()
            spent += time.perf_counter() - t0 if counted is None else counted
        means.append(1e6 * spent / calls)
    return statistics.median(means)


def main(key: str = "kda") -> None:
    config.load_emulated = stubbed                      # the emulated call's loader: launches do nothing
    variant = VARIANTS[key]
    x = make_set(variant, Shape(1, 256, 4, 128), device="cpu", seed=0).inputs
    params = {n: x[n] for n in ("A_log", "dt_bias", "initial_state")}
    given = {n: x[n] for n in ("q", "k", "v", "g", "beta")}
    options = call_params(variant.op, **params, **variant.call_kwargs())
    leaves = [*given.values(), *params.values()]

    def forward():
        spec, tensors, scalars, kw = run_arguments(resolve(variant.op, options), given)   # as chunk_kda does
        return run(spec, tensors, scalars, emulate=True, **kw)

    def inference():
        with torch.no_grad():
            forward()

    def training():
        forward()

    o, ht = forward()
    do, dht = torch.ones_like(o), torch.ones_like(ht)

    def backward():
        o, ht = forward()
        t0 = time.perf_counter()
        torch.autograd.grad((o, ht), leaves, (do, dht))
        return time.perf_counter() - t0

    cases = (("forward, no grad", inference), ("forward, grad", training), ("backward", backward))
    for name, fn in cases:
        print(f"{key} {name}: {per_call_us(fn):.1f} µs per call (Python host path, no launches)")
    graphs = [forward() for _ in range(50)]               # the backward's profile holds no forward
    profiled = (("forward, no grad", inference), ("forward, grad", training),
                ("backward", lambda: torch.autograd.grad(graphs.pop(), leaves, (do, dht))))
    for name, fn in profiled:
        profile = cProfile.Profile()
        profile.runcall(lambda: [fn() for _ in range(50)])
        print(f"--- {name}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main(*sys.argv[1:2])
