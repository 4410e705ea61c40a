"""`kdagen compile`: compile every kernel module a configuration uses, and time cold compiles and cached loads.

A configuration is the part of a call that picks kernels: the op, its options (FLA's names and
defaults, unlike `kdagen emit`/`plan`, which start from the shipped default configurations), the head dim, the GVA ratio, varlen, and the dtypes of g and beta. The same arguments, as text, make up
KDAGEN_PRECOMPILE (configurations separated by ';'), which `import kdagen` compiles with a progress bar.

Which modules a configuration needs is for the kernel code to say: kdagen.ops.forward and
kdagen.ops.backward each expose `kernel_sources(call, dims, dtypes, arch) -> [(uri, cuda_source), ...]`,
the exact arguments they pass to runtime.load_module for such a call on that arch.
"""
from __future__ import annotations

import argparse
import importlib
import shlex
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

EXAMPLE = """examples:
  kdagen compile --op kda --head-dim 128 --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel \\
                 --use-beta-sigmoid-in-kernel --arch sm_90a -j 4
  kdagen compile --op gdn --head-dim 64 --gva 2 --varlen        # arch from the GPU (or KDAGEN_ARCH)
  KDAGEN_PRECOMPILE="--op kda --head-dim 128; --op gdn --head-dim 128" python -c "import kdagen"

  Cold compile: NVRTC from source (the cache entry is rewritten). Cached load: reading and checking the
  cache entry, what a new process pays before the driver loads the image."""

PROVIDERS = ("kdagen.ops.forward", "kdagen.ops.backward")
DTYPES = {"bf16": "bfloat16", "f32": "float32"}


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that make up a configuration (shared by the CLI and KDAGEN_PRECOMPILE)."""
    p.add_argument("--op", choices=("kda", "gdn"), required=True, help="chunk_kda or chunk_gated_delta_rule")
    p.add_argument("--head-dim", type=int, required=True, help="K = V (64 or 128)")
    p.add_argument("--gva", type=int, default=1, help="value heads per q/k head, HV / H (default 1)")
    p.add_argument("--varlen", action="store_true", help="variable-length batch (cu_seqlens)")
    p.add_argument("--g-dtype", choices=sorted(DTYPES), default="bf16", help="dtype of g (default bf16)")
    p.add_argument("--beta-dtype", choices=sorted(DTYPES), default="bf16", help="dtype of beta (default bf16)")
    for flag in ("use-qk-l2norm-in-kernel", "use-gate-in-kernel", "use-beta-sigmoid-in-kernel",
                 "allow-neg-eigval", "state-v-first", "safe-gate"):
        p.add_argument(f"--{flag}", action="store_true", help=f"the option {flag.replace('-', '_')}")
    p.add_argument("--lower-bound", type=float, default=None, help="KDA's lower_bound (sigmoid gate form)")
    p.add_argument("--no-A-log", action="store_true", help="in-kernel gate without A_log (KDA with --lower-bound)")
    p.add_argument("--no-dt-bias", action="store_true", help="in-kernel gate without dt_bias")


@dataclass(frozen=True)
class Config:
    """A parsed configuration: the Call it stands for, its sizes (B, T, N are placeholders: kernels are not
    specialised on them) and the dtypes of g and beta."""
    call: object
    dims: object
    dtypes: dict


def config_from_args(args) -> Config:
    """Builds the Call through the public ops' own rules, with meta tensors standing in for optional inputs."""
    import torch

    from ..ops.api import make_call
    from ..ops.validate import Dims
    K, G, H = args.head_dim, args.gva, 1
    HV = H * G
    meta = {"device": "meta", "dtype": torch.float32}
    options = {"output_final_state": True, "initial_state": torch.empty(1, HV, K, K, **meta),
               "state_v_first": args.state_v_first, "use_qk_l2norm_in_kernel": args.use_qk_l2norm_in_kernel,
               "use_beta_sigmoid_in_kernel": args.use_beta_sigmoid_in_kernel,
               "allow_neg_eigval": args.allow_neg_eigval, "use_gate_in_kernel": args.use_gate_in_kernel}
    if args.lower_bound is not None:
        options["lower_bound"] = args.lower_bound
    if args.safe_gate:
        options["safe_gate"] = True
    if args.use_gate_in_kernel:
        if not args.no_A_log:
            options["A_log"] = torch.empty(HV, **meta)
        if not args.no_dt_bias:
            options["dt_bias"] = torch.empty(HV * K if args.op == "kda" else HV, **meta)
    if args.varlen:
        options["cu_seqlens"] = torch.empty(2, device="meta", dtype=torch.int64)
    call = make_call(args.op, **options)
    dtypes = {"g": getattr(torch, DTYPES[args.g_dtype]), "beta": getattr(torch, DTYPES[args.beta_dtype])}
    return Config(call, Dims(B=1, T=0, H=H, HV=HV, K=K, V=K, N=1), dtypes)


class _RaisingParser(argparse.ArgumentParser):
    """Reports a bad configuration as a ValueError (argparse would print usage and exit)."""

    def error(self, message):
        raise ValueError(message)


def parse_config(text: str) -> Config:
    """One configuration written as `kdagen compile` arguments, e.g. "--op kda --head-dim 128"."""
    p = _RaisingParser(prog="configuration", add_help=False, exit_on_error=False)
    add_config_arguments(p)
    try:
        return config_from_args(p.parse_args(shlex.split(text)))
    except (argparse.ArgumentError, TypeError, ValueError) as e:
        raise ValueError(f"configuration {text!r}: {e}") from None


def kernel_sources(config: Config, arch: str) -> list[tuple[str, str]]:
    """(uri, source) of every module the configuration's calls load on `arch`, from the forward and backward code."""
    found = []
    for name in PROVIDERS:
        try:
            provider = getattr(importlib.import_module(name), "kernel_sources", None)
        except ImportError as e:
            raise NotImplementedError(f"{name} is not available ({e}); it says which modules to compile") from e
        if provider is None:
            raise NotImplementedError(f"{name} has no kernel_sources(call, dims, dtypes, arch); "
                                      f"it cannot say which modules to compile")
        found += provider(config.call, config.dims, config.dtypes, arch=arch)
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Timing:
    uri: str
    compile_s: float
    load_s: float
    bytes: int


def compile_modules(sources: list[tuple[str, str]], arch: str, kind: str, jobs: int, progress=None,
                    cold: bool = True) -> list[Timing]:
    """Compile (cold: always; else only on a cache miss) in `jobs` threads (NVRTC releases the GIL), then time a
    cached load of each; progress.advance(uri) after each compile."""
    from ..runtime import fetch_image

    def build(uri: str, source: str) -> tuple[str, float]:
        start = time.perf_counter()
        fetch_image(uri, source, arch, kind, rebuild=cold)
        return uri, time.perf_counter() - start

    compile_s = {}
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for future in as_completed([pool.submit(build, uri, src) for uri, src in sources]):
            uri, seconds = future.result()
            compile_s[uri] = seconds
            if progress is not None:
                progress.advance(uri)
    timings = []
    for uri, source in sources:
        start = time.perf_counter()
        image, how, path = fetch_image(uri, source, arch, kind)
        if how != "disk":
            raise RuntimeError(f"{uri}: compiled, but {path} could not be read back from the cache")
        timings.append(Timing(uri, compile_s[uri], time.perf_counter() - start, len(image)))
    return timings


def _target(arch_arg: str | None) -> tuple[str, str]:
    from ..runtime import detect_arch, normalize_arch
    from ..runtime.loader import target_kind
    arch = normalize_arch(arch_arg, "--arch") if arch_arg else detect_arch()
    return arch, target_kind(arch)


def precompile(texts: list[str], stream=None) -> list[Timing]:
    """KDAGEN_PRECOMPILE: compile what is missing from the cache for the detected arch, with a progress bar."""
    from ..runtime.progress import Progress
    configs = [parse_config(text) for text in texts]
    arch, kind = _target(None)
    sources = list(dict.fromkeys(s for config in configs for s in kernel_sources(config, arch)))
    bar = Progress(len(sources), f"kdagen: KDAGEN_PRECOMPILE for {arch}", stream)
    return compile_modules(sources, arch, kind, jobs=len(sources), progress=bar, cold=False)


def run(args) -> int:
    from ..runtime.progress import Progress
    config = config_from_args(args)
    arch, kind = _target(args.arch)
    sources = kernel_sources(config, arch)
    bar = Progress(len(sources), f"compiling for {arch}")
    timings = compile_modules(sources, arch, kind, args.jobs, bar)
    width = max(len(t.uri) for t in timings)
    print(f"{'module':<{width}}  {'cold compile':>12}  {'cached load':>11}  {'image':>9}")
    for t in timings:
        print(f"{t.uri:<{width}}  {t.compile_s:>11.2f}s  {t.load_s * 1e3:>9.2f}ms  {t.bytes / 1024:>6.0f} KiB")
    print(f"{len(timings)} module(s), {kind} for {arch}; total cold compile "
          f"{sum(t.compile_s for t in timings):.2f}s with {args.jobs} job(s)")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("compile", help="compile a configuration's kernels; print cold and cached times",
                              description=__doc__, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p)
    p.add_argument("--arch", default=None, help="sm_90a or sm_80 (default: the GPU's, or KDAGEN_ARCH)")
    p.add_argument("-j", "--jobs", type=int, default=4, help="parallel NVRTC compiles (default 4)")
    p.set_defaults(func=run)
