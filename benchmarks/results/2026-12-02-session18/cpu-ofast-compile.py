"""Session 18, on the 2-core CPU machine (no GPU): the KDA lb inference forward unit compiled by NVRTC for sm_90a,
as built and under NVRTC's --Ofast-compile levels (fresh sources, one process, NVRTC loaded first), then ptxas's
report of each wgmma64 unit at `min`. Run from the repository root: python <this file>."""
import argparse
import dataclasses
import sys
import time
import uuid

sys.path.insert(0, "benchmarks/probe")
from compile_split import LB  # noqa: E402
from kdagen.commands import configuration_parser  # noqa: E402
from kdagen.ops.arguments import config_from_args  # noqa: E402
from kdagen.ops.precompile import sources  # noqa: E402
from kdagen.runtime import nvrtc  # noqa: E402

parser = argparse.ArgumentParser()
configuration_parser(parser.add_subparsers(), "units", "", "", "", None)
config = dataclasses.replace(config_from_args(parser.parse_args(["units", *LB, "--family", "wgmma64"])),
                             arch="sm_90a")
N = nvrtc._nvrtc()


def compiled(src: str, extra: list) -> tuple[float, str]:
    p = N.createProgram(f"// {uuid.uuid4()}\n{src}", "u.cu", [], [])
    start = time.perf_counter()
    N.compileProgram(p, nvrtc.nvrtc_options("sm_90a", "cubin") + ["--ptxas-options=-v", *extra])
    seconds, log = time.perf_counter() - start, N.getProgramLog(p)
    N.destroyProgram(p)
    return seconds, log


units = dict(sources(dataclasses.replace(config, directions=("forward",))))
forward = next(s for u, s in units.items() if u.endswith("_forward"))
compiled(forward, [])
for level in ([], ["--Ofast-compile=min"], ["--Ofast-compile=mid"], ["--Ofast-compile=max"]):
    print("forward unit", level or "as built", f"{compiled(forward, level)[0]:.2f} s", flush=True)
for uri, src in sources(config):
    if uri.endswith(("_forward", "_backward")):
        log = compiled(src, ["--Ofast-compile=min"])[1]
        print(uri, "--Ofast-compile=min:", *[line.strip() for line in log.splitlines()
                                              if "C75" in line or "spill stores" in line], sep="\n  ", flush=True)
