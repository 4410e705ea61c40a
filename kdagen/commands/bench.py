"""`kdagen bench`: kdagen and flash-linear-attention side by side, in one process, on identical inputs.

Prints a markdown table (times, ratios, share of the physical floor, accuracy against float64);
--out DIR also writes <date>-<gpu>.json, .md and .png (the PNG needs matplotlib).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

from kdagen.bench import harness, libraries, peer_tuning, plot, report
from kdagen.bench.cases import MODES, VARIANTS, parse_list, parse_shape
from kdagen.bench.timing import CudaTimer

DEFAULTS = harness.Settings()

EXAMPLES = """examples:
  kdagen bench --out benchmarks/results           every default op, shape and mode, both libraries
  kdagen bench --libs fla --ops kda --modes fwd   FLA alone (kdagen's columns read n/a), one op, one mode
  kdagen bench --shapes 1x8192x64x128,1300+547x64x128 --iters 50
  kdagen bench --tune-jobs 10 --out DIR           FLA compiles its autotune candidates in parallel first
  kdagen bench --compare a.json b.json            do two runs agree within the spread they report?
  kdagen bench --render a.json b.json --out DIR   merge partial runs of one GPU and render them again
                                                  (overwrites DIR/<date>-<gpu>.*: adds the PNG to a saved run)

shapes: BxTxHxD, or varlen sequence lengths L1+L2+...xHxD.
ops: kda (chunk_kda, softplus gate), kda_lb (chunk_kda, lower_bound=-5 sigmoid gate),
     gdn (chunk_gated_delta_rule); all with the gate, the q/k L2 norm and the beta sigmoid in the kernel.
"""


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="benchmark kdagen against flash-linear-attention on this GPU",
                              description=__doc__, epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", default=",".join(DEFAULTS.ops), help="comma-separated op variants (default: all)")
    p.add_argument("--modes", default=",".join(DEFAULTS.modes), help="comma-separated modes (default: all)")
    p.add_argument("--shapes", default=None, help=f"comma-separated shapes (default {','.join(s.name for s in DEFAULTS.shapes)})")
    p.add_argument("--libs", default=None,
                   help="kdagen, fla or kdagen,fla. Default: both, where kdagen's columns read n/a (with the reason) "
                        "if its ops are missing, and a missing FLA stops the run")
    for flag, help_text in [("--warmup", "untimed calls before timing"),
                            ("--iters", "timed calls per repeat; the median is kept"),
                            ("--input-sets", "input sets the calls cycle through"),
                            ("--repeats", "repeats per cell, checked for agreement"),
                            ("--chunk", "chunk size of the FLOPs model behind the floor"),
                            ("--seed", "seed of every input tensor")]:
        default = getattr(DEFAULTS, flag[2:].replace("-", "_"))
        p.add_argument(flag, type=int, default=default, help=f"{help_text} (default {default})")
    p.add_argument("--accuracy-shapes", default=None,
                   help="shapes of the float64 accuracy check (default "
                        f"{','.join(s.name for s in DEFAULTS.accuracy_shapes)})")
    p.add_argument("--no-accuracy", action="store_true", help="skip the float64 accuracy check")
    p.add_argument("--tune-jobs", type=int, default=0, metavar="N",
                   help="first let FLA autotune every shape in N parallel processes that compile in parallel "
                        "and use the GPU one at a time (FLA's choices as alone, found in TRITON_CACHE_DIR by the "
                        "timing run); 0 (default): FLA tunes on its first call in the timing run, serially")
    p.add_argument("--tune-only", action="store_true", help="with --tune-jobs: tune, then stop without timing")
    p.add_argument("--out", type=Path, default=None, help="directory for <date>-<gpu>.json/.md/.png")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A.json", "B.json"),
                   help="compare two saved runs cell by cell; runs nothing")
    p.add_argument("--render", nargs="+", type=Path, metavar="RUN.json",
                   help="merge saved runs and print (and with --out write) their report; runs nothing")


def settings_from(args):
    """The run's settings from the arguments; ValueError names the bad one."""
    if args.tune_jobs < 0:
        raise ValueError(f"--tune-jobs must be ≥ 0, got {args.tune_jobs}")
    if args.tune_only and args.tune_jobs == 0:
        raise ValueError("--tune-only needs --tune-jobs N (N ≥ 1)")
    for name in ("warmup", "iters", "input_sets", "repeats", "chunk"):
        minimum = 0 if name == "warmup" else 1
        if getattr(args, name) < minimum:
            raise ValueError(f"--{name.replace('_', '-')} must be ≥ {minimum}, got {getattr(args, name)}")

    def shapes(text, default):
        return default if text is None else tuple(parse_shape(s) for s in text.split(",") if s.strip())

    return harness.Settings(
        ops=parse_list(args.ops, tuple(VARIANTS), "--ops"), modes=parse_list(args.modes, MODES, "--modes"),
        shapes=shapes(args.shapes, DEFAULTS.shapes),
        accuracy_shapes=() if args.no_accuracy else shapes(args.accuracy_shapes, DEFAULTS.accuracy_shapes),
        warmup=args.warmup, iters=args.iters, input_sets=args.input_sets, repeats=args.repeats, chunk=args.chunk,
        seed=args.seed)


def preflight(cuda_available: bool, libs: dict, required: tuple[str, ...]) -> str | None:
    """The one-line reason the benchmark cannot run, or None."""
    if not cuda_available:
        return "no CUDA GPU is visible (torch.cuda.is_available() is False); the benchmark times GPU kernels"
    for name in required:
        if not libs[name].available:
            others = [n for n, lib in libs.items() if n != name and lib.available]
            hint = f"; pass --libs {others[0]} to run {others[0]} alone" if others else ""
            return f"{libs[name].reason}{hint}"
    return None


def gpu_slug(device_name: str) -> str:
    """'NVIDIA H200' -> 'h200': the file-name form of the GPU."""
    words = re.sub(r"\bnvidia\b", "", device_name.lower())
    return re.sub(r"[^a-z0-9]+", "-", words).strip("-") or "gpu"


def output_stem(out: Path, result: dict, unique: bool = True) -> Path:
    """out/<date>-<gpu>; a new run gets -2, -3 … when one of that name is already there."""
    base = f"{result['env']['date']}-{gpu_slug(result['env']['device'])}"
    stem, n = out / base, 1
    while unique and stem.with_suffix(".json").exists():
        n += 1
        stem = out / f"{base}-{n}"
    return stem


def write_outputs(result: dict, stem: Path, markdown: str) -> list[str]:
    """JSON, markdown and (with matplotlib) PNG at stem; returns what it wrote or why not."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text(markdown + "\n")
    written = [str(stem.with_suffix(".json")), str(stem.with_suffix(".md"))]
    reason = plot.unavailable()
    if reason:
        return written + [f"no PNG: {reason}"]
    plot.write_png(result, stem.with_suffix(".png"))
    return written + [str(stem.with_suffix(".png"))]


def _fail(message: str, code: int) -> int:
    """A usage error (2) or a failure (1), on one line."""
    print(f"kdagen bench: {message}", file=sys.stderr)
    return code


def _load(paths) -> list[dict]:
    runs = []
    for path in paths:
        try:
            runs.append(report.check_run(json.loads(Path(path).read_text())))
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read {path}: {e}") from None
    return runs


def run_names(paths) -> tuple[str, str]:
    """Column names for two runs: their file stems, with the folder when the stems are equal."""
    a, b = (Path(p) for p in paths)
    if a.stem != b.stem:
        return a.stem, b.stem
    return f"{a.parent.name}/{a.stem}", f"{b.parent.name}/{b.stem}"


def _compare(paths) -> int:
    a, b = _load(paths)
    print(report.compare_markdown(report.compare(a, b), run_names(paths)))
    return 0


def _render(paths, out: Path | None) -> int:
    result = report.merge(_load(paths))
    md = report.markdown(result)
    print(md)
    if out is not None:
        for line in write_outputs(result, output_stem(out, result, unique=False), md):
            print(line, file=sys.stderr)
    return 0


def measure_and_save(settings, libs: dict, out: Path | None, *, device, timer) -> str:
    """Run the benchmark; with `out`, save the partial JSON after every case, then JSON, md and PNG.

    Progress goes to stderr; returns the markdown report.
    """
    stem = None

    def save_partial(result):
        nonlocal stem
        stem = stem or output_stem(out, result)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1))

    progress = harness.Progress(log=lambda line: print(line, file=sys.stderr, flush=True))
    if out is not None:
        progress.update = save_partial
    result = harness.run(settings, libs, device=device, timer=timer, progress=progress)
    md = report.markdown(result)
    if out is not None:
        for line in write_outputs(result, stem or output_stem(out, result), md):
            print(line, file=sys.stderr)
    return md


def _benchmark(settings, requested: tuple[str, ...] | None, out: Path | None, *, tune_jobs: int = 0,
               tune_only: bool = False) -> int:
    """requested None: both libraries, FLA required (the baseline), kdagen n/a if its ops are missing."""
    libs = libraries.load(requested or libraries.NAMES)
    problem = preflight(torch.cuda.is_available(), libs, (requested or ("fla",)) + (("fla",) if tune_jobs else ()))
    if problem:
        return _fail(problem, 1)
    if tune_jobs:
        peer_tuning.tune(settings.ops, settings.shapes + settings.accuracy_shapes, jobs=tune_jobs,
                         seed=settings.seed, log=lambda line: print(line, file=sys.stderr, flush=True))
        if tune_only:
            return 0
    print(measure_and_save(settings, libs, out, device="cuda", timer=CudaTimer("cuda")))
    return 0


def run(args) -> int:
    try:
        if args.compare or args.render:
            try:
                return _compare(args.compare) if args.compare else _render(args.render, args.out)
            except (KeyError, TypeError) as e:     # a JSON of the right outline whose cases lack a field
                raise ValueError(f"{' '.join(map(str, args.compare or args.render))}: not a kdagen bench run "
                                 f"(no field {e})") from None
        settings = settings_from(args)
        requested = None if args.libs is None else parse_list(args.libs, libraries.NAMES, "--libs")
    except ValueError as e:
        return _fail(str(e), 2)
    return _benchmark(settings, requested, args.out, tune_jobs=args.tune_jobs, tune_only=args.tune_only)


def main(argv=None) -> int:
    """`python benchmarks/run.py ...`: the same command without the kdagen CLI entry."""
    parser = argparse.ArgumentParser(prog="kdagen")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)
