"""Whether the backward's gradients depend on its block length (CPU emulation): `python benchmarks/probe/block_length.py
G OUT.pt` plans the mma16 kernels with blocks of G chunks, runs the end-to-end cases of tests/backward_cases.py
(forward kernels, then backward kernels from their saved workspace, one of them over several blocks) on the
emulated kernels, and saves every gradient; `... --compare A.pt B.pt` says whether two
such runs are bitwise equal. dstate_pass and recurrence_bwd share the dS chain's code and summation order, so each
block restarts from the dS a single walk would have: the gradients should not depend on G."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

def run(G: int, out: str) -> None:
    import backward_cases as bc
    from kdagen.ops import backward as bw
    from kdagen.ops import forward as fw
    from kdagen.ops.api import kernel_call, make_call
    from kdagen.plan.families.mma16 import backward, forward
    forward.BLOCK_CHUNKS = backward.BLOCK_CHUNKS = bc.BLOCK_CHUNKS = G       # read when the plan is made
    forward.BLOCK_SLOTS = backward.BLOCK_SLOTS = f"chunks // {G} + N"
    grads = {}
    for case in bc.END_TO_END:                   # the forward kernels' own checkpoints feed the backward
        x, do, dht = bc.case_inputs(case, 11)
        call = make_call(case.opt.op, initial_state=x.get("initial_state"), output_final_state=True,
                         cu_seqlens=x.get("cu_seqlens"), A_log=x.get("A_log"), dt_bias=x.get("dt_bias"),
                         **bc.call_options(case.opt))
        kcall, tensors = kernel_call(call, x, emulate=True)
        _, _, saved = fw.forward({**tensors, "initial_state": x.get("initial_state"),
                                  "cu_seqlens": x.get("cu_seqlens")}, kcall)
        g = bw.backward(saved, do, dht)
        grads[case.name] = {n: t for n, t in g.items() if t is not None}
    torch.save(grads, out)


def compare(a: str, b: str) -> None:
    x, y = torch.load(a), torch.load(b)
    for case in x:
        for n in x[case]:
            print(f"{case} {n}: {'bitwise equal' if torch.equal(x[case][n], y[case][n]) else 'DIFFERENT'}")


if __name__ == "__main__":
    compare(*sys.argv[2:4]) if sys.argv[1] == "--compare" else run(int(sys.argv[1]), sys.argv[2])
