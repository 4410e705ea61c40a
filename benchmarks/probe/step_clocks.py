"""Where a token-parallel kernel's time goes, step by step, on the GPU:
`python benchmarks/probe/step_clocks.py [--ops kda_lb,gdn] [--shape 1x8192x64x128] [--family wgmma64]
[--kernel prepare]`.

The static counts of ptx_steps.py cannot weigh loops or latency; this probe times them. It renders the op's
forward unit as the runtime does, inserts a clock mark (thread 0 of each CTA, `clock64()`) at every plan-step
comment (`// ---- step NAME`) of the kernel and one at its end, compiles that copy under its own URI, runs the
forward through the ops with it, and prints the mean cycles per step over the first CTAS CTAs. Meaningful for
kernels whose steps are separated by block-wide barriers (the prepare kernels): thread 0's clock then measures
the whole block's step, at the occupancy the real launch has.
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


def instrument(source: str, kernel: str) -> tuple[str, list[str]]:
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
              f"  if (threadIdx.x == 0 && cta < {CTAS}) kdg_step_clock[cta][i] = clock64();\n"
              "}\n")
    text = "\n".join(out)
    first = text.index('extern "C" __global__')
    return text[:first] + helper + text[first:], steps


def a_shape(s: Shape) -> str:
    return f"{s.B}x{s.T}x{s.H}x{s.D}"


def run(key: str, shape: Shape, kernel: str) -> None:
    variant = VARIANTS[key]
    holder = {}

    def load(config, device, direction):
        source, steps = instrument(config.source(direction), kernel)
        plan, _ = config.planned()
        module = runtime.load_module(ops_config.module_uri(plan, direction) + "_clocks", source, config.arch,
                                     device=device)
        holder.update(module=module, steps=steps, uri=plan.uri)
        return module

    s = make_set(variant, shape, device="cuda", seed=0)
    x = {n: t.detach() for n, t in s.inputs.items()}
    args = [x.pop(n) for n in ("q", "k", "v", "g", "beta")]
    fn = kdagen.chunk_kda if variant.op == "kda" else kdagen.chunk_gated_delta_rule
    saved, ops_config.load = ops_config.load, load
    try:
        with torch.no_grad():
            for _ in range(3):                          # the last call's clocks are read
                fn(*args, **variant.call_kwargs(), **x)
        torch.cuda.synchronize()
    finally:
        ops_config.load = saved
    import cupy
    module, steps = holder["module"], holder["steps"]
    index = torch.cuda.current_device()
    import numpy
    clocks = numpy.zeros((CTAS, len(steps)), dtype=numpy.uint64)
    address = module._loaded[index].get_global_var("kdg_step_clock")
    cupy.cuda.runtime.memcpy(clocks.ctypes.data, address, clocks.nbytes, cupy.cuda.runtime.memcpyDeviceToHost)
    clocks = clocks.astype("int64")
    clocks = clocks[(clocks > 0).all(axis=1)]           # CTAs that ran every step (others exited early)
    spans = clocks[:, 1:] - clocks[:, :-1]
    total = spans.sum(axis=1).mean()
    print(f"{variant.label} {a_shape(shape)} {holder['uri']} / {kernel}: {len(clocks)} CTAs, "
          f"{total:.0f} cycles per CTA (thread 0, mark to mark)")
    for name, mean in sorted(zip(steps[:-1], spans.mean(axis=0)), key=lambda kv: -kv[1]):
        print(f"  {name:16s} {mean:9.0f} {100 * mean / total:5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="kda_lb,kda,gdn")
    ap.add_argument("--shape", default="1x8192x64x128")
    ap.add_argument("--kernel", default="prepare")
    a = ap.parse_args()
    shape = Shape(*map(int, a.shape.split("x")))
    for key in a.ops.split(","):
        run(key, shape, a.kernel)


if __name__ == "__main__":
    main()
