"""chunk_kda and a compiled recurrence under torch.compile(fullgraph=True) (inductor) and in a CUDA graph, on the
GPU: forward and backward equal to eager, bitwise. The CPU versions of these checks (aot_eager, emulated kernels)
are tests/test_library.py.

Run on a GPU machine: python -m pytest -m gpu tests/gpu -x -q
"""
from __future__ import annotations

import pytest
import torch

import kdagen
from kdagen import testing
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs
from recurrence_cases import CASES, compiled

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)


def kda_inputs(seed: int, cu=None, T=1000):
    opt = Options(op="kda", **LB)
    shape = dict(T=T) if cu is None else dict(cu_seqlens=cu)
    x = make_inputs(opt, B=1, H=4, K=128, V=128, generator=torch.Generator().manual_seed(seed), **shape)
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.bfloat16,
              "beta": torch.bfloat16}
    return {n: t.cuda() if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).cuda().contiguous()
            .requires_grad_() for n, t in x.items()}


def kda_step(x, do, dht):
    o, ht = kdagen.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"],
                             output_final_state=True, A_log=x["A_log"], dt_bias=x["dt_bias"],
                             cu_seqlens=x.get("cu_seqlens"), **LB)
    return (o.float() * do).sum() + (ht * dht).sum()


def grads_of(step, x, do, dht):
    leaves = [t for t in x.values() if t.requires_grad]
    return [g.clone() for g in torch.autograd.grad(step(x, do, dht), leaves)]


@pytest.mark.parametrize("cu", [None, [0, 100, 100, 613, 1000]], ids=["fixed", "varlen"])
def test_chunk_kda_torch_compile_fullgraph(cu, seed):
    x = kda_inputs(seed, cu)
    do = torch.randn(1, 1000, 4, 128, device="cuda")
    dht = torch.randn(x["initial_state"].shape, device="cuda")
    want = grads_of(kda_step, x, do, dht)
    got = grads_of(torch.compile(kda_step, fullgraph=True), x, do, dht)
    assert all(torch.equal(a, b) for a, b in zip(got, want)), f"seed {seed}"


def test_chunk_kda_cuda_graph_replay(seed):
    """A whole training step (forward and backward) captured once and replayed on new inputs copied into the
    captured buffers equals eager on those inputs."""
    static = kda_inputs(seed, [0, 300, 1000])
    do = torch.randn(1, 1000, 4, 128, device="cuda")
    dht = torch.randn(static["initial_state"].shape, device="cuda")
    leaves = [t for t in static.values() if t.requires_grad]
    for _ in range(2):                                   # warm up: compile and load the kernels outside capture
        grads_of(kda_step, static, do, dht)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = kda_step(static, do, dht)
        captured = torch.autograd.grad(loss, leaves)
    fresh = kda_inputs(seed + 1, [0, 300, 1000])
    with torch.no_grad():
        for n, t in static.items():
            t.copy_(fresh[n])
    graph.replay()
    want = grads_of(kda_step, fresh, do, dht)
    assert all(torch.equal(a, b) for a, b in zip(captured, want)), f"seed {seed}"


def test_compiled_recurrence_torch_compile_and_graph(seed):
    op = compiled("bounded_gate_varlen_gva2")
    x, kw, do, dht = testing.random_inputs(op, seed=seed, device="cuda", **CASES["bounded_gate_varlen_gva2"][1])

    def step(x, kw, do, dht):
        o, ht = op(**x, **kw)
        return (o.float() * do.float()).sum() + (ht * dht).sum()
    leaves = [*x.values(), kw["initial_state"]]
    want = torch.autograd.grad(step(x, kw, do, dht), leaves)
    got = torch.autograd.grad(torch.compile(step, fullgraph=True)(x, kw, do, dht), leaves)
    assert all(torch.equal(a, b) for a, b in zip(got, want)), f"seed {seed}"
