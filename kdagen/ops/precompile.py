"""Compiling a configuration's modules ahead of its calls: what `kdagen compile` times and what
KDAGEN_PRECOMPILE runs when kdagen is imported (missing cache entries only, with a progress bar)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    uri: str
    compile_s: float
    load_s: float
    bytes: int


def sources(config) -> list[tuple[str, str]]:
    """(uri, CUDA source) of every module the calls of an arguments.CallConfig load."""
    from .config import kernel_sources
    return kernel_sources(config.config())


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


def target(arch: str | None) -> tuple[str, str]:
    """(arch, image kind) to compile for: the given arch, else the detected one."""
    from ..runtime import detect_arch, normalize_arch
    from ..runtime.loader import target_kind
    arch = normalize_arch(arch, "--arch") if arch else detect_arch()
    return arch, target_kind(arch)


def precompile(texts: list[str], stream=None) -> list[Timing]:
    """KDAGEN_PRECOMPILE: compile what is missing from the cache for the detected arch, with a progress bar."""
    from ..runtime.progress import Progress
    from .arguments import parse_config
    configs = [parse_config(text) for text in texts]
    arch, kind = target(None)
    found = list(dict.fromkeys(s for c in configs for s in sources(c)))
    bar = Progress(len(found), f"kdagen: KDAGEN_PRECOMPILE for {arch}", stream)
    return compile_modules(found, arch, kind, jobs=len(found), progress=bar, cold=False)
