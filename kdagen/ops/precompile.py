"""Compiling a configuration's modules ahead of its calls: what `kdagen compile` times and what
KDAGEN_PRECOMPILE runs when kdagen is imported (missing cache entries only, with a progress bar)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path


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
    cached load of each (reading and checking its entry); progress.advance(uri) after each compile. A cold
    compile is for the cache, so a cache that cannot take the images fails before compiling."""
    from ..runtime import cache, env, fetch_image, versions
    if cold:
        cache.check_writable(env.cache_dir())
    # Resolved here, before the threads: its first call imports kdagen, which a worker thread would wait for
    # forever while `import kdagen` runs KDAGEN_PRECOMPILE in this one.
    versions()

    def build(uri: str, source: str) -> tuple[str, Path, float]:
        start = time.perf_counter()
        _, _, path = fetch_image(uri, source, arch, kind, rebuild=cold)
        return uri, path, time.perf_counter() - start

    built = {}
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for future in as_completed([pool.submit(build, uri, src) for uri, src in sources]):
            uri, path, seconds = future.result()
            built[uri] = path, seconds
            if progress is not None:
                progress.advance(uri)
    timings = []
    for uri, _ in sources:
        path, compile_s = built[uri]
        start = time.perf_counter()
        image = cache.read(path)
        if image is None:
            raise RuntimeError(f"{uri}: compiled, but {path} could not be stored in the cache and read back "
                               "(the warning above, or KDAGEN_VERBOSE=1, says why)")
        timings.append(Timing(uri, compile_s, time.perf_counter() - start, len(image)))
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
