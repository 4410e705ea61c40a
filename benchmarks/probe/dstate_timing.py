"""Device time of the backward's kernels, chunk 64 (wgmma64: the ones it has) beside chunk 16 (mma16), and of the
forward's recurrence with and without the states a backward reads: `python benchmarks/probe/dstate_timing.py
[BxTxHxD ...]` (default: the two long bench shapes and 1×8192×64×128). On the bench's KDA lower-bound inputs
(uncut), each family's forward runs once keeping its workspaces, then its backward kernels ten times under
torch.profiler; prints each kernel's mean device time and the serial dS chain's µs per chunk step (dstate_pass,
dstate); for wgmma64 also the forward kernels of an inference call and of a call that keeps the workspaces. Writes
$OUT/dstate_timing.md when OUT is set."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

os.environ["KDAGEN_CUT"] = "off"           # the chains as an uncut call runs them
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402
from kdagen.ops import backward as bw  # noqa: E402
from kdagen.ops import forward as fw  # noqa: E402
from kdagen.ops.api import kernel_call, make_call  # noqa: E402
from kdagen.ops.config import load  # noqa: E402
from kdagen.ops.forward import call_config, forward  # noqa: E402

SHAPES = [Shape(1, 65536, 4, 128), Shape(1, 32768, 16, 128), Shape(1, 8192, 64, 128)]
CHAIN = {"wgmma64": "dstate", "mma16": "dstate_pass"}
RUNS = 10


def backward_of(shape: Shape, family: str):
    """A function running `family`'s backward kernels once on fixed inputs (KDA, lower-bound gate)."""
    variant = VARIANTS["kda_lb"]
    s = make_set(variant, shape, device="cuda", seed=0)
    x = {n: t.detach() for n, t in s.inputs.items()}
    call = make_call("kda", initial_state=x["initial_state"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                     **variant.call_kwargs())
    kcall, tensors = kernel_call(call, x, family=family)
    given = {**tensors, "initial_state": x["initial_state"], "cu_seqlens": None}
    if family == "mma16":
        _, _, saved = forward(given, kcall, keep=True)
        return lambda: bw.backward(saved, s.do, s.dht)
    # wgmma64 serves no training call yet: an inference call's plan run directly, keeping what a backward reads
    config = call_config(given, kcall, keep=False)
    plan, recurrence = config.planned()
    fwd, module = (load(config, s.do.device, d) for d in ("forward", "backward"))
    _, _, ws = fw.launch(plan, recurrence, fwd, given, kcall.scalars, keep=True)
    saved = {n: ws[n] for n in plan.saved}
    print("wgmma64 forward kernels, inference:",
          kernel_ms(lambda: fw.launch(plan, recurrence, fwd, given, kcall.scalars, keep=False)),
          "keeping the workspaces:", kernel_ms(lambda: fw.launch(plan, recurrence, fwd, given, kcall.scalars,
                                                                 keep=True)), flush=True)
    return lambda: bw.launch(plan, recurrence, module, given, saved, kcall.scalars, s.do, s.dht)


def kernel_ms(fn) -> dict:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(RUNS):
            fn()
        torch.cuda.synchronize()
    times = {e.key: e.device_time_total / e.count / 1e3 for e in prof.key_averages()
             if e.device_type == torch.autograd.DeviceType.CUDA and e.count}
    return {k: round(v, 3) for k, v in times.items() if v >= 0.005}     # the plan's kernels, not torch's aranges


def main(argv):
    shapes = [Shape(*map(int, a.split("x"))) for a in argv] or SHAPES
    rows = ["| shape | family | chain kernel ms | µs per chunk step | backward kernels (ms) |",
            "| --- | --- | ---: | ---: | --- |"]
    for shape in shapes:
        for family, chunk in (("mma16", 16), ("wgmma64", 64)):
            times = kernel_ms(backward_of(shape, family))
            ms = times[CHAIN[family]]
            others = ", ".join(f"{k} {v:.3f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
            rows.append(f"| {shape.B}x{shape.T}x{shape.H}x{shape.D} | {family} | {ms:.3f} | "
                        f"{1000 * ms / -(-shape.T // chunk):.2f} | {others} |")
            print(rows[-1], flush=True)
            torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "dstate_timing.md").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
