"""The backward kernels (the plan's states, recurrence_bwd, prepare_bwd, param_reduce; kdagen.ops.backward) on the GPU
against the float64 reference: every case of tests/backward_cases.py, two runs bitwise equal, the K2
workspaces against their float64 oracle (it names the first intermediate that is off), and the public op's
autograd end to end. The same kernels run on the CPU, emulated, in tests/test_backward_emulated.py.

Run on a GPU machine: python -m pytest -m gpu tests/gpu -x -q
"""
from __future__ import annotations

import pytest
import torch
from backward_cases import CASES, call_options, case_inputs, check_grads, check_k2_workspace, reference, run_case

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("case", CASES, ids=str)
def test_backward_matches_reference(case, seed):
    grads, ref = run_case(case, "cuda", seed)
    check_grads(grads, ref, f"{case.name} seed={seed}")
    again, _ = run_case(case, "cuda", seed)
    differ = [n for n, g in grads.items() if g is not None and not torch.equal(g, again[n])]
    assert not differ, f"{case.name} seed={seed}: two runs differ bitwise in {differ}"


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[7]], ids=str)   # KDA, KDA varlen GVA, GDN
def test_recurrence_bwd_workspace_matches_oracle(case, seed):
    """The S_c and recurrence_bwd workspaces against their float64 oracle, to tell which kernel is off."""
    debug = {}
    run_case(case, "cuda", seed, debug=debug)
    check_k2_workspace(case, debug, seed)


@pytest.mark.gpu
@GPU
def test_through_the_public_op(seed):
    """End to end on the GPU: kdagen.chunk_kda's autograd runs the forward kernels, then these."""
    import kdagen
    case = CASES[0]
    x, do, dht = case_inputs(case, seed)
    ref = reference(case, x, do, dht)
    dev = {n: t.cuda().requires_grad_(t.is_floating_point()) for n, t in x.items()}
    o, ht = kdagen.chunk_kda(dev["q"], dev["k"], dev["v"], dev["g"], dev["beta"], A_log=dev["A_log"],
                             dt_bias=dev["dt_bias"], initial_state=dev["initial_state"], output_final_state=True,
                             **call_options(case.opt))
    torch.autograd.backward((o, ht), (do.cuda(), dht.cuda()))
    check_grads({n: dev[n].grad for n in ref}, ref, f"chunk_kda autograd seed={seed}")
