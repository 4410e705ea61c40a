"""The kernel cache under load: 8 processes fetch 4 small real kernels through fetch_image (the path every kernel
load takes) at once, two per kernel, and one of them is SIGKILLed in the middle of writing its entry. Afterwards
every entry loads, equals a fresh NVRTC compile byte for byte, and no temporary file is left behind."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import time

from kdagen.runtime import cache, compile_source, fetch_image
from markers import needs_nvrtc

ARCH = "sm_80"
SOURCE = ('#include <cuda_bf16.h>\nextern "C" __global__ void scale(float* y, int n) {{\n'
          '  for (int i = threadIdx.x; i < n; i += blockDim.x)\n'
          '    y[i] = __bfloat162float(__float2bfloat16(y[i] * {n}.f));\n'
          '}}\n')
KERNELS = {f"load_{n}": SOURCE.format(n=n + 2) for n in range(4)}
VICTIM = "load_0"


def _fetch(uri: str, paused, victim: bool, results) -> None:
    """One process. The victim stops inside its write — the entry's bytes are in the temporary file, not yet
    renamed — and waits there to be killed; its partner on the same kernel starts only then, so that it meets
    the dead writer's lock and temporary file."""
    if victim:
        real_fsync = os.fsync

        def stop(fd):
            real_fsync(fd)
            paused.set()
            time.sleep(600)
        os.fsync = stop
    elif uri == VICTIM:
        paused.wait(60)
    image, how, path = fetch_image(uri, KERNELS[uri], ARCH)
    results.put((uri, how, hashlib.sha256(image).hexdigest()))


@needs_nvrtc
def test_eight_processes_and_a_killed_writer_leave_a_sound_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KDAGEN_DISABLE_JIT", raising=False)
    fresh = {uri: compile_source(src, f"{uri}.cu", ARCH) for uri, src in KERNELS.items()}
    ctx = multiprocessing.get_context("fork")
    paused, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_fetch, args=(uri, paused, uri == VICTIM and i == 0, results))
             for i in range(2) for uri in KERNELS]
    for p in procs:
        p.start()
    try:
        assert paused.wait(60), "the victim never reached its write"
        folder = tmp_path / ARCH / VICTIM
        assert list(folder.glob(".*.cubin.*.tmp")) and not list(folder.glob("*.cubin"))    # caught mid-write
        os.kill(procs[0].pid, signal.SIGKILL)
        for p in procs:
            p.join(120)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [-signal.SIGKILL] + [0] * 7
    got = [results.get(timeout=5) for _ in range(7)]
    assert all(digest == hashlib.sha256(fresh[uri]).hexdigest() for uri, _, digest in got)
    assert [how for uri, how, _ in got if uri == VICTIM] == ["built"]                   # after the kill
    assert sorted(how for uri, how, _ in got if uri != VICTIM) == ["built"] * 3 + ["disk"] * 3  # once per kernel

    for uri, src in KERNELS.items():                                  # read back as a later process would
        image, how, path = fetch_image(uri, src, ARCH)
        assert how == "disk" and image == fresh[uri] and cache.read(path) == fresh[uri]
    assert sorted((e.uri, e.intact) for e in cache.entries(tmp_path)) == [(uri, True) for uri in sorted(KERNELS)]
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix not in (".cubin", ".lock")]
    assert leftovers == []                                # the killed writer's temporary file included
