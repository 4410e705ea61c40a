"""Recurrences the package does not ship, run through the public entry point (kdagen.compile) forward and
backward against the float64 DSL interpreter (kdagen.testing): on the CPU through the emulator
(tests/test_recurrence_op.py) and on a GPU (tests/gpu/test_recurrence_op_gpu.py)."""
from __future__ import annotations

import torch

import kdagen
from kdagen import dsl, testing


def bounded_gate(r, lower_bound: float = -4.0):
    """A per-channel gate proven in [lower_bound, 0] (the factored form), a head parameter of its own scaling it,
    and a β map of its own in (0.25, 0.75)."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    decay = lower_bound * dsl.sigmoid(g * r.head_param("w", "K"))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=0.25 + 0.5 * dsl.sigmoid(beta),
                 decay=decay, scale=r.scalar("scale"))


def three_parameters(r):
    """A bounded per-channel gate with two head parameters of its own and a third in β's map: at head dim 128
    wgmma64's prepare_bwd stages the third parameter's row partials in its second factor tile."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    decay = -3.0 * dsl.sigmoid(g * r.head_param("w", "K") + r.head_param("shift", "K"))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(beta + r.head_param("b")),
                 decay=decay, scale=r.scalar("scale"))


def unbounded_gate(r):
    """A per-channel gate with no lower bound (the relative form): −softplus(x + bias)·temperature, a bias per
    channel and head, a temperature scalar declared in [0.5, 2]; inputs named freely."""
    x, key, val = r.token_input("x", "K"), r.token_input("key", "K"), r.token_input("val", "V")
    gate, write = r.token_input("gate", "K", dtype="bf16"), r.token_input("write")
    decay = -dsl.softplus(gate + r.head_param("bias", "K")) * r.scalar("temperature", bounds=(0.5, 2.0))
    r.delta_rule(query=dsl.l2norm(x), key=dsl.l2norm(key), value=val, beta=dsl.sigmoid(write), decay=decay,
                 scale=r.scalar("scale"))


def per_head_gate(r):
    """One decay per head and token: −e^a·σ(g)², a per-head parameter a; β = 2σ(b)·σ(−b) ∈ (0, 0.5]; q not
    normalised."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, b = r.token_input("g"), r.token_input("beta")
    decay = -dsl.exp(r.head_param("a")) * dsl.square(dsl.sigmoid(g))
    r.delta_rule(query=q, key=dsl.l2norm(k), value=v, beta=2 * dsl.sigmoid(b) * dsl.sigmoid(-b), decay=decay,
                 scale=r.scalar("scale"))


def two_gate_inputs(r):
    """A per-channel gate of two token inputs, −3·σ(g·w + u): four row inputs (q, k, g, u) are more than the three
    fp32 tiles wgmma64's prepare stages them in, so its prologue loads them into registers."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, u, beta = r.token_input("g", "K"), r.token_input("u", "K"), r.token_input("beta")
    decay = -3.0 * dsl.sigmoid(g * r.head_param("w", "K") + u)
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(beta), decay=decay,
                 scale=r.scalar("scale"))


def channel_scaled_query(r):
    """A per-head decay −softplus(g) with the query scaled per channel by a token input, q ⊙ σ(u): not q times one
    number per row, so wgmma64's prepare multiplies q̂, k̂ as bf16 hi + lo tiles (operands "split"), where GDN's
    take q and k as loaded."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    u, g, b = r.token_input("u", "K", dtype="bf16"), r.token_input("g"), r.token_input("beta")
    r.delta_rule(query=q * dsl.sigmoid(u), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(b), decay=-dsl.softplus(g),
                 scale=r.scalar("scale"))


CASES = {
    # name: (recurrence, shape and call keywords for kdagen.testing.random_inputs[, kdagen.compile's keywords])
    "bounded_gate_varlen_gva2": (bounded_gate, dict(H=1, G=2, cu_seqlens=(0, 5, 5, 38))),
    "three_parameters_k128_gva2_wgmma64": (three_parameters, dict(H=1, G=2, T=70, head_dim=128),
                                           dict(family="wgmma64")),
    "unbounded_gate_batch2": (unbounded_gate, dict(H=2, B=2, T=21, scalars={"temperature": 1.3, "scale": 0.2},
                                                   f32_inputs=("write",))),
    # the temperature learned: a 0-d tensor that requires grad
    "unbounded_gate_learned_scalar": (unbounded_gate, dict(H=1, G=2, T=30, scalars={
        "temperature": torch.tensor(0.8, requires_grad=True)})),
    "per_head_gate_vfirst_gva2": (per_head_gate, dict(H=1, G=2, T=35, state_v_first=True, f32_inputs=("g",))),
    "two_gate_inputs_k128_wgmma64": (two_gate_inputs, dict(H=1, T=70, head_dim=128), dict(family="wgmma64")),
    "channel_scaled_query_k128_wgmma64": (channel_scaled_query, dict(H=1, T=70, head_dim=128),
                                          dict(family="wgmma64")),
    # wgmma64's operands "raw" with one row number of two (k_rs; q as given)
    "per_head_gate_k128_wgmma64": (per_head_gate, dict(H=1, T=70, head_dim=128), dict(family="wgmma64")),
}


def compiled(name: str, **kw):
    return kdagen.compile(CASES[name][0], **{**(CASES[name][2] if len(CASES[name]) > 2 else {}), **kw})


def check(op, where: str, errs: dict) -> None:
    bad = [n for n, e in errs.items() if not e <= testing.bound(op, n)]
    assert not bad, f"{where}: {bad} off\n" + testing.report(op, errs)
