"""Non-finite inputs stay where they are put (flash-linear-attention's isolation): NaN or inf in one token of q, k,
v or g reaches only that token's sequence and the heads that read it, never another sequence of a varlen batch or
another head, forward and backward; a saturated gate keeps every output and gradient finite.

On the GPU through chunk_kda / chunk_gated_delta_rule (run: python -m pytest -m gpu tests/gpu/test_isolation_gpu.py);
the first case also on the CPU through the emulated kernels, on a tiny shape, so CI runs it.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

import kdagen
from kdagen.codegen import emulate
from kdagen.ops import run as ops_run
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs

K = 64
# device -> (H, G, cu_seqlens): an empty sequence, then the poisoned one (index 2), then one after it; the CPU's
# emulated kernels are slow, so its shape is tinier (and has no GVA)
SHAPES = {"cuda": (2, 2, [0, 21, 21, 40, 57]), "cpu": (2, 1, [0, 9, 9, 25, 32])}
BAD_SEQUENCE, BAD_HEAD = 2, 1           # the poisoned token is the 4th of sequence 2, on head 1
SOFTPLUS = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
# name: (op, FLA options, all of them Options fields); the first also runs emulated on the CPU, its keys poisoned
CASES = {
    "kda_softplus": ("kda", SOFTPLUS),
    "kda_lower_bound": ("kda", dict(SOFTPLUS, lower_bound=-5.0)),
    "kda_precomputed": ("kda", dict(use_qk_l2norm_in_kernel=True)),
    "gdn_softplus": ("gdn", SOFTPLUS),
    "gdn_precomputed": ("gdn", {}),
}
QK = ("q", "k")

GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CPU = [pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")]
TARGETS = [pytest.param(name, "cuda", marks=GPU, id=f"{name}-cuda") for name in CASES] + \
    [pytest.param(next(iter(CASES)), "cpu", marks=CPU, id=f"{next(iter(CASES))}-cpu-emulated")]
# each emulated call takes seconds: the CPU poisons k alone (it reaches the state and every backward kernel)
POISONS = [pytest.param(*target.values, poisoned, value, marks=target.marks,
                        id=f"{target.id}-{poisoned}-{value}")
           for target in TARGETS for poisoned in ("q", "k", "v", "g") for value in (math.nan, math.inf)
           if target.values[1] == "cuda" or (poisoned, math.isnan(value)) == ("k", True)]


@pytest.fixture
def device(request, monkeypatch):
    """The device of the test's target; on the CPU the public ops run their kernels emulated."""
    where = request.node.callspec.params["where"]
    if where == "cpu":
        monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))
    return torch.device(where)


def inputs(name: str, device) -> dict:
    """Leaf tensors of a call in the dtypes the ops take, requiring grad (cu_seqlens aside)."""
    op, options = CASES[name]
    H, G, cu = SHAPES[device.type]
    x = make_inputs(Options(op=op, **options), H=H, G=G, K=K, V=K, cu_seqlens=cu,
                    generator=torch.Generator().manual_seed(0))
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.float32,
              "beta": torch.bfloat16, "cu_seqlens": torch.int64}
    return {n: t.to(device=device, dtype=dtypes.get(n, torch.float32)).requires_grad_(n != "cu_seqlens")
            for n, t in x.items()}


def outputs_and_grads(name: str, x: dict) -> dict:
    """o, the final state and the gradient of every leaf, by name ("d_<leaf>")."""
    op, options = CASES[name]
    fn = kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule
    o, ht = fn(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"], output_final_state=True,
               cu_seqlens=x["cu_seqlens"], A_log=x.get("A_log"), dt_bias=x.get("dt_bias"), **options)
    gen = torch.Generator().manual_seed(1)
    do = torch.randn(o.shape, generator=gen).to(o)
    dht = torch.randn(ht.shape, generator=gen).to(ht)
    leaves = {n: t for n, t in x.items() if t.requires_grad}
    grads = torch.autograd.grad((o.float() * do.float()).sum() + (ht * dht).sum(), list(leaves.values()))
    return {"o": o, "final_state": ht, **{f"d_{n}": g for n, g in zip(leaves, grads)}}


def reached(poisoned: str, G: int) -> tuple[set, set]:
    """(q/k heads, value heads) that read the poisoned head: a q/k head serves its G value heads (GVA)."""
    if poisoned in QK:
        return {BAD_HEAD}, set(range(BAD_HEAD * G, BAD_HEAD * G + G))
    return {BAD_HEAD // G}, {BAD_HEAD}


def may_be_poisoned(name: str, t: torch.Tensor, poisoned: str) -> torch.Tensor:
    """Where a non-finite value is allowed in output or gradient `name`: the poisoned sequence's tokens (or state)
    on the heads that read the poisoned head, and those heads' parameters."""
    H, G, cu = SHAPES[t.device.type]
    qk_heads, v_heads = reached(poisoned, G)
    heads = list(qk_heads if name in ("d_q", "d_k") else v_heads)
    mask = torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    if name in ("final_state", "d_initial_state"):
        mask[BAD_SEQUENCE, heads] = True
    elif name in ("d_A_log", "d_dt_bias"):            # [HV] or [HV·K]
        mask.view(H * G, -1)[heads] = True
    else:
        mask[0, cu[BAD_SEQUENCE]:cu[BAD_SEQUENCE + 1], heads] = True
    return mask


@pytest.mark.parametrize("name, where, poisoned, value", POISONS)
def test_a_non_finite_token_stays_in_its_sequence_and_heads(name, where, device, poisoned, value):
    x = inputs(name, device)
    cu = SHAPES[device.type][2]
    token = cu[BAD_SEQUENCE] + 3
    with torch.no_grad():
        x[poisoned][0, token, BAD_HEAD] = value
    out = outputs_and_grads(name, x)
    spread = {n: int((~torch.isfinite(t.float()) & ~may_be_poisoned(n, t, poisoned)).sum()) for n, t in out.items()}
    assert not any(spread.values()), f"{poisoned}={value} at token {token}, head {BAD_HEAD} spread: {spread}"
    if math.isnan(value):       # the poison did reach the output: the check above had something to contain
        assert not torch.isfinite(out["o"][0, token:cu[BAD_SEQUENCE + 1]].float()).all()


@pytest.mark.parametrize("name, where", TARGETS)
def test_a_saturated_gate_stays_finite(name, where, device):
    """Gate inputs at ±1e4 (a precomputed decay at −1e4): decays of about e^−1e4 or none, every output and
    gradient finite."""
    op, options = CASES[name]
    x = inputs(name, device)
    with torch.no_grad():
        sign = torch.ones_like(x["g"])
        sign[:, ::2] = -1
        x["g"].copy_(1e4 * sign if options.get("use_gate_in_kernel") else torch.where(sign > 0, -1e4, x["g"]))
    bad = {n: int((~torch.isfinite(t.float())).sum()) for n, t in outputs_and_grads(name, x).items()}
    assert not any(bad.values()), f"{name}: non-finite elements {bad}"


@pytest.mark.parametrize("where", [pytest.param("cpu", marks=CPU, id="cpu-emulated")])
def test_a_non_finite_value_stays_in_its_sequence_on_the_chunk_64_kernels(where, device, monkeypatch):
    """wgmma64 reads v and dO as 64-token boxes, whose rows past a sequence's end are the next sequence's: a NaN
    there is selected away, not multiplied by a zero (on the CPU's shape the family is named: its pairs are fewer
    than a training call needs to rank it first)."""
    monkeypatch.setenv("KDAGEN_FAMILY", "wgmma64")
    test_a_non_finite_token_stays_in_its_sequence_and_heads(next(iter(CASES)), where, device, "v", math.nan)
