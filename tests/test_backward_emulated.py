"""The backward kernels, rendered exactly as for the GPU, run on the CPU through kdagen.codegen.emulate (each
CUDA thread a host thread; mma/ldmatrix/cp.async/mbarrier by their PTX semantics): the plan's states,
recurrence_bwd, prepare_bwd and param_reduce against the float64 reference and the K2 workspace oracle on small cases,
the forward kernels' own workspace feeding them, and a check of the oracle itself. The same cases run on the
GPU in tests/gpu/test_backward_kernels.py.
"""
from __future__ import annotations

import pytest
import torch
from backward_cases import (BOUND, CASES, EMULATED, END_TO_END, F64, FULL, Case, as64, block_starts, call_options,
                            case_inputs, check_grads, check_k2_workspace, chunk_reference_k2, chunks, dsl_only, k2_oracle,
                            poisoned, reference, run_case)

from kdagen import dsl
from kdagen.codegen import emulate
from kdagen.ops import backward as bw
from kdagen.ops import forward as fw
from kdagen.ops import launcher
from kdagen.ops.api import kernel_call, make_call
from kdagen.plan import Problem, make_plan, verify
from kdagen.plan.families.mma16 import backward as mma16_backward
from kdagen.reference.options import Options, expand_heads, prologue, scale_of

needs_emulation = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")


def emulated_loader(config, device=None, direction="backward"):
    """A module of the config's plan, compiled for the host."""
    return emulate.build(*config.planned(), direction)


def test_oracle_composes_to_the_reference(seed):
    """k2_oracle is what recurrence_bwd must produce: combined as prepare_bwd combines it, it gives the reference."""
    case = next(c for c in CASES if c.name == "kda_softplus_vfirst_varlen_k64")
    x, do, dht = case_inputs(case, seed)
    x = {n: as64(t) for n, t in x.items()}                            # exact: no storage rounding
    w2 = k2_oracle(case, x, do, dht, rounded=False)
    ref = chunk_reference_k2(case, x, do, dht)
    opt, scale = case.opt, scale_of(case.opt, case.K)
    p = prologue(x, opt)
    HV = x["v"].shape[2]
    q, k = expand_heads(p["q"], HV).flatten(0, 1), expand_heads(p["k"], HV).flatten(0, 1)
    a = p["a"].flatten(0, 1)
    beta = p["beta"].flatten(0, 1)
    for _, c, s, e in chunks(x):
        L = e - s
        G = a[s:e].transpose(0, 1).cumsum(1)
        E, R = G.exp(), (G[:, -1:] - G).exp()
        kh, qh, b = k[s:e].transpose(0, 1), q[s:e].transpose(0, 1), beta[s:e].transpose(0, 1)
        F = torch.where(torch.ones(L, L, dtype=torch.bool).tril()[..., None],
                        (G[:, :, None] - G[:, None]).clamp(max=0).exp(), torch.zeros((), dtype=F64))
        dMqk, dMkk = w2["dMqk"][c][:, :L, :L], w2["dMkk"][c][:, :L, :L]
        Rm = torch.einsum("hij,hjd,hijd->hid", dMkk, kh, F)
        b_q = scale * (E * w2["dqd"][c][:, :L] + torch.einsum("hij,hjd,hijd->hid", dMqk, kh, F))
        b_kr = R * w2["dkr"][c][:, :L]
        torch.testing.assert_close(b_q, ref["b_q"][s:e].transpose(0, 1), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(b_kr, ref["b_kr"][s:e].transpose(0, 1), rtol=1e-9, atol=1e-9)
        b_ki = (scale * torch.einsum("hij,hid,hijd->hjd", dMqk, qh, F)
                + torch.einsum("hij,hi,hid,hijd->hjd", dMkk, b, kh, F))
        torch.testing.assert_close(b_ki, ref["b_ki"][s:e].transpose(0, 1), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(E * w2["dkd"][c][:, :L] + b[..., None] * Rm, ref["b_kd"][s:e].transpose(0, 1),
                                   rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(w2["dbeta"][c][:, :L] + (kh * Rm).sum(-1), ref["dbeta"][s:e].transpose(0, 1),
                                   rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(w2["dgT"][c], ref["dgT"][s], rtol=1e-9, atol=1e-9)


@needs_emulation
@pytest.mark.parametrize("name", EMULATED)
def test_backward_emulated_on_cpu(name, seed):
    case = next(c for c in CASES if c.name == name)
    debug = {}
    grads, ref = run_case(case, "cpu", seed, loader=emulated_loader, debug=debug)
    check_k2_workspace(case, debug, seed)
    check_grads(grads, ref, f"{case.name} (emulated) seed={seed}")


@needs_emulation
@pytest.mark.parametrize("case", END_TO_END, ids=str)
def test_forward_then_backward_emulated_on_cpu(case, seed):
    """The forward kernels' own saved workspace feeds the backward kernels; both run emulated on the CPU. The
    forward's state checkpoints are defined everywhere (poisoned outputs) and are exactly where the backward's
    states restart: its S entering each block's first chunk is the checkpoint in bf16."""
    x, do, dht = case_inputs(case, seed)
    ref = reference(case, x, do, dht)
    call = make_call(case.opt.op, initial_state=x.get("initial_state"), output_final_state=True,
                     cu_seqlens=x.get("cu_seqlens"), A_log=x.get("A_log"), dt_bias=x.get("dt_bias"),
                     **call_options(case.opt))
    kcall, tensors = kernel_call(call, x, emulate=True, family="mma16")     # its state checkpoints are checked
    _, _, saved = fw.forward({**tensors, "initial_state": x.get("initial_state"), "cu_seqlens": x.get("cu_seqlens")},
                             kcall, poison=True)
    debug = {}
    grads = bw.backward(saved, do, dht, alloc=poisoned, debug=debug)
    check_grads(grads, ref, f"{case.name} (forward + backward emulated) seed={seed}")
    blocks = saved["workspace"]["ws_state_blocks"]
    assert torch.isfinite(blocks).all(), "a checkpoint slot the forward left unwritten"
    starts = block_starts(x)
    for slot, c in starts.items():
        assert torch.equal(debug["ws_states"][c], blocks[slot].to(torch.bfloat16)), (slot, c)
    assert all(not blocks[s].any() for s in range(len(blocks)) if s not in starts)


@needs_emulation
def test_a_recurrence_written_only_in_the_dsl_gets_its_gradients(seed):
    """Plan, forward and backward kernels of a recurrence no kernel was written for, against the gradients the
    DSL's own derived backward graph gives in float64: the gate, β map and head parameter reach prepare_bwd only
    through the emitted adjoint."""
    r = dsl.build(dsl_only, name="custom")
    plan = verify(make_plan(Problem(r, "custom", 64, 64, gva_ratio=2, varlen=True)))
    gen = torch.Generator().manual_seed(seed)
    cu = torch.tensor([0, 5, 37], dtype=torch.int64)
    x = {"q": torch.randn(1, 37, 1, 64, generator=gen), "k": torch.randn(1, 37, 1, 64, generator=gen),
         "v": torch.randn(1, 37, 2, 64, generator=gen), "g": torch.randn(1, 37, 2, 64, generator=gen),
         "beta": torch.randn(1, 37, 2, generator=gen), "w": torch.randn(2, 64, generator=gen) / 2,
         "initial_state": torch.randn(2, 2, 64, 64, generator=gen) / 8}
    x = {n: t.to(torch.bfloat16 if n in ("q", "k", "v", "g", "beta") else torch.float32) for n, t in x.items()}
    do = torch.randn(1, 37, 2, 64, generator=gen).to(torch.bfloat16)
    dht = torch.randn(2, 2, 64, 64, generator=gen)
    scalars = {"scale": 0.125}
    _, _, ws = fw.launch(plan, r, emulate.build(plan, r), {**x, "cu_seqlens": cu}, scalars, poison=True)
    grads = bw.launch(plan, r, emulate.build(plan, r, "backward"), {**x, "cu_seqlens": cu}, ws, scalars, do, dht,
                      alloc=poisoned)
    x64 = {n: t.double() for n, t in x.items() if n != "initial_state"}
    ref = dsl.interpret.backward(r, x64, do.double(), dht.double(), scale=0.125, chunk_size=16,
                                 initial_state=x["initial_state"].double(), cu_seqlens=cu)
    bound = {**BOUND, "w": BOUND["A_log"]}
    check_grads(grads, ref, f"custom recurrence (emulated) seed={seed}", bound)


@needs_emulation
@pytest.mark.parametrize("parts, case", [
    (2, next(c for c in CASES if c.name == "kda_blocks_varlen_k64")),
    (8, Case("kda_blocks_k128", Options(**FULL), 128, dict(B=1, T=160, H=1), g_scale=0.02)),
], ids=lambda x: x if isinstance(x, int) else str(x))
def test_other_dvn_part_counts(monkeypatch, parts, case, seed):
    """dstate_pass with the dVn key contraction in 2 or 8 warps per 16 value rows (DSTATE_K_PARTS, 4 by default):
    its checkpoints restart recurrence_bwd, which sums the same parts in the same tree order, over two blocks."""
    monkeypatch.setattr(mma16_backward, "DSTATE_K_PARTS", parts)
    launcher.forget_plans()
    used = []

    def loader(config, device=None, direction="backward"):
        plan, _ = config.planned()
        used.extend(k for k in plan.kernels if k.name == "dstate_pass")
        return emulated_loader(config, device, direction)
    try:
        debug = {}
        grads, ref = run_case(case, "cpu", seed, loader=loader, debug=debug)
        check_k2_workspace(case, debug, seed)
        check_grads(grads, ref, f"{case.name} (emulated, {parts} dVn parts) seed={seed}")
    finally:
        launcher.forget_plans()
    assert used and all(k.threads == 32 * parts and k.options.dvn_parts == parts for k in used), used
