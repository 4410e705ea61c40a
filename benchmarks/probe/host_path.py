"""The Python part of kdagen's host path, on any machine: `python benchmarks/probe/host_path.py [kda|kda_lb|gdn]`.

Runs what `chunk_kda` runs per call before the autograd Function — option resolution, the argument
checks — and then the forward's plan lookup, size evaluation and workspace allocation, on CPU tensors
with the kernel launches stubbed out; prints the time per forward and per backward and the top of a
cProfile. It leaves out what needs a GPU (CUDA allocations, driver launches, context switches); the
GPU run's host-time table (`kdagen bench`) has the whole. Shape: B=1 T=256 H=4 D=128.
"""
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import backward as bw, forward as fw, validate  # noqa: E402
from kdagen.ops.api import call_params, kernel_call, recurrence_inputs, resolve  # noqa: E402


class NoLaunch:
    def launch(self, *args, **kwargs):
        pass


def stubbed(config, device, direction):
    return NoLaunch()


def main(key: str = "kda", calls: int = 200) -> None:
    fw.default_arch = lambda *a, **k: "sm_90a"           # no GPU to ask
    variant = VARIANTS[key]
    x = {n: t.detach() for n, t in make_set(variant, Shape(1, 256, 4, 128), device="cpu", seed=0).inputs.items()}
    params = {n: x[n] for n in ("A_log", "dt_bias", "initial_state")}
    given = {n: x[n] for n in ("q", "k", "v", "g", "beta")}
    options = call_params(variant.op, **params, **variant.call_kwargs())

    def forward():
        call = resolve(variant.op, options)                # as chunk_kda does with its locals()
        spec, tensors, scalars = recurrence_inputs(call, given)
        try:       # every check runs; the last one refuses CPU tensors
            validate.validate(spec, tensors, scalars, initial_state=params["initial_state"])
        except ValueError:
            pass
        kcall, tensors = kernel_call(call, given)
        return fw.forward({**tensors, "initial_state": params["initial_state"], "cu_seqlens": None}, kcall,
                          loader=stubbed)

    o, ht, saved = forward()                              # plans and renders once, outside the timing
    do, dht = o.new_ones(o.shape), ht.new_ones(ht.shape)

    def backward():
        return bw.backward(saved, do, dht, loader=stubbed)

    for name, fn in (("forward", forward), ("backward", backward)):
        fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        print(f"{key} {name}: {1e3 * (time.perf_counter() - t0) / calls:.3f} ms per call (Python host path, no launches)")
        profile = cProfile.Profile()
        profile.runcall(lambda: [fn() for _ in range(50)])
        pstats.Stats(profile).sort_stats("cumulative").print_stats(8)


if __name__ == "__main__":
    main(*sys.argv[1:2])
