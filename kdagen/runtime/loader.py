"""load_module: a kernel module by URI, from this process's memo, the disk cache, or NVRTC, in that order."""
from __future__ import annotations

import functools
import re
import threading
import time
from pathlib import Path

import torch

from . import cache, env
from .arch import capability, detect_arch, image_kind, normalize_arch
from .launch import KernelModules, Module
from .nvrtc import compile_source, compiler_version, cupy_version

_URI = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_memo: dict[tuple, Module] = {}
_memo_lock = threading.Lock()
_loaded: dict[tuple, Module] = {}    # load_module's arguments (arch given, device by index) -> the memo's Module


@functools.cache
def versions() -> dict:
    """The tools an image depends on besides its source; all of them are in every cache key."""
    from .. import __version__
    return {"kdagen": __version__, "compiler": compiler_version(), "cupy": cupy_version()}


def check_uri(uri: str) -> str:
    if not isinstance(uri, str) or not _URI.match(uri) or ".." in uri:
        raise ValueError(f"uri {uri!r} must be a file-name-safe string (letters, digits, '_', '-', '.')")
    return uri


def target_kind(arch: str, device=None) -> str:
    """cubin, or PTX for a GPU that cannot run the arch's cubin; cubin when compiling without a GPU."""
    return image_kind(arch, capability(device)) if torch.cuda.is_available() else "cubin"


def fetch_image(uri: str, source: str, arch: str, kind: str = "cubin", options=(),
                rebuild: bool = False) -> tuple[bytes, str, Path]:
    """(image, how, cache path) for one translation unit, how: 'disk' (read from the cache), 'built' (compiled
    and stored) or 'memory' (compiled; the cache could not be written, which kdagen.runtime.cache says once).
    `rebuild` times a cold compile; `arch` is one of the cache's arch names (normalize_arch accepts '90a' too)."""
    arch = normalize_arch(arch)
    check_uri(uri)
    name = f"{uri}.cu"
    if env.lineinfo():
        options = (*options, "--generate-line-info")
        try:
            name = str(keep_source(uri, source))
        except OSError as e:          # a cache it cannot write costs the profiler its source, not the call
            env.note(f"KDAGEN_LINEINFO: {uri}'s source not kept ({e}); compiled as {name}")
    key = cache.entry_key(source, arch, kind, options, versions())
    path = cache.Entry(arch, uri, key, kind).path(env.cache_dir())
    image, how = cache.fetch(path, lambda: compile_source(source, name, arch, kind, options), rebuild=rebuild)
    if how == "disk":
        env.note(f"{uri} ({arch}) read from {path}")
    return image, how, path


_OWN_LINES = re.compile(r'^#line \d+ "(?!templates/)([^"]+)"$', re.M)


def keep_source(uri: str, source: str) -> Path:
    """The unit's source written where a profiler finds it: under the name its `#line` directives give the lines
    emitted from Python (the templates' lines name templates/, found from the repository root), else <uri>.cu; the
    unit is compiled under that path."""
    names = set(_OWN_LINES.findall(source)) or {f"{uri}.cu"}
    root = (env.cache_dir() / "source").resolve()
    paths = [(root / name).resolve() for name in sorted(names)]
    for path in paths:
        if not path.is_relative_to(root):
            raise ValueError(f"#line file name {path} lies outside {root}")
        cache.atomic_write(path, source.encode())
    return paths[0]


def load_module(uri: str, source: str, arch: str | None = None, *, options=(), device=None) -> Module:
    """The Module for `source` compiled for `arch` (default: detect_arch(device)), compiled at most once per
    process and once per cache directory. A call naming the arch and a device by index (what the ops pass)
    finds a module it loaded before by its arguments alone, skipping the arch and image-kind resolution."""
    given = (uri, arch, tuple(options), device, source) if arch is not None and _indexed(device) else None
    module = _loaded.get(given) if given is not None else None
    if module is not None:
        return module
    arch = detect_arch(device) if arch is None else normalize_arch(arch)
    kind = target_kind(arch, device)
    memo_key = (check_uri(uri), arch, kind, tuple(options), source)   # str hashes are cached: cheap per call
    module = _memo.get(memo_key)
    if module is None:
        image, _, _ = fetch_image(uri, source, arch, kind, options)
        with _memo_lock:
            module = _memo.setdefault(memo_key, Module(uri, arch, image, kind))
    if given is not None:
        _loaded[given] = module
    return module


_grouped: dict[tuple, KernelModules] = {}


def load_kernel_modules(units: tuple, arch: str, *, device=None) -> KernelModules:
    """The modules of `units` ((kernel name, uri, source) each: one kernel's program) behind one KernelModules,
    memoised like load_module; on a cold start their compiles run side by side, NVRTC releasing the GIL."""
    key = (units, arch, device)
    modules = _grouped.get(key)
    if modules is None:
        loaded: list = [None] * len(units)
        where = device                  # a worker thread's current device is device 0: name the caller's
        if not _indexed(device) and torch.cuda.is_available():
            where = torch.cuda.current_device()

        def load(i: int) -> None:
            try:
                loaded[i] = load_module(units[i][1], units[i][2], arch, device=where)
            except BaseException as e:      # noqa: BLE001 — raised below, in the caller's thread
                loaded[i] = e
        threads: list[threading.Thread] = []
        try:
            for i in range(len(units)):
                threads.append(threading.Thread(target=load, args=(i,), name="kdagen-compile", daemon=True))
                threads[-1].start()
        except RuntimeError:                # no thread starts (the interpreter shutting down): one after another
            for i in range(len(threads) - 1, len(units)):
                load(i)
            threads.pop()
        _join(threads)
        failed = next((e for e in loaded if isinstance(e, BaseException)), None)
        if failed is not None:
            raise failed
        with _memo_lock:
            modules = _grouped.setdefault(key, KernelModules({unit[0]: m for unit, m in zip(units, loaded)}))
    return modules


EXIT_WAIT_S = 60.0                  # the longest an interrupted caller waits for compiles already under way


def _join(threads: list) -> None:
    """Join the compile threads. Interrupted (Ctrl-C), wait a bounded time for those still inside NVRTC before the
    interrupt goes on: a thread still in NVRTC when the interpreter finalises crashes the process at exit, and a
    compile that never ends must not keep it alive (they are daemons)."""
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        deadline = time.monotonic() + EXIT_WAIT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        raise


def _indexed(device) -> bool:
    """A device that names one GPU for good (not None, nor 'cuda' meaning whichever is current)."""
    return isinstance(device, torch.device) and device.index is not None or isinstance(device, int)


def forget_modules() -> None:
    """Drop this process's memo, as a new process would start (tests)."""
    with _memo_lock:
        _memo.clear()
        _loaded.clear()
        _grouped.clear()
