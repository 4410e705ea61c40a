"""Let flash-linear-attention autotune every benchmark shape before timing, in parallel processes.

FLA autotunes each Triton kernel on its first call at a new key (heads, head dims, varlen, ...):
minutes per shape on an H200, nearly all of it compiling candidate configs one after another. Here
each (shape, FLA function) pair gets a process that calls the op forward and backward once. The
processes compile in parallel but take turns on the GPU: a file lock is held around each of
Triton's config timings, so every config is timed on an otherwise idle GPU and FLA picks exactly
what it would pick alone. FLA has Triton keep its choices on disk (TRITON_CACHE_DIR), so the timing
process that follows finds them, and finds the compiled kernels too when run on the same machine.
"""
from __future__ import annotations

import fcntl
import multiprocessing
import os
import tempfile
import time
from contextlib import contextmanager
from typing import Callable

from .cases import VARIANTS, Shape


def tuning_signature(shape: Shape) -> tuple:
    """What FLA's Triton tuning keys read from a shape: batch, heads, head dim, varlen (not T, mostly)."""
    return shape.B, shape.H, shape.D, shape.lengths is not None


def tasks(ops, shapes) -> list[tuple[tuple[str, ...], tuple[Shape, ...]]]:
    """One task per (tuning signature, FLA function), its shapes in order.

    Variants of one function share Triton's keys, and so do shapes that differ only in T (the
    accuracy shapes): one process takes them in turn, and the later ones tune only the few kernels
    whose keys do read T.
    """
    by_function: dict[str, list[str]] = {}
    for key in ops:
        by_function.setdefault(VARIANTS[key].function, []).append(key)
    groups: dict[tuple, list[Shape]] = {}
    for shape in dict.fromkeys(shapes):
        groups.setdefault(tuning_signature(shape), []).append(shape)
    return [(tuple(keys), tuple(group)) for group in groups.values() for keys in by_function.values()]


@contextmanager
def _gpu_turn(path: str):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def share_gpu_when_timing(lock_path: str) -> None:
    """Make Triton's autotuner compile a config outside the lock and time it inside.

    Once per process: a pool worker runs several tasks, and wrapping twice would take the lock
    inside the lock (a deadlock).
    """
    import triton.testing

    do_bench = getattr(triton.testing.do_bench, "untimed_original", triton.testing.do_bench)

    def do_bench_in_turn(fn, *args, **kwargs):
        fn()                  # compiles this config (and runs it once): in parallel with the other processes
        with _gpu_turn(lock_path):
            return do_bench(fn, *args, **kwargs)

    do_bench_in_turn.untimed_original = do_bench
    triton.testing.do_bench = do_bench_in_turn


def _tune(task) -> str:
    """Worker: FLA forward and backward once per variant and shape; returns a log line."""
    keys, shapes, seed, lock_path = task
    share_gpu_when_timing(lock_path)
    import torch

    from .inputs import make_set
    from .libraries import error_text, load_fla

    fla = load_fla()
    t0, notes = time.perf_counter(), []
    for shape in shapes:
        for key in keys:
            variant = VARIANTS[key]
            s = make_set(variant, shape, device="cuda", seed=seed)
            try:
                out = fla.functions[variant.function](**s.inputs, **variant.call_kwargs())
            except Exception as e:  # refused configurations are reported by the timing run; tuning goes on
                notes.append(f"{key} {shape.name} forward: {error_text(e)}")
                continue
            try:
                s.grads(out)
            except Exception as e:
                notes.append(f"{key} {shape.name} backward: {error_text(e)}")
            torch.cuda.synchronize()
    extra = f" ({'; '.join(notes)})" if notes else ""
    names = ",".join(shape.name for shape in shapes)
    return f"tuned FLA {','.join(keys)} {names} in {time.perf_counter() - t0:.0f} s{extra}"


def tune(ops, shapes, *, jobs: int, seed: int = 0, log: Callable[[str], None] = print) -> float:
    """Run every task on `jobs` processes; returns the wall seconds taken."""
    work = tasks(ops, shapes)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        lock = os.path.join(tmp, "gpu.lock")
        with multiprocessing.get_context("spawn").Pool(min(jobs, len(work))) as pool:
            for line in pool.imap_unordered(_tune, [(keys, group, seed, lock) for keys, group in work]):
                log(line)
    seconds = time.perf_counter() - t0
    log(f"FLA tuning: {len(work)} tasks on {min(jobs, len(work))} processes in {seconds:.0f} s")
    return seconds
