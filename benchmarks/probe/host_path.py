"""The Python part of kdagen's host path, on any machine: `python benchmarks/probe/host_path.py [kda|kda_lb|gdn]`.

Calls `chunk_kda` / `chunk_gated_delta_rule` as a user does, on CPU tensors (the call marked emulated, so the checks
accept the CPU), and runs everything an eager call runs up to the CUDA driver: option resolution, the argument
checks, the custom op (directly where no gradient is asked for, else through the dispatcher and its autograd
formula), the Config and plan lookups, the module lookup (kdagen.runtime.load_module's memo), the allocations, and
every launch through the runtime's Module with its real argument packing. Stubbed: the driver (cupy's launchKernel
and context query, the tensor maps' encoding), the compile (an empty image), the kernels' function handles, the
current stream's handle, the CUDA device index and the device switch. Left out, as they need a GPU: the driver's own
launch cost and the CUDA caching allocator (CPU allocations stand in);
`benchmarks/probe/host_profile.py` measures the whole on a GPU. Prints µs per call (the median of REPEATS means
of CALLS calls) of an inference forward (no grad), a training forward (inputs require grad) and its backward
alone, then the top of a cProfile of each. Shape: B=1 T=256 H=4 D=128.
"""
import contextlib
import cProfile
import functools
import pstats
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import kdagen  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import config, run  # noqa: E402
from kdagen.runtime import launch, loader, tensormap  # noqa: E402

CALLS, REPEATS = 200, 7
CUDA_0 = torch.device("cuda", 0)


class Driver:
    """cupy.cuda.driver as the launches use it, doing nothing."""
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    @staticmethod
    def ctxGetCurrent():
        return 1

    @staticmethod
    def launchKernel(*args):
        pass

    @staticmethod
    def funcSetAttribute(*args):
        pass


def stub_the_gpu() -> None:
    """Everything below the CUDA driver's calls runs as on a GPU; the calls themselves do nothing."""
    launch._driver = lambda: Driver
    launch._raw_stream = lambda index: 0
    launch.on_device = lambda index: contextlib.nullcontext()    # a device switch (none once the context is current)
    tensormap._encode = lambda layout: tensormap.TensorMap(bytes(tensormap.TENSOR_MAP_BYTES))   # the driver's encoding
    launch._CONTEXTS[0] = Driver.ctxGetCurrent()          # device 0's context is this thread's current one
    launch.Module.function = lambda self, name, device_index: types.SimpleNamespace(ptr=0)
    loader.fetch_image = lambda uri, source, arch, kind, options=(): (b"", "built", None)
    torch.cuda.current_device = lambda: 0
    # the emulated call's loader: the runtime's, as for device 0 (its memo keyed as the ops key it)
    config.load_emulated = lambda config_, device, direction: config.load(config_, CUDA_0, direction)
    run.run = functools.partial(run.run, emulate=True)   # what chunk_kda calls: CPU tensors pass the checks


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
    stub_the_gpu()
    variant = VARIANTS[key]
    op = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
    x = make_set(variant, Shape(1, 256, 4, 128), device="cpu", seed=0).inputs
    params = {n: x[n] for n in ("A_log", "dt_bias", "initial_state")}
    given = [x[n] for n in ("q", "k", "v", "g", "beta")]
    options = {**params, **variant.call_kwargs()}
    leaves = [*given, *params.values()]

    def forward():
        return op(*given, **options)

    def inference():
        with torch.no_grad():
            forward()

    def training():
        forward()

    with torch.no_grad():
        o, ht = forward()
    for t in leaves:
        t.requires_grad_()
    do, dht = torch.ones_like(o), torch.ones_like(ht)

    def backward():
        o, ht = forward()
        t0 = time.perf_counter()
        torch.autograd.grad((o, ht), leaves, (do, dht))
        return time.perf_counter() - t0

    cases = (("forward, no grad", inference), ("forward, grad", training), ("backward", backward))
    for name, fn in cases:
        print(f"{key} {name}: {per_call_us(fn):.1f} µs per call (Python host path, driver stubbed)")
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
