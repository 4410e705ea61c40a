"""sigmoid_gate's op against kdagen's float64 interpreter, forward and backward (started by `kdagen init-recurrence`).

On a GPU the generated kernels run there; without one, on the CPU through kdagen's emulator (slow: keep the
shapes small)."""
import torch

import kdagen
from kdagen import testing
from sigmoid_gate import sigmoid_gate


def test_sigmoid_gate_matches_the_interpreter():
    op = kdagen.compile(sigmoid_gate, emulate=not torch.cuda.is_available())
    errors = testing.compare(op, seed=0, B=1, T=40, H=2, head_dim=64)
    over = [n for n, e in errors.items() if not e <= testing.bound(op, n)]
    assert not over, f"{over} over their bounds:\n" + testing.report(op, errors)
