"""FLA's parallel autotuning before timing: the task split and the GPU turn-taking (CPU only)."""
import fcntl
import sys
import types

from kdagen.bench import peer_tuning
from kdagen.bench.cases import DEFAULT_SHAPES, ACCURACY_SHAPES, VARIANTS, Shape


def test_one_task_per_tuning_signature_and_fla_function():
    shapes = DEFAULT_SHAPES + ACCURACY_SHAPES + DEFAULT_SHAPES[:1]     # a repeated shape is tuned once
    work = peer_tuning.tasks(tuple(VARIANTS), shapes)
    assert len(work) == 2 * len(DEFAULT_SHAPES)      # the accuracy shapes share the signatures of timing shapes
    # the two chunk_kda variants share Triton's tuning keys, so one process tunes both, in order
    assert work[0] == (("kda", "kda_lb"), DEFAULT_SHAPES[:1]) and work[1] == (("gdn",), DEFAULT_SHAPES[:1])
    groups = [group for _, group in work]
    assert (DEFAULT_SHAPES[1], ACCURACY_SHAPES[0]) in groups and (DEFAULT_SHAPES[4], ACCURACY_SHAPES[1]) in groups
    assert peer_tuning.tasks(("gdn",), (Shape(1, 64, 2, 64),)) == [(("gdn",), (Shape(1, 64, 2, 64),))]


def _locked(path) -> bool:
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_configs_compile_outside_the_lock_and_time_inside(tmp_path, monkeypatch):
    lock = str(tmp_path / "gpu.lock")
    seen = []

    def do_bench(fn, quantiles=None):
        seen.append(("timed", _locked(lock)))
        fn()
        return [1.0, 1.0, 1.0]

    testing = types.SimpleNamespace(do_bench=do_bench)
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(testing=testing))
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    peer_tuning.share_gpu_when_timing(lock)
    peer_tuning.share_gpu_when_timing(lock)     # a pool worker's second task: no lock inside the lock
    assert testing.do_bench.untimed_original is do_bench
    assert testing.do_bench(lambda: seen.append(("call", _locked(lock))), quantiles=(0.5,)) == [1.0, 1.0, 1.0]
    # the first call (where Triton compiles the config) holds no lock; the timing holds it
    assert seen == [("call", False), ("timed", True), ("call", True)]
    assert not _locked(lock)
