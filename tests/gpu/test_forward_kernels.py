"""The forward kernels (prepare, recurrence) of every family on the GPU against the float64 reference.

Inputs are random (fresh every run, seed printed on failure), rounded to the kernels' dtypes; the
reference runs in float64 on exactly those values. Outputs and workspaces are poisoned with NaN
before launch. Bounds: o and the final state ≤ 0.005 relative L2; each prepare workspace term within
its dtype's rounding. Each family runs where it serves calls: mma16 for calls with gradients (training),
wgmma64 for calls without (inference, sm_90a). Run: python -m pytest -m gpu tests/gpu -x -q
"""
from __future__ import annotations

import random

import pytest
import torch

from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.forward import call_config, forward
from kdagen.plan.families import family as family_of
from kdagen.reference.workspace import workspace_errors
from kdagen.reference import Options, chunked
from kdagen.reference.inputs import make_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BOUND = 0.005
# bf16 terms at bf16 rounding, fp32 ones from bf16x3 products or fp32 arithmetic
WORKSPACE_TOL = {"bf16": 5e-3, "f32": 1e-3, "ws_decay_total": 1e-5, "ws_beta": 1e-6}
# family -> whether the forward keeps what a backward needs (the family must then plan one)
FAMILIES = {"mma16": True, "wgmma64": False}
LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
SOFTPLUS = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)

# name: (op, FLA options, shape for make_inputs, g dtype, beta dtype)
CASES = {
    "kda_lb_factored_k128": ("kda", LB, dict(B=2, T=300, H=4, K=128, V=128), torch.bfloat16, torch.bfloat16),
    "kda_softplus_gva2_k64": ("kda", SOFTPLUS, dict(B=1, T=257, H=2, G=2, K=64, V=64), torch.bfloat16, torch.float32),
    "kda_precomputed_varlen_k128": ("kda", {}, dict(H=2, K=128, V=128, cu_seqlens=[0, 0, 1, 17, 17, 200, 513]),
                                    torch.float32, torch.bfloat16),
    "kda_safe_gate_k64": ("kda", dict(safe_gate=True, lower_bound=-5.0), dict(B=1, T=130, H=2, K=64, V=64),
                          torch.float32, torch.bfloat16),
    "kda_vfirst_negeig_k64": ("kda", dict(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                          allow_neg_eigval=True, state_v_first=True),
                              dict(B=3, T=45, H=1, K=64, V=64), torch.bfloat16, torch.bfloat16),
    "gdn_softplus_k128": ("gdn", SOFTPLUS, dict(B=2, T=100, H=4, K=128, V=128), torch.float32, torch.float32),
    "gdn_precomputed_varlen_gva2_vfirst_k64": ("gdn", dict(state_v_first=True),
                                               dict(H=2, G=2, K=64, V=64, cu_seqlens=[0, 15, 15, 16, 80]),
                                               torch.float32, torch.bfloat16),
    "kda_lb_long_k128": ("kda", LB, dict(B=1, T=2048, H=8, K=128, V=128), torch.bfloat16, torch.bfloat16),
}


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run(name: str, seed: int, family: str = "mma16", debug: dict | None = None):
    op, options, shape, g_dtype, beta_dtype = CASES[name]
    reference_opts = {k: v for k, v in options.items() if k != "safe_gate"}
    if options.get("safe_gate"):
        reference_opts.pop("lower_bound")            # without the in-kernel gate, g itself is the decay
    opt = Options(op=op, **reference_opts)
    x = make_inputs(opt, generator=torch.Generator().manual_seed(seed), **shape)
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": g_dtype, "beta": beta_dtype}
    xk = {n: t.cuda() if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).cuda().contiguous()
          for n, t in x.items()}
    x64 = {n: t.cpu() if n == "cu_seqlens" else t.double().cpu() for n, t in xk.items()}
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=True,
                     cu_seqlens=xk.get("cu_seqlens"), A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, family=family)
    x = {**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": xk.get("cu_seqlens")}
    o, ht, saved = forward(x, kcall, FAMILIES[family], poison=True, debug=debug)
    torch.cuda.synchronize()
    return o, ht, saved, x64, opt, x, kcall


def needs_hopper(family: str) -> None:
    if family == "wgmma64" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma64 runs on compute capability 9.0 only")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_against_reference(name, family):
    needs_hopper(family)
    seed = random.randrange(2 ** 31)
    o, ht, saved, x64, opt, _, _ = run(name, seed, family)
    o_ref, ht_ref = chunked(x64, opt, 16)
    where = f"{name} on {family} (seed {seed})"
    assert not torch.isnan(o).any(), f"{where}: NaN in o ({torch.isnan(o).sum().item()} elements)"
    assert not torch.isnan(ht).any(), f"{where}: NaN in the final state"
    eo, eh = rel(o, o_ref), rel(ht, ht_ref)
    assert eo <= BOUND and eh <= BOUND, f"{where}: relative L2 o {eo:.2e}, final state {eh:.2e} (bound {BOUND})"


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("name", ["kda_lb_factored_k128", "kda_precomputed_varlen_k128", "gdn_softplus_k128"])
def test_prepare_workspace(name, family):
    """prepare alone, term by term (localises a failure of the test above to prepare or the recurrence)."""
    needs_hopper(family)
    seed = random.randrange(2 ** 31)
    ws = {}
    _, _, _, x64, opt, _, _ = run(name, seed, family, debug=ws)
    errors = workspace_errors(ws, x64, opt, family_of(family).chunk)
    tail = errors.pop("tail_max")
    tol = {n: WORKSPACE_TOL.get(n, WORKSPACE_TOL["bf16" if n in ws and ws[n].dtype == torch.bfloat16 else "f32"])
           for n in errors}
    bad = {k: f"{e:.2e}" for k, e in errors.items() if not e <= tol[k]}
    assert tail == 0 and not bad, f"{name} on {family} (seed {seed}): workspace errors {bad}, tail rows max |x| {tail}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_deterministic(family):
    needs_hopper(family)
    name = "kda_precomputed_varlen_k128"
    seed = random.randrange(2 ** 31)
    o1, h1, _, _, _, x, kcall = run(name, seed, family)
    o2, h2, _ = forward(x, kcall, FAMILIES[family], poison=True)
    assert torch.equal(o1, o2) and torch.equal(h1, h2), f"{name} on {family} (seed {seed}): two runs differ"


def test_wgmma64_value_rows_split_over_ctas(monkeypatch):
    """wgmma64's recurrence with a CTA per 64 value rows (SPLIT_VALUE, the default) gives the
    one-CTA kernel's o and final state bit for bit, within the float64 bound."""
    from kdagen.ops import launcher
    from kdagen.plan.families.wgmma64 import forward as wgmma64_forward
    needs_hopper("wgmma64")
    name, seed = "kda_lb_long_k128", random.randrange(2 ** 31)
    runs = []
    try:
        for split in (False, True):
            monkeypatch.setattr(wgmma64_forward, "SPLIT_VALUE", split)
            launcher.forget_plans()
            runs.append(run(name, seed, "wgmma64"))
            x, kcall = runs[-1][5], runs[-1][6]
            assert call_config(x, kcall, False).planned()[0].kernel("recurrence").options.slices == (2 if split else 1)
    finally:
        launcher.forget_plans()
    (o1, h1, _, x64, opt, _, _), (o2, h2, *_) = runs
    o_ref, _ = chunked(x64, opt, 16)
    assert torch.equal(o1, o2) and torch.equal(h1, h2), f"{name} (seed {seed}): the split kernel differs"
    assert rel(o2, o_ref) <= BOUND, f"{name} (seed {seed}): o {rel(o2, o_ref):.2e}"
