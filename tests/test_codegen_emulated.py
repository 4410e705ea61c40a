"""The forward kernels, rendered exactly as for the GPU, run on the CPU through kdagen.codegen.emulate
(each CUDA thread a host thread; mma/ldmatrix/cp.async/mbarrier by their PTX semantics) against the
float64 references: K1's workspace term by term, K2's o and final state at the GPU tolerances, the
"store states" mode against the reference's per-chunk states, and a recurrence defined only here."""
from __future__ import annotations

import pytest
import torch

from kdagen import dsl
from kdagen.codegen import emulate
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.forward import forward, launch
from kdagen.ops.launcher import chunk_layout
from kdagen.plan import Problem, make_plan, verify
from kdagen.plan.sizes import evaluate, launch_sizes
from kdagen.reference import Options, chunked
from kdagen.reference.chunked import chunk_delta_rule_fwd
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import prologue, scale_of, state_in
from kdagen.reference.workspace import workspace_errors

pytestmark = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")

IO = ("q", "k", "v")


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def kernel_inputs(opt: Options, g_dtype=torch.bfloat16, beta_dtype=torch.bfloat16, seed=0, **shape):
    """(inputs for the kernels, the same values in float64 for the references)."""
    x = make_inputs(opt, generator=torch.Generator().manual_seed(seed), **shape)
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": g_dtype, "beta": beta_dtype}
    xk = {n: t if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).contiguous() for n, t in x.items()}
    xr = {n: t if n == "cu_seqlens" else t.double() for n, t in xk.items()}
    return xk, xr


def run_op(op: str, options: dict, **shape):
    opt = Options(op=op, **options)
    xk, xr = kernel_inputs(opt, **shape)
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=True,
                     cu_seqlens=xk.get("cu_seqlens"), A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, emulate=True, family="mma16")   # wgmma64's: test_wgmma64_emulated.py
    o, ht, saved = forward({**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": xk.get("cu_seqlens")},
                           kcall, poison=True)
    return o, ht, saved, xr, opt


CASES = {
    # factored form; varlen with an empty and a length-1 sequence; GVA 2; h0
    "kda_factored_varlen_gva": ("kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                                            use_beta_sigmoid_in_kernel=True),
                                dict(H=1, G=2, K=64, V=64, cu_seqlens=[0, 0, 1, 20, 20, 45])),
    # relative vector form (FLA defaults: precomputed g); B = 2, T % 16 != 0; no h0; a scale of the caller's
    "kda_relative_fixed": ("kda", dict(scale=0.3), dict(B=2, T=37, H=1, K=64, V=64, initial_state=False)),
    # scalar decay (GDN, softplus gate); K = V = 128
    "gdn_softplus": ("gdn", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                                 use_beta_sigmoid_in_kernel=True), dict(T=33, H=1, K=128, V=128)),
    # state_v_first, allow_neg_eigval
    "kda_vfirst_negeig": ("kda", dict(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                                      state_v_first=True), dict(T=21, H=1, K=64, V=64)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    op, options, shape = CASES[request.param]
    return request.param, run_op(op, options, **shape)


def test_forward_matches_the_reference(case):
    name, (o, ht, saved, xr, opt) = case
    o_ref, ht_ref = chunked(xr, opt, 16)
    assert not torch.isnan(o).any() and not torch.isnan(ht).any(), f"{name}: NaN left in the outputs"
    assert rel(o, o_ref) <= 0.005, f"{name}: o relative L2 {rel(o, o_ref):.2e}"
    assert rel(ht, ht_ref) <= 0.005, f"{name}: final state relative L2 {rel(ht, ht_ref):.2e}"
    if xr.get("cu_seqlens") is not None:            # the empty sequence passes its initial state through
        assert torch.equal(ht[0], xr["initial_state"][0].float())


# bf16 tensors at bf16 rounding; fp32 ones from bf16x3 products or fp32 arithmetic
WORKSPACE_TOL = {"ws_q_decayed": 5e-3, "ws_k_decayed": 5e-3, "ws_k_to_end": 5e-3, "ws_decay_total": 1e-5, "ws_A": 1e-4,
                 "ws_Mqk": 1e-4, "ws_beta": 1e-6}


def test_prepare_workspace_term_by_term(case):
    """prepare's outputs per (chunk, value head) against the float64 chunk terms; rows past a chunk's end zero."""
    name, (o, ht, saved, xr, opt) = case
    errors = workspace_errors(saved["workspace"], xr, opt, saved["plan"].chunk)
    assert errors.pop("tail_max") == 0, f"{name}: workspace rows past a chunk's end are not zero"
    for key, err in errors.items():
        assert err <= WORKSPACE_TOL[key], f"{name}: workspace {key} relative L2 {err:.2e} > {WORKSPACE_TOL[key]}"


def test_store_states_mode():
    """states (the recurrence run again in the backward) writes the state entering every chunk, [V, K] in bf16."""
    op, options, shape = CASES["kda_factored_varlen_gva"]
    o, ht, saved, xr, opt = run_op(op, options, **shape)
    plan = saved["plan"]
    module = emulate.build(plan, saved["recurrence"], ["states"])
    x = saved["x"]
    B, T, H = x["q"].shape[:3]
    HV = x["v"].shape[2]
    cu, offsets = chunk_layout(x["cu_seqlens"], B, T, 16, "cpu")
    sizes = launch_sizes(B=B, T=T, H=H, HV=HV, chunk=16, num_seqs=cu.numel() - 1)
    k = plan.kernel("states")
    ws = saved["workspace"]
    states = torch.full((sizes["chunks"], HV, 64, 64), float("nan"), dtype=torch.bfloat16)
    values = {**ws, "v": x["v"], "h0": x["initial_state"], "cu_seqlens": cu, "chunk_offsets": offsets,
              "T": B * T, "N": cu.numel() - 1, "ws_states": states}
    module.launch("states", tuple(evaluate(d, sizes) for d in k.grid), (k.threads,),
                  [values[p.name] for p in k.params])
    p = prologue(xr, opt)
    _, _, ref_states = chunk_delta_rule_fwd(p["q"], p["k"], xr["v"], p["a"], p["beta"], scale_of(opt, 64),
                                            state_in(xr, opt), 16, xr["cu_seqlens"])
    mine = torch.cat([states[int(offsets[n]):int(offsets[n + 1])] for n in range(len(ref_states))])
    want = torch.cat([torch.stack(s) for s in ref_states if s]).transpose(-1, -2)
    assert mine.shape == want.shape and rel(mine, want) <= 0.005


def softsign_gate(r):
    """A recurrence only this test defines: a new gate activation and a different β map."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    w = r.head_param("w", "K")
    decay = -3.0 * dsl.square(dsl.sigmoid(g * w))                 # proven in [-3, 0]: factored form
    b = 0.5 + 0.5 * dsl.sigmoid(beta) * dsl.sigmoid(-beta)
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=b, decay=decay, scale=r.scalar("scale"))


def test_recurrence_defined_only_in_the_dsl_runs():
    r = dsl.build(softsign_gate)
    plan = verify(make_plan(Problem(r, "softsign", 64, 64, varlen=True)))
    assert plan.exponent_form == "factored"
    gen = torch.Generator().manual_seed(7)
    cu = torch.tensor([0, 5, 37], dtype=torch.int64)
    xk = {"q": torch.randn(1, 37, 2, 64, generator=gen), "k": torch.randn(1, 37, 2, 64, generator=gen),
          "v": torch.randn(1, 37, 2, 64, generator=gen), "g": torch.randn(1, 37, 2, 64, generator=gen),
          "beta": torch.randn(1, 37, 2, generator=gen), "w": torch.randn(2, 64, generator=gen),
          "initial_state": torch.randn(2, 2, 64, 64, generator=gen) / 8}
    xk = {n: t.to(torch.bfloat16 if n in IO + ("g", "beta") else torch.float32).contiguous() for n, t in xk.items()}
    o, ht, _ = launch(plan, r, emulate.build(plan, r), {**xk, "cu_seqlens": cu}, {"scale": 0.125}, poison=True)
    xr = {n: t.double() for n, t in xk.items()}
    o_ref, ht_ref = dsl.interpret.forward(r, {n: t for n, t in xr.items() if n != "initial_state"}, scale=0.125,
                                          chunk_size=16, initial_state=xr["initial_state"], cu_seqlens=cu)
    assert rel(o, o_ref) <= 0.005 and rel(ht, ht_ref) <= 0.005, (rel(o, o_ref), rel(ht, ht_ref))
