"""Run generated kernels on the CPU: the same rendered kernels, compiled for the host with g++ against
an emulation of the CUDA execution model (templates/emulate/) in place of the templates' ptx.cuh files.

Each CUDA thread becomes a std::thread and the fragment layouts of mma/ldmatrix follow the PTX ISA,
so index arithmetic, tail masks, barriers and pipelines are exercised exactly as written; only the
hardware's speed (and its rounding order inside an mma) differs. `build(...)` returns an object with
the runtime's `launch(kernel_name, grid, block, args, smem_bytes=0)`, taking CPU tensors, so the ops
(kdagen.ops.forward) and the tests can run unchanged without a GPU. Tests only: it is slow.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ..paths import templates_dir
from ..plan.model import CTYPES, Plan
from .render import header_files, render_kernel

_PARAM_CTYPES = {"i32": "int", "i64": "long long", "f32": "float"}


class EmulationUnavailable(RuntimeError):
    """No host C++20 compiler, or no CUDA headers to compile against."""


def _cuda_include() -> Path:
    """A toolkit include directory a host compiler can use (it needs crt/host_defines.h too)."""
    import os
    from ..runtime import cuda_include_dir
    nvcc = shutil.which("nvcc")
    candidates = [Path(p) / "include" for p in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")) if p]
    candidates += [Path(nvcc).resolve().parent.parent / "include"] if nvcc else []
    candidates += [Path("/usr/local/cuda/include")]
    try:
        candidates.append(Path(cuda_include_dir()))
    except Exception:           # no NVRTC wheel: the other candidates may still do
        pass
    for c in candidates:
        if (c / "cuda_bf16.h").is_file() and (c / "crt" / "host_defines.h").is_file():
            return c
    raise EmulationUnavailable(f"no CUDA include directory with cuda_bf16.h and crt/host_defines.h among "
                               f"{[str(c) for c in candidates]}")


def unavailable() -> str | None:
    """Why kernels cannot be emulated here (no g++, no CUDA headers), or None."""
    if shutil.which("g++") is None and shutil.which("c++") is None:
        return "no host C++ compiler (g++) on PATH"
    try:
        _cuda_include()
    except EmulationUnavailable as e:
        return str(e)
    return None


def _param_ctype(p) -> str:
    if p.kind == "ptr":
        return f"{'const ' if p.const else ''}{CTYPES[p.dtype]}*"
    return _PARAM_CTYPES[p.kind]


def _trampoline(kernel) -> str:
    args = ", ".join(f"*static_cast<{_param_ctype(p)}*>(args[{i}])" for i, p in enumerate(kernel.params))
    return (f'extern "C" void kdg_emu_launch_{kernel.name}(unsigned gx, unsigned gy, unsigned gz, unsigned threads, '
            f"unsigned smem, void** args) {{\n"
            f"  kdg_emu::launch(gx, gy, gz, threads, smem, [args] {{ {kernel.name}({args}); }});\n}}\n")


def host_source(plan: Plan, recurrence, kernels) -> str:
    """One host translation unit: emulated CUDA, templates/common (ptx.cuh emulated), the kernels."""
    emu = templates_dir() / "emulate"
    parts = [(emu / "cuda_host.h").read_text()]
    for rel in header_files(plan.headers):
        group, name = rel.split("/")
        path = emu / f"{group}_ptx.cuh" if name == "ptx.cuh" else templates_dir() / rel
        parts.append(f"// ===== {path.relative_to(templates_dir())} =====\n" + path.read_text())
    parts += [render_kernel(plan, k, recurrence) for k in kernels]
    parts += [_trampoline(k) for k in kernels]
    return "\n".join(parts)


@functools.cache
def _build_dir() -> Path:
    """This process's own directory (removed at exit): concurrent test processes never share files."""
    work = Path(tempfile.mkdtemp(prefix="kdagen-emulate-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    return work


@functools.cache
def _compile(source: str) -> ctypes.CDLL:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise EmulationUnavailable("no host C++ compiler (g++) on PATH")
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    src, lib = _build_dir() / f"{digest}.cpp", _build_dir() / f"{digest}.so"
    src.write_text(source)
    cmd = [cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", f"-I{_cuda_include()}",
           str(src), "-o", str(lib)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"host compile of the emulated kernels failed ({src}):\n{res.stderr[-4000:]}")
    return ctypes.CDLL(str(lib))


def _c_arg(a):
    from ..runtime import f32, i64
    if isinstance(a, torch.Tensor):
        if a.device.type != "cpu":
            raise ValueError("emulated kernels take CPU tensors")
        return ctypes.c_void_p(a.data_ptr())
    if a is None:
        return ctypes.c_void_p(None)
    if isinstance(a, i64):
        return ctypes.c_int64(a.value)
    if isinstance(a, f32):
        return ctypes.c_float(a.value)
    if isinstance(a, int) and not isinstance(a, bool):
        return ctypes.c_int32(a)
    raise TypeError(f"unsupported kernel argument {a!r}")


class EmulatedModule:
    """The runtime Module's launch contract, on the host."""

    def __init__(self, lib: ctypes.CDLL, kernels):
        self.lib = lib
        self.kernels = {k.name: k for k in kernels}

    def launch(self, kernel_name: str, grid, block, args, smem_bytes: int = 0) -> None:
        k = self.kernels[kernel_name]
        if len(args) != len(k.params):
            raise TypeError(f"{kernel_name} takes {len(k.params)} arguments, got {len(args)}")
        values = [_c_arg(a) for a in args]
        ptrs = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        g = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        b = block if isinstance(block, int) else block[0]
        fn = getattr(self.lib, f"kdg_emu_launch_{kernel_name}")
        fn.argtypes = [ctypes.c_uint] * 5 + [ctypes.c_void_p]
        fn(*g, b, smem_bytes, ctypes.cast(ptrs, ctypes.c_void_p))


def build(plan: Plan, recurrence, kernels="forward") -> EmulatedModule:
    """The emulated module of a direction ("forward", "backward") or of the named kernels."""
    chosen = plan.direction(kernels) if isinstance(kernels, str) else [plan.kernel(n) for n in kernels]
    return EmulatedModule(_compile(host_source(plan, recurrence, chosen)), chosen)
