"""Let flash-linear-attention autotune every benchmark shape before timing, in parallel processes.

FLA autotunes each Triton kernel on its first call at a new key (heads, head dims, varlen, ...):
minutes per shape on an H200, nearly all of it compiling candidate configs one after another. Here
each (tuning signature, FLA function) task runs in a pool process that calls the op forward and
backward once per shape. A process holds a cross-process file lock — the GPU — for all its work
except while Triton compiles: the processes compile in parallel and use the GPU one at a time, so
each config is timed with no other process's kernels on the GPU, as when FLA tunes alone. FLA has
Triton keep its choices on disk (TRITON_CACHE_DIR), so the timing process that follows finds them,
and finds the compiled kernels too when run on the same machine.
"""
from __future__ import annotations

import fcntl
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
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


class GpuTurn:
    """This process's hold on the GPU: an exclusive file lock shared by the tuning processes."""

    def __init__(self, lock_path: str):
        self._file = open(lock_path, "w")
        self.held = False

    def take(self) -> None:
        fcntl.flock(self._file, fcntl.LOCK_EX)
        self.held = True

    def give(self) -> None:
        self.held = False
        fcntl.flock(self._file, fcntl.LOCK_UN)


_TURN: GpuTurn | None = None     # one per process: a second lock file handle would wait on the first


def gpu_turn(lock_path: str) -> GpuTurn:
    """This process's turn, made once; from then on Triton compiles with the turn given up."""
    global _TURN
    if _TURN is None:
        _TURN = GpuTurn(lock_path)
        compile_without_the_gpu(_TURN)
    return _TURN


def compile_without_the_gpu(turn: GpuTurn) -> None:
    """Wrap triton.compiler.compile, which each Triton kernel binds on its first launch (so this must
    run before FLA launches anything): the turn is given up while it compiles. Should a Triton
    version bind it elsewhere, compiles just stay inside the turn: slower, still correct."""
    import triton.compiler

    compile_ = triton.compiler.compile

    def compile_outside_the_turn(*args, **kwargs):
        if not turn.held:
            return compile_(*args, **kwargs)
        turn.give()
        try:
            return compile_(*args, **kwargs)
        finally:
            turn.take()

    triton.compiler.compile = compile_outside_the_turn


def _tune(task) -> str:
    """Worker: FLA forward and backward once per variant and shape; returns a log line (errors included)."""
    keys, shapes, seed, lock_path = task
    turn = gpu_turn(lock_path)
    t0, notes = time.perf_counter(), []
    turn.take()
    try:
        import torch

        from .inputs import make_set
        from .libraries import error_text, load_fla

        fla = load_fla()
        for shape in shapes:
            for key in keys:
                variant = VARIANTS[key]
                step = "forward"
                try:         # a refusal or a failure is the timing run's to report; tuning goes on
                    s = make_set(variant, shape, device="cuda", seed=seed)
                    out = fla.functions[variant.function](**s.inputs, **variant.call_kwargs())
                    step = "backward"
                    s.grads(out)
                    torch.cuda.synchronize()
                except Exception as e:
                    notes.append(f"{key} {shape.name} {step}: {error_text(e)}")
    finally:
        turn.give()
    extra = f" ({'; '.join(notes)})" if notes else ""
    names = ",".join(shape.name for shape in shapes)
    return f"tuned FLA {','.join(keys)} {names} in {time.perf_counter() - t0:.0f} s{extra}"


def tune(ops, shapes, *, jobs: int, seed: int = 0, log: Callable[[str], None] = print) -> float:
    """Run every task on `jobs` processes; returns the wall seconds taken. A task that fails, or a
    worker that dies, is logged: whatever is left untuned, FLA tunes in the timing run as usual."""
    work = tasks(ops, shapes)
    if not work:
        log("FLA tuning: nothing to tune")
        return 0.0
    workers = min(jobs, len(work))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        lock = os.path.join(tmp, "gpu.lock")
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_tune, (keys, group, seed, lock)): (keys, group) for keys, group in work}
            for done in as_completed(futures):
                keys, group = futures[done]
                try:
                    log(done.result())
                except Exception as e:      # a worker that died (BrokenProcessPool) or raised outside its task
                    log(f"FLA tuning of {','.join(keys)} {','.join(s.name for s in group)} failed: "
                        f"{type(e).__name__}: {e}")
    seconds = time.perf_counter() - t0
    log(f"FLA tuning: {len(work)} tasks on {workers} processes in {seconds:.0f} s")
    return seconds
