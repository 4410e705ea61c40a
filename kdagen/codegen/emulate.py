"""Run generated kernels on the CPU: the same rendered kernels, compiled for the host with g++ against
an emulation of the CUDA execution model (templates/emulate/) in place of the templates' ptx.cuh files.

Each CUDA thread becomes a std::thread and the fragment layouts of mma/ldmatrix follow the PTX ISA,
so index arithmetic, tail masks, barriers and pipelines are exercised exactly as written; only the
hardware's speed (and its rounding order inside an mma) differs. `build(plan, ...)` (a plan's kernels)
and `build_source(cuda_text, kernels)` (any kernels, e.g. tests of single instructions) return an object
with the runtime's `launch(kernel_name, grid, block, args, smem_bytes=0)`, taking CPU tensors and the
emulator's tensor maps (`encode_tiled`), so the ops (kdagen.ops.forward) and the tests run unchanged
without a GPU. Tests only: it is slow.
"""
from __future__ import annotations

import atexit
import ctypes
import fcntl
import functools
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import torch

from ..paths import templates_dir
from ..plan.model import Plan, param_ctype
from ..runtime import env as runtime_env
from ..runtime.launch import pack_args
from ..runtime.tensormap import TensorMap, TiledLayout, tiled_layout
from .render import header_files, render_kernel

# The emulator's tensor map (templates/emulate/sm90_ptx.cuh, TensorMapEmulated): magic, rank, address,
# dims[5], byte strides[5] (dimension 0's is the element size), box[5], element bytes, swizzle bytes.
_TENSOR_MAP = struct.Struct("<4sIQ5Q5Q5III4x")


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


def _trampoline(name: str, ctypes_: list[str]) -> str:
    """extern "C" kdg_emu_launch_<name>: runs the kernel on a grid, each thread with its own copy of the args."""
    args = ", ".join(f"kdg_emu::arg<{t}>(args[{i}])" for i, t in enumerate(ctypes_))
    return (f'extern "C" void kdg_emu_launch_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned threads, '
            f"unsigned smem, void** args) {{\n"
            f"  kdg_emu::launch(gx, gy, gz, threads, smem, [args] {{ {name}({args}); }});\n}}\n")


def host_headers(header_groups) -> str:
    """Emulated CUDA and the groups' headers, their ptx.cuh emulated: what host code built from the kernels'
    helpers starts with."""
    emu = templates_dir() / "emulate"
    parts = [(emu / "cuda_host.h").read_text()]
    for rel in header_files(header_groups):
        group, name = rel.split("/")
        path = emu / f"{group}_ptx.cuh" if name == "ptx.cuh" else templates_dir() / rel
        parts.append(f"// ===== {path.relative_to(templates_dir())} =====\n" + path.read_text())
    return "\n".join(parts)


def _unit(header_groups, kernels_text: str, signatures: dict[str, list[str]]) -> str:
    """One host translation unit: host_headers, the kernels, a trampoline per kernel."""
    parts = [host_headers(header_groups), kernels_text]
    parts += [_trampoline(name, types) for name, types in signatures.items()]
    return "\n".join(parts)


def host_source(plan: Plan, recurrence, kernels) -> str:
    """The host translation unit of a plan's kernels."""
    text = "\n".join(render_kernel(plan, k, recurrence, entries="all" if k.entries else False) for k in kernels)
    return _unit(plan.headers, text, {name: [param_ctype(p) for p in k.params] for k in kernels
                                      for name in (k.name, *k.entries)})


@functools.cache
def _private_dir() -> Path:
    """This process's own directory (removed at exit), where the shared one cannot be written."""
    work = Path(tempfile.mkdtemp(prefix="kdagen-emulate-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    return work


def _build_dir() -> Path:
    """Where compiled units live: emulate/ under the kernel cache's root (KDAGEN_CACHE_DIR), shared by processes —
    a unit is named by the digest of everything its compile reads, so a name never changes meaning."""
    shared = runtime_env.cache_dir() / "emulate"
    try:
        shared.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=shared, prefix=".probe-").close()
        return shared
    except OSError:
        return _private_dir()


@functools.cache
def _compiler_identity(cxx: str) -> str:
    """The compiler's resolved path and version line: an upgrade in place gives its units new names."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    return f"{Path(cxx).resolve()} {version}"


@functools.cache
def _compile(source: str) -> ctypes.CDLL:
    """The unit compiled for the host, once per content: processes that need the same unit (a multi-rank test's
    ranks and their parent) wait on one file lock while the first compiles it."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise EmulationUnavailable("no host C++ compiler (g++) on PATH")
    include = Path(_cuda_include()).resolve()
    flags = ["-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", f"-I{include}"]
    digest = hashlib.sha256("\0".join([source, _compiler_identity(cxx), (include / "cuda_bf16.h").read_text(),
                                        *flags]).encode()).hexdigest()[:24]
    work = _build_dir()
    lib = work / f"{digest}.so"
    with open(work / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not lib.exists():
            src, tmp = work / f"{digest}.{os.getpid()}.cpp", work / f"{digest}.{os.getpid()}.so"
            src.write_text(source)
            res = subprocess.run([cxx, *flags, str(src), "-o", str(tmp)], capture_output=True, text=True)
            if res.returncode:
                raise RuntimeError(f"host compile of the emulated kernels failed ({src}):\n{res.stderr[-4000:]}")
            src.unlink()
            os.replace(tmp, lib)
    return ctypes.CDLL(str(lib))


def _host_pointer(tensor: torch.Tensor, position: int) -> int:
    if tensor.device.type != "cpu":
        raise ValueError(f"kernel argument {position} is a tensor on {tensor.device}; emulated kernels take CPU "
                         f"tensors")
    return tensor.data_ptr()


class EmulatedModule:
    """The runtime Module's launch contract, on the host."""

    def __init__(self, lib: ctypes.CDLL, arity: dict[str, int]):
        self.lib = lib
        self.arity = arity

    def launch(self, kernel_name: str, grid, block, args, smem_bytes: int = 0) -> None:
        if kernel_name not in self.arity:
            raise KeyError(f"kernel {kernel_name!r} is not in this module: {sorted(self.arity)}")
        if len(args) != self.arity[kernel_name]:
            raise TypeError(f"{kernel_name} takes {self.arity[kernel_name]} arguments, got {len(args)}")
        pointers, _keep = pack_args(args, _host_pointer)
        g = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        b = block if isinstance(block, int) else block[0]
        fn = getattr(self.lib, f"kdg_emu_launch_{kernel_name}")
        fn.argtypes = [ctypes.c_uint] * 5 + [ctypes.c_void_p]
        fn(*g, b, smem_bytes, ctypes.cast(pointers, ctypes.c_void_p))


def encode_tiled(tensor: torch.Tensor, box, swizzle: int = 0, dims=None, strides=None) -> TensorMap:
    """A CPU tensor's tiled tensor map in the emulator's encoding (kdagen.runtime.encode_tiled's arguments
    and checks)."""
    if isinstance(tensor, torch.Tensor) and tensor.device.type != "cpu":
        raise ValueError(f"tensor is on {tensor.device}; emulated kernels read CPU tensors")
    return encode_layout(tiled_layout(tensor, box, swizzle, dims, strides))


def encode_layout(t: TiledLayout) -> TensorMap:
    """The emulator's encoding of a checked layout (kdagen.runtime.tensormap's `_encode` of the driver's)."""
    pad = 5 - len(t.dims)
    return TensorMap(_TENSOR_MAP.pack(b"KDGT", len(t.dims), t.address, *t.dims, *[1] * pad,
                                      t.elem_bytes, *t.strides, *[0] * pad, *t.box, *[1] * pad,
                                      t.elem_bytes, t.swizzle))


def build(plan: Plan, recurrence, kernels="forward") -> EmulatedModule:
    """The emulated module of a direction ("forward", "backward") or of the named kernels."""
    chosen = plan.direction(kernels) if isinstance(kernels, str) else [plan.kernel(n) for n in kernels]
    return EmulatedModule(_compile(host_source(plan, recurrence, chosen)),
                          {name: len(k.params) for k in chosen for name in (k.name, *k.entries)})


def build_source(cuda_text: str, kernels, header_groups=("common", "sm80", "sm90")) -> EmulatedModule:
    """The emulated module of kernels written by hand: `cuda_text` defines them (after the groups' headers),
    `kernels` lists (name, [C parameter types, e.g. "const bf16*", "int", "kdg::TensorMap"])."""
    signatures = {name: list(types) for name, types in kernels}
    return EmulatedModule(_compile(_unit(header_groups, cuda_text, signatures)),
                          {name: len(types) for name, types in signatures.items()})
