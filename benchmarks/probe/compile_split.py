"""Cold NVRTC compiles of a configuration's units with and without --split-compile, in one process:
`python benchmarks/probe/compile_split.py [kdagen compile flags]` (default: KDA lower-bound gate, 64 pairs, sm_90a).

Each compile gets a fresh comment at the top of its source, so that nothing below kdagen can serve a source it has
seen (a second compile of the same source in a fresh process has read ≈ 0.1 s on the H200's host); one untimed
compile first loads NVRTC. Prints seconds per unit, alternating the two settings, two rounds."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kdagen.commands import configuration_parser  # noqa: E402
from kdagen.ops.arguments import config_from_args  # noqa: E402
from kdagen.ops.precompile import sources  # noqa: E402
from kdagen.runtime import nvrtc  # noqa: E402

LB = ["--op", "kda", "--use-gate-in-kernel", "--lower-bound", "-5", "--use-qk-l2norm-in-kernel",
      "--use-beta-sigmoid-in-kernel", "--pairs", "64", "--arch", "sm_90a"]


def timed(source: str, name: str, split: bool) -> float:
    options = nvrtc.nvrtc_options("sm_90a", "cubin")
    if not split:
        options = [o for o in options if not o.startswith("--split-compile")]
    prog = nvrtc._nvrtc().createProgram(f"// {uuid.uuid4()}\n{source}", name, [], [])
    start = time.perf_counter()
    nvrtc._nvrtc().compileProgram(prog, options)
    seconds = time.perf_counter() - start
    nvrtc._nvrtc().destroyProgram(prog)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    configuration_parser(parser.add_subparsers(), "units", "", "", "", None)
    args = parser.parse_args(["units", *(sys.argv[1:] or LB)])
    config = dataclasses.replace(config_from_args(args), arch="sm_90a")
    units = [(uri, src) for uri, src in sources(config) if not uri.startswith("segment_chain")]
    timed(units[-1][1], "warm-up", False)
    print(f"NVRTC {nvrtc.compiler_version()}, split option {nvrtc.split_compile()}")
    print("| unit | round | plain s | split s |\n| --- | ---: | ---: | ---: |")
    for r in range(2):
        for uri, src in units:
            plain, split = timed(src, uri, False), timed(src, uri, True)
            print(f"| {uri} | {r + 1} | {plain:.2f} | {split:.2f} |", flush=True)


if __name__ == "__main__":
    main()
