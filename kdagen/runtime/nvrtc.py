"""CUDA source → cubin (or PTX) through NVRTC, as wrapped by CuPy.

We call NVRTC ourselves instead of cupy.RawModule because CuPy appends its own -arch=sm_90 and has
no way to ask for sm_90a, which wgmma and setmaxnreg need.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import time
from pathlib import Path

from . import env

HEADER = "cuda_bf16.h"


class CompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message carries NVRTC's log."""


class ToolkitNotFoundError(RuntimeError):
    """NVRTC or the CUDA headers are missing."""


def _missing_cupy(e: ImportError) -> ToolkitNotFoundError:
    return ToolkitNotFoundError(f"kdagen compiles and launches kernels with CuPy's NVRTC, which failed to import "
                                f"({e}); install kdagen[cu12] or kdagen[cu13] to match your CUDA driver, e.g. "
                                "pip install 'kdagen[cu13]'")


def _nvrtc():
    try:
        from cupy.cuda import nvrtc
    except ImportError as e:
        raise _missing_cupy(e) from e
    return nvrtc


def cupy_version() -> str:
    try:
        import cupy
    except ImportError as e:
        raise _missing_cupy(e) from e
    return cupy.__version__


def compiler_version() -> str:
    """'nvrtc-13.5', part of every cache key: a new compiler must not reuse old cubins."""
    major, minor = _nvrtc().getVersion()
    return f"nvrtc-{major}.{minor}"


def _with_targets(root: Path) -> list[Path]:
    """A toolkit root's include dirs: flat (root/include) and cross layout (root/targets/<arch>-linux/include)."""
    return [root / "include", *sorted(root.glob("targets/*/include"))]


def candidate_include_dirs() -> list[Path]:
    """Where cuda_bf16.h may be, in order: pip wheels, CUDA_PATH/CUDA_HOME, beside nvcc, /usr/local/cuda."""
    dirs: list[Path] = []
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        dirs += sorted(Path(base).glob("*/include"))
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            dirs += _with_targets(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs += _with_targets(Path(nvcc).resolve().parent.parent)
    dirs += _with_targets(Path("/usr/local/cuda"))
    return dirs


def find_include_dir(candidates: list[Path]) -> Path:
    for d in candidates:
        if (d / HEADER).is_file():
            return d
    searched = "\n  ".join(str(d) for d in candidates) or "(nothing)"
    raise ToolkitNotFoundError(
        f"{HEADER} not found; kernels include it. Install the CUDA headers (pip install "
        f"'cupy-cuda13x[ctk]' or a CUDA toolkit) or set CUDA_PATH. Searched:\n  {searched}")


@functools.cache
def cuda_include_dir() -> Path:
    return find_include_dir(candidate_include_dirs())


# NVRTC's --split-compile (from 12.1) optimises and assembles a unit's kernels in parallel threads (0: one per
# CPU): a unit is a direction's kernels, so a cold compile takes about its largest kernel's time, not their sum
# (benchmarks/NOTES.md, session 15).
SPLIT_COMPILE = (12, 1)


@functools.cache
def split_compile() -> list[str]:
    """The option that compiles a unit's kernels in parallel, where this NVRTC has it."""
    return ["--split-compile=0"] if _nvrtc().getVersion() >= SPLIT_COMPILE else []


def nvrtc_options(arch: str, kind: str, options=()) -> list[str]:
    """sm_90a → --gpu-architecture=sm_90a for a cubin, compute_90a for PTX; a cubin's kernels compiled in parallel."""
    if kind not in ("cubin", "ptx"):
        raise ValueError(f"kind must be 'cubin' or 'ptx', got {kind!r}")
    target = arch if kind == "cubin" else arch.replace("sm_", "compute_")
    parallel = split_compile() if kind == "cubin" else []
    return [f"--gpu-architecture={target}", "--std=c++17", f"-I{cuda_include_dir()}", *parallel, *options]


def compile_source(source: str, name: str, arch: str, kind: str = "cubin", options=()) -> bytes:
    """Compile one translation unit; `name` labels it in NVRTC's messages."""
    nvrtc = _nvrtc()
    opts = nvrtc_options(arch, kind, options)
    if env.verbose() and kind == "cubin":
        opts.append("--ptxas-options=-v")
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            raise CompileError(f"NVRTC failed on {name} for {arch} ({e}):\n{nvrtc.getProgramLog(prog)}") from None
        log = nvrtc.getProgramLog(prog).strip()
        if log:
            env.note(f"NVRTC log for {name} ({arch}):\n{log}")
        return nvrtc.getCUBIN(prog) if kind == "cubin" else nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)


def load_compiler(arch: str) -> float:
    """Seconds to compile an empty kernel: what the first compile of a process pays on top of its own work (NVRTC's
    libraries loaded, on a fresh machine from disk), so that `kdagen compile` times the units alone."""
    start = time.perf_counter()
    compile_source('extern "C" __global__ void kdagen_load() {}', "load.cu", arch)
    return time.perf_counter() - start


def compile_cubin(source: str, name: str, arch: str, options=()) -> bytes:
    return compile_source(source, name, arch, "cubin", options)
