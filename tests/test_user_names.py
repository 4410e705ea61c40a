"""A recurrence's inputs may take any identifier: the kernels see them under scoped names (in_<name>,
sc_<name>), so names the kernels use themselves (c, o, h0, T, i, threadIdx, ...) plan, render, compile and run."""
from __future__ import annotations

import shutil

import pytest
import torch

from kdagen import dsl
from kdagen.codegen import emulate, render_unit
from kdagen.codegen.nvcc import resources
from kdagen.ops.forward import launch
from kdagen.plan import Problem, make_plan, verify


def clashing_names(r):
    """The gated delta rule with a per-channel gate, every input named after something a kernel declares."""
    q, k = r.token_input("c", "K", dtype="bf16"), r.token_input("o", "K", dtype="bf16")
    v, g, beta = r.token_input("h0", "V", dtype="bf16"), r.token_input("T", "K", dtype="bf16"), r.token_input("i")
    decay = -2.0 * dsl.sigmoid(g * r.head_param("threadIdx", "K"))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(beta), decay=decay,
                 scale=r.scalar("scale2"))


NAMES = ("c", "o", "h0", "T", "i", "threadIdx", "scale2")


@pytest.fixture(scope="module")
def planned():
    r = dsl.build(clashing_names)
    return verify(make_plan(Problem(r, "clash", 64, 64, varlen=True, arch="sm_90a"))), r


def test_every_name_is_scoped_in_the_signatures(planned):
    plan, _ = planned
    params = {p.name for k in plan.kernels for p in k.params}
    assert {"in_c", "in_o", "in_T", "in_i", "in_threadIdx", "sc_scale2", "grad_in_threadIdx"} <= params
    # the value input reaches the recurrences as the core's operand `v`; o, h0, T there are the kernels' own
    assert not params & (set(NAMES) - {"o", "h0", "T"}), "a user's name reached a kernel signature unscoped"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_renders_and_compiles_with_nvcc(planned, direction):
    plan, r = planned
    report = resources(render_unit(plan, r, direction), "sm_90a", ("-Werror", "all-warnings"))
    assert set(report) == {k.name for k in plan.direction(direction)}


@pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")
def test_runs_in_the_emulator(planned):
    plan, r = planned
    gen = torch.Generator().manual_seed(11)
    cu = torch.tensor([0, 9, 30], dtype=torch.int64)
    rows = {"c": 64, "o": 64, "h0": 64, "T": 64}
    xk = {n: torch.randn(1, 30, 2, d, generator=gen).to(torch.bfloat16) for n, d in rows.items()}
    xk["i"] = torch.randn(1, 30, 2, generator=gen)
    xk["threadIdx"] = torch.rand(2, 64, generator=gen)
    xk["initial_state"] = torch.randn(2, 2, 64, 64, generator=gen) / 8
    o, ht, _ = launch(plan, r, emulate.build(plan, r), {**xk, "cu_seqlens": cu}, {"scale2": 0.2}, poison=True)
    xr = {**{n: t.double() for n, t in xk.items() if n != "initial_state"}, "scale2": 0.2}
    o_ref, ht_ref = dsl.interpret.forward(r, xr, chunk_size=16,
                                          initial_state=xk["initial_state"].double(), cu_seqlens=cu)
    err_o = ((o.double() - o_ref).norm() / o_ref.norm()).item()
    err_h = ((ht.double() - ht_ref).norm() / ht_ref.norm()).item()
    assert err_o <= 0.005 and err_h <= 0.005, (err_o, err_h)


def test_an_input_in_another_dtype_is_refused(planned):
    """The kernels read each pointer as the plan's C type: a tensor of another dtype must not reach them."""
    plan, r = planned
    x = {n: torch.zeros(1, 16, 1, 64, dtype=torch.bfloat16) for n in ("c", "o", "h0", "T")}
    x.update(i=torch.zeros(1, 16, 1, dtype=torch.bfloat16), threadIdx=torch.zeros(1, 64),
             cu_seqlens=torch.tensor([0, 16]))
    with pytest.raises(TypeError, match=r"x\['i'\] has dtype torch.bfloat16, the plan expects torch.float32"):
        launch(plan, r, None, x, {"scale2": 1.0})
    x["i"] = x["i"].float()
    with pytest.raises(KeyError, match=r"inputs \['w'\] are not read"):
        launch(plan, r, None, {**x, "w": torch.zeros(1)}, {"scale2": 1.0})
    with pytest.raises(KeyError, match=r"scalars \['scale2'\] are not given"):
        launch(plan, r, None, x, {})
