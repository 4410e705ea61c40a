"""Where the time of the cut inference forward (kdagen.ops.segmented) goes on a GPU: `python
benchmarks/probe/cut_host.py [BxTxHxD ...]` (default 1x65536x4x128).

For KDA (both gate forms) and GDN on wgmma64, uncut, cut every 2048 / 4096 / 8192 tokens and where the planner
cuts (KDAGEN_CUT=auto, the default; kdagen.plan.cut): the eager time by
CUDA events (median of 30), the host's issue time per call (perf_counter around a call on an idle GPU), the
device-only time (the call captured in a CUDA graph, replays timed by events), then for the 4096 cut of the
first op the host functions that take the time (cProfile, ten calls). Prints markdown; writes $OUT/cut_host.md.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from family_timing import call, time_ms  # noqa: E402
from kdagen.bench.cases import VARIANTS, Shape  # noqa: E402
from kdagen.bench.inputs import make_set  # noqa: E402


def host_ms(fn, iters=20) -> float:
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def graph_ms(fn, iters=30) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_ms(graph.replay, iters)


def main() -> None:
    os.environ["KDAGEN_FAMILY"] = "wgmma64"
    shapes = [Shape(*map(int, a.split("x"))) for a in sys.argv[1:]] or [Shape(1, 65536, 4, 128)]
    rows = ["| op | shape | segment tokens | eager ms | host issue ms | graph ms |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    profiled = None
    with torch.no_grad():
        for key in ("kda_lb", "kda", "gdn"):
            variant = VARIANTS[key]
            for shape in shapes:
                s = make_set(variant, shape, device="cuda", seed=0)
                for tokens in ("off", "2048", "4096", "8192", "auto"):
                    os.environ["KDAGEN_CUT"] = tokens
                    fn = call(variant, s)
                    try:
                        g = f"{graph_ms(fn):.3f}"
                    except Exception as e:  # noqa: BLE001 - the row says why
                        g = f"capture failed: {type(e).__name__}: {str(e)[:80]}"
                    rows.append(f"| {variant.label} | {shape.name} | {tokens} | {time_ms(fn):.3f} | "
                                f"{host_ms(fn):.3f} | {g} |")
                    print(rows[-1], flush=True)
                    if tokens == "4096" and profiled is None:
                        prof = cProfile.Profile()
                        prof.enable()
                        for _ in range(10):
                            fn()
                        prof.disable()
                        torch.cuda.synchronize()
                        text = io.StringIO()
                        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
                        profiled = text.getvalue()
                del s
                torch.cuda.empty_cache()
    print(profiled)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "cut_host.md").write_text("\n".join(rows) + "\n\n```\n" + (profiled or "") + "```\n")


if __name__ == "__main__":
    main()
