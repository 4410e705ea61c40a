"""Arch detection, NVRTC compilation, the on-disk cubin cache and launches on torch's stream.

The contract the ops code against:
- `detect_arch(device=None) -> "sm_90a" | "sm_80"` (KDAGEN_ARCH overrides);
- `compile_cubin(source, name, arch, options=()) -> bytes`;
- `load_module(uri, source, arch=None, *, options=(), device=None) -> Module`, memoised per process and
  cached on disk (a GPU that cannot run the arch's cubin gets PTX, compiled by the driver);
- `load_kernel_modules(units, arch, *, device=None) -> KernelModules`: one module per (kernel, uri, source),
  compiled side by side, behind one Module's interface (a kernel's launches find its module by its name);
- `Module.launch(kernel_name, grid, block, args, smem_bytes=0)` on torch.cuda.current_stream(), with
  args: tensors (device pointers), None (nullptr), int (int32), `i64(x)`, `f32(x)`, `TensorMap`s;
- `encode_tiled(tensor, box, swizzle=0, dims=None, strides=None) -> TensorMap` (bulk tensor copies, sm_90a).
The runtime never renders: it takes CUDA text from kdagen.codegen. Environment: see `env`.
"""
from .arch import UnsupportedArchError, arch_for_capability, detect_arch, image_kind, normalize_arch
from .cache import JitDisabledError
from .env import cache_dir
from .launch import KernelModules, Module, f32, i64
from .loader import fetch_image, forget_modules, load_kernel_modules, load_module, versions
from .nvrtc import CompileError, ToolkitNotFoundError, compile_cubin, compile_source, cuda_include_dir
from .tensormap import TensorMap, encode_tiled

__all__ = [
    "CompileError", "JitDisabledError", "KernelModules", "Module", "TensorMap", "ToolkitNotFoundError",
    "UnsupportedArchError", "arch_for_capability", "cache_dir", "compile_cubin", "compile_source", "cuda_include_dir",
    "detect_arch", "encode_tiled", "f32", "fetch_image", "forget_modules", "i64", "image_kind", "load_kernel_modules",
    "load_module", "normalize_arch", "versions",
]
