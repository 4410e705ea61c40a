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
    assert (DEFAULT_SHAPES[1], ACCURACY_SHAPES[0]) in groups and (DEFAULT_SHAPES[-1], ACCURACY_SHAPES[1]) in groups
    assert peer_tuning.tasks(("gdn",), (Shape(1, 64, 2, 64),)) == [(("gdn",), (Shape(1, 64, 2, 64),))]


def _locked(path) -> bool:
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_the_gpu_is_held_except_while_triton_compiles(tmp_path, monkeypatch):
    lock = str(tmp_path / "gpu.lock")
    seen = []

    def compile(src, **kwargs):
        seen.append(("compile", _locked(lock)))
        return f"binary of {src}"

    compiler = types.SimpleNamespace(compile=compile)
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(compiler=compiler))
    monkeypatch.setitem(sys.modules, "triton.compiler", compiler)
    monkeypatch.setattr(peer_tuning, "_TURN", None)
    turn = peer_tuning.gpu_turn(lock)
    assert peer_tuning.gpu_turn(lock) is turn        # once per process: a pool worker's next task reuses it
    assert compiler.compile("a") == "binary of a" and seen == [("compile", False)]   # outside a turn: as is
    turn.take()
    assert _locked(lock)
    assert compiler.compile("b") == "binary of b"
    assert seen[-1] == ("compile", False) and turn.held and _locked(lock)   # given up while compiling only
    turn.give()
    assert not _locked(lock)


def test_a_failed_task_is_logged_and_the_rest_go_on(monkeypatch):
    lines = []
    monkeypatch.setattr(peer_tuning, "_tune", _fake_tune)
    peer_tuning.tune(("kda", "gdn"), (Shape(1, 64, 2, 64),), jobs=2, log=lines.append)
    assert any(line.startswith("FLA tuning of gdn 1x64x2x64 failed: RuntimeError: no GPU here") for line in lines)
    assert "ran kda,kda_lb" not in lines and "ran kda" in lines
    assert lines[-1].startswith("FLA tuning: 2 tasks on 2 processes in ")
    assert peer_tuning.tune((), (), jobs=4, log=lines.append) == 0.0 and lines[-1] == "FLA tuning: nothing to tune"


def _fake_tune(task):
    keys = task[0]
    if keys == ("gdn",):
        raise RuntimeError("no GPU here")
    return "ran " + ",".join(keys)
