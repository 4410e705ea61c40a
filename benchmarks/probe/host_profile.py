"""Host time per eager call on a GPU: `python benchmarks/probe/host_profile.py [variant ...]` (default: kda kda_lb
gdn; needs CUDA; ≈ 30 s with the kernels in the cache, a minute more to compile them).

At kdagen bench's host-time shape, 4x4096x16x64, per variant: the median µs from the call to its return
(time.perf_counter around the call alone) of an eager forward without grad (`with torch.no_grad()`, as the bench's
fwd mode) and of a forward whose inputs require grad, after a warm-up; the GPU runs behind the host, which
synchronises every SYNC_EVERY calls outside the timed region so the launch queue never fills. Then a cProfile
(tottime) of PROFILED calls without grad, the synchronisations outside it. The counterpart on any machine, with
the driver stubbed: benchmarks/probe/host_path.py.
"""
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import kdagen  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402

SHAPE = Shape(4, 4096, 16, 64)
WARMUP, CALLS, SYNC_EVERY, PROFILED, TOP = 30, 400, 20, 200, 25


def timed_us(call, calls: int) -> list[float]:
    """µs of each of `calls` calls, the host synchronising with the GPU every SYNC_EVERY calls, untimed."""
    times = []
    for i in range(calls):
        if i % SYNC_EVERY == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        times.append(1e6 * (time.perf_counter() - t0))
    torch.cuda.synchronize()
    return times


def profiled(call, calls: int) -> pstats.Stats:
    profile = cProfile.Profile()
    for i in range(calls):
        if i % SYNC_EVERY == 0:
            torch.cuda.synchronize()
        profile.runcall(call)
    torch.cuda.synchronize()
    return pstats.Stats(profile)


def main(keys: list[str]) -> None:
    print(f"kdagen {kdagen.__version__} from {Path(kdagen.__file__).parent}; torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}; shape {SHAPE.B}x{SHAPE.T}x{SHAPE.H}x{SHAPE.D}")
    stats = {}
    for key in keys:
        variant = VARIANTS[key]
        op = getattr(kdagen, variant.function)
        x = make_set(variant, SHAPE, device="cuda", seed=0).inputs
        kwargs = variant.call_kwargs()

        def no_grad():
            with torch.no_grad():
                op(**x, **kwargs)

        def grad():
            op(**x, **kwargs)

        for fn in (no_grad, grad):
            timed_us(fn, WARMUP)                      # compiles and loads the kernels on the first call
        for name, fn in (("forward, no grad", no_grad), ("forward, grad", grad)):
            times = timed_us(fn, CALLS)
            print(f"{key:7s} {name:17s} median {statistics.median(times):7.1f} µs per call  "
                  f"(p10 {statistics.quantiles(times, n=10)[0]:.1f}, p90 {statistics.quantiles(times, n=10)[-1]:.1f})")
        stats[key] = profiled(no_grad, PROFILED)
    for key, s in stats.items():
        print(f"--- {key}: cProfile of {PROFILED} calls without grad, by tottime")
        s.sort_stats("tottime").print_stats(TOP)


if __name__ == "__main__":
    main(sys.argv[1:] or ["kda", "kda_lb", "gdn"])
