"""`kdagen compile`: compile every kernel module a configuration uses, and time cold compiles and cached loads.

A configuration is the part of a call that picks kernels: the op, its options (FLA's names and defaults,
the same flags as `kdagen emit`/`plan`/`inspect`), the head dim, the GVA ratio, varlen, the dtypes of g and
beta, and whether the call needs gradients (--inference: forward only). The same arguments, as text, make
up KDAGEN_PRECOMPILE (configurations separated by ';'), which `import kdagen` compiles with a progress bar.
Which modules a configuration needs is what kdagen.ops.config.kernel_sources says: the exact modules the
ops load for such a call on that arch. The family can depend on the call's (sequence, head) pairs (--pairs: a
training call with at least 16 runs wgmma64 on sm_90a, an inference call with few may too), so compile each class
of call that will run (with KDAGEN_DISABLE_JIT=1 a module left out is an error).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

EXAMPLE = """examples:
  kdagen compile --op kda --head-dim 128 --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel \\
                 --use-beta-sigmoid-in-kernel --arch sm_90a -j 4
  kdagen compile --op gdn --head-dim 64 --gva 2 --varlen        # arch from the GPU (or KDAGEN_ARCH)
  kdagen compile --recurrence my_gate.py:my_gate --head-dim 64 --arch sm_90a
  KDAGEN_PRECOMPILE="--op kda --head-dim 128; --op gdn --head-dim 128" python -c "import kdagen"

  Cold compile: NVRTC from source (the cache entry is rewritten), each unit's kernels in parallel threads
  (--split-compile) and up to -j units side by side. Cached load: reading and checking the cache entry, what a
  new process pays before the driver loads the image."""


def run(args) -> int:
    from ..ops.arguments import config_from_args
    from ..ops.precompile import compile_modules, sources, target
    from ..runtime.nvrtc import load_compiler
    from ..runtime.progress import Progress
    config = config_from_args(args)
    arch, kind = target(args.arch)
    config = dataclasses.replace(config, arch=arch)
    found = sources(config)
    start = time.perf_counter()
    loaded = load_compiler(arch)
    bar = Progress(len(found), f"compiling for {arch}")
    timings = compile_modules(found, arch, kind, args.jobs, bar)
    wall = time.perf_counter() - start
    width = max(len(t.uri) for t in timings)
    print(f"{'module':<{width}}  {'cold compile':>12}  {'cached load':>11}  {'image':>9}")
    for t in timings:
        print(f"{t.uri:<{width}}  {t.compile_s:>11.2f}s  {t.load_s * 1e3:>9.2f}ms  {t.bytes / 1024:>6.0f} KiB")
    print(f"{len(timings)} module(s), {kind} for {arch}; total cold compile "
          f"{sum(t.compile_s for t in timings):.2f}s with {args.jobs} job(s); NVRTC loaded in {loaded:.2f}s first (what "
          f"a process's first compile also pays); {wall:.2f}s from start to end")
    return 0


def positive_int(text: str) -> int:
    """-j: a count of threads, so at least 1 (argparse reports anything else as a usage error)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def register(subparsers) -> None:
    from . import configuration_parser
    p = configuration_parser(subparsers, "compile", "compile a configuration's kernels; print cold and cached times",
                             __doc__, EXAMPLE, run)
    p.add_argument("-j", "--jobs", type=positive_int, default=4, help="parallel NVRTC compiles (default 4)")
