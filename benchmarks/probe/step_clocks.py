"""Where a token-parallel kernel's time goes, step by step, on the GPU:
`python benchmarks/probe/step_clocks.py [--ops kda_lb,gdn] [--shape 1x8192x64x128] [--kernel prepare]
[--thread 0] [--train]` (the family is the one an inference call of that shape runs, or with --train a training
call, which runs forward and backward so that a backward kernel such as prepare_bwd can be timed; KDAGEN_FAMILY
picks another).

The static counts of ptx_steps.py cannot weigh loops or latency; this probe times them. It renders the unit that
holds the kernel as the runtime does, inserts a clock mark (`clock64()`) at every plan-step comment (`// ---- step
NAME`) of the kernel and one at its end (made by one thread of each CTA, --thread), compiles that copy under its own
URI, runs the call through the ops with it, and prints the mean cycles per step over the first CTAS CTAs. Meaningful for
kernels whose steps are separated by block-wide barriers (the prepare kernels): thread 0's clock then measures
the whole block's step, at the occupancy the real launch has.

--thread picks the thread that marks: for a kernel with roles, one of the role's (128, the first consumer
thread of the wgmma64 recurrence). Marks inside a loop are overwritten each iteration, so a loop's steps are
those of its last iteration (the last chunk: pick a T that fills it); each span is attributed to the step whose
mark opens it, in time order. So the span of the last step before a loop (state_in in the wgmma64 recurrence)
runs to the last iteration's first mark and covers every earlier iteration: it and the total are then the whole
kernel's, and a loop step's share of the total is not meaningful — read the loop steps' cycles. Steps the thread
never reaches are left out.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kdagen  # noqa: E402
from kdagen import runtime  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import config as ops_config  # noqa: E402

CTAS = 8192
STEP = re.compile(r"^\s*// ---- step (\w+) ")


def instrument(source: str, kernel: str, thread: int = 0) -> tuple[str, list[str]]:
    """(the source with clock marks in `kernel`, the step names in mark order; the last mark is "end")."""
    out, steps, inside = [], [], False
    for line in source.splitlines():
        if re.match(rf'extern "C" __global__ void .*\b{kernel}\(', line):
            inside = True
        elif inside and line == "}":                    # the kernel's closing brace
            out.append(f"  kdg_mark({len(steps)});")
            steps.append("end")
            inside = False
        out.append(line)
        if inside and (m := STEP.match(line)):
            out.append(f"  kdg_mark({len(steps)});")
            steps.append(m.group(1))
    marks = len(steps)
    helper = (f"__device__ unsigned long long kdg_step_clock[{CTAS}][{marks}];\n"
              "__device__ __forceinline__ void kdg_mark(int i) {\n"
              "  const unsigned cta = blockIdx.y * gridDim.x + blockIdx.x;\n"
              f"  if (threadIdx.x == {thread} && cta < {CTAS}) kdg_step_clock[cta][i] = clock64();\n"
              "}\n")
    text = "\n".join(out)
    first = text.index('extern "C" __global__')
    return text[:first] + helper + text[first:], steps


def a_shape(s: Shape) -> str:
    return f"{s.B}x{s.T}x{s.H}x{s.D}"


def run(key: str, shape: Shape, kernel: str, thread: int, train: bool = False) -> None:
    variant = VARIANTS[key]
    holder = {}

    def load(config, device, direction, entries=False):
        source = config.source(direction, entries)
        if entries or not re.search(rf'extern "C" __global__ void .*\b{kernel}\(', source):
            return saved(config, device, direction, entries)     # a unit without the kernel runs as it is
        source, steps = instrument(source, kernel, thread)
        plan, _ = config.planned()
        module = runtime.load_module(ops_config.module_uri(plan, direction) + "_clocks", source, config.arch,
                                     device=device)
        holder.update(module=module, steps=steps, uri=plan.uri)
        return module

    s = make_set(variant, shape, device="cuda", seed=0)
    x = {n: t.detach().requires_grad_(train and t.is_floating_point()) for n, t in s.inputs.items()}
    args = [x.pop(n) for n in ("q", "k", "v", "g", "beta")]
    fn = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
    saved, ops_config.load = ops_config.load, load
    try:
        with torch.set_grad_enabled(train):
            for _ in range(3):                          # the last call's clocks are read
                o = fn(*args, **variant.call_kwargs(), **x)[0]
                if train:
                    o.backward(torch.ones_like(o))
        torch.cuda.synchronize()
    finally:
        ops_config.load = saved
    if "module" not in holder:
        sys.exit(f"step_clocks: no unit of this call has a kernel named {kernel!r}"
                 + ("" if train else " (a backward kernel needs --train)"))
    import cupy
    module, steps = holder["module"], holder["steps"]
    index = torch.cuda.current_device()
    import numpy
    clocks = numpy.zeros((CTAS, len(steps)), dtype=numpy.uint64)
    address = module._loaded[index].get_global_var("kdg_step_clock")
    cupy.cuda.runtime.memcpy(clocks.ctypes.data, address, clocks.nbytes, cupy.cuda.runtime.memcpyDeviceToHost)
    clocks = clocks.astype("int64")
    reached = (clocks > 0).any(axis=0)                  # the steps the marking thread reaches
    clocks, steps = clocks[:, reached], [s for s, r in zip(steps, reached) if r]
    clocks = clocks[(clocks > 0).all(axis=1)]           # CTAs that ran every such step (others exited early)
    order = numpy.argsort(clocks, axis=1, kind="stable")  # marks in time order (a loop's last iteration last)
    timed = numpy.take_along_axis(clocks, order, axis=1)
    spans = numpy.zeros(clocks.shape, dtype="int64")
    numpy.put_along_axis(spans, order[:, :-1], timed[:, 1:] - timed[:, :-1], axis=1)
    total = spans.sum(axis=1).mean()
    print(f"{variant.label} {a_shape(shape)} {holder['uri']} / {kernel}: {len(clocks)} CTAs, "
          f"{total:.0f} cycles per CTA (thread {thread}, mark to mark)")
    for name, mean in sorted(zip(steps, spans.mean(axis=0)), key=lambda kv: -kv[1]):
        if name != "end":
            print(f"  {name:16s} {mean:9.0f} {100 * mean / total:5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="kda_lb,kda,gdn")
    ap.add_argument("--shape", default="1x8192x64x128")
    ap.add_argument("--kernel", default="prepare")
    ap.add_argument("--thread", type=int, default=0, help="the thread that marks (default 0)")
    ap.add_argument("--train", action="store_true", help="a training call (forward and backward)")
    a = ap.parse_args()
    shape = Shape(*map(int, a.shape.split("x")))
    for key in a.ops.split(","):
        run(key, shape, a.kernel, a.thread, a.train)


if __name__ == "__main__":
    main()
