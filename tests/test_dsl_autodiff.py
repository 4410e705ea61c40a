"""Derived backward graphs: recurrences defined only here get correct gradients with no code elsewhere.

Each recurrence is checked three ways: the derived backward (interpret.backward) against
torch.autograd through the interpreter's forward, and both against an independent torch
transcription differentiated through kdagen.reference's token recurrence.
"""
import dataclasses
import json

import networkx as nx
import pytest
import torch
import torch.nn.functional as F

from kdagen import dsl
from kdagen import reference as R
from kdagen.dsl.ops import OPS

B, T, H, K, V = 1, 19, 2, 8, 6


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


# ---- recurrences defined only in this file, each with an independent torch transcription ----

def tempered_logsigmoid(r):
    """A new gate activation (logsigmoid with a per-head temperature) and a new β map (1/√(1+b²))."""
    q, k = r.token_input("q", "K"), r.token_input("k", "K")
    v = r.token_input("v", "V")
    g, b = r.token_input("g", "K"), r.token_input("b")
    temp, bias = r.head_param("temp"), r.head_param("bias", "K")
    decay = dsl.log(dsl.sigmoid((g + bias) / dsl.exp(temp)))
    beta = dsl.rsqrt(1 + dsl.square(b))
    query = q * dsl.rsqrt(dsl.rowsum(dsl.square(q)) + 1.0)        # a soft row norm
    r.delta_rule(query=query, key=dsl.l2norm(k), value=v, beta=beta, decay=decay, scale=r.scalar("scale"))


def tempered_logsigmoid_torch(x):
    HV = x["v"].shape[2]
    decay = F.logsigmoid((x["g"] + x["bias"].view(HV, K)) / x["temp"].exp().view(HV, 1))
    beta = (1 + x["b"] ** 2).rsqrt()
    q = x["q"] * ((x["q"] ** 2).sum(-1, keepdim=True) + 1.0).rsqrt()
    k = x["k"] * ((x["k"] ** 2).sum(-1, keepdim=True) + 1e-6).rsqrt()
    return q, k, x["v"], decay, beta


def shared_qk_head_gates(r):
    """Fan-out and broadcasting: one node is query and key, x·x, a per-head β and a per-head decay."""
    k, v, w = r.token_input("k", "K"), r.token_input("v", "V"), r.token_input("w")
    b0, A = r.head_param("b0"), r.head_param("A")
    kn = dsl.l2norm(k)
    gate = dsl.expand(dsl.sigmoid(w * w), "V")                       # a value gate, () -> (V,)
    r.delta_rule(query=kn, key=kn, value=v * gate, beta=dsl.sigmoid(b0), decay=-dsl.exp(A) * 0.5, scale=0.3)


def shared_qk_head_gates_torch(x):
    Bx, Tx, HV = x["v"].shape[:3]
    kn = x["k"] * ((x["k"] ** 2).sum(-1, keepdim=True) + 1e-6).rsqrt()
    v = x["v"] * torch.sigmoid(x["w"] * x["w"])[..., None]
    beta = torch.sigmoid(x["b0"]).expand(Bx, Tx, HV)
    decay = (-x["A"].exp() * 0.5).expand(Bx, Tx, HV)
    return kn, kn, v, decay, beta


CASES = {
    "tempered_logsigmoid": (tempered_logsigmoid, tempered_logsigmoid_torch,
                            {"q": "token K qk", "k": "token K qk", "v": "token V", "g": "token K", "b": "token",
                             "temp": "head", "bias": "head K"}),
    "shared_qk_head_gates": (shared_qk_head_gates, shared_qk_head_gates_torch,
                             {"k": "token K qk", "v": "token V", "w": "token", "b0": "head", "A": "head"}),
}


def _inputs(spec, G, gen, cu_seqlens=None):
    HV = H * G
    Bx, Tx = (1, cu_seqlens[-1]) if cu_seqlens else (B, T)
    N = len(cu_seqlens) - 1 if cu_seqlens else Bx
    x = {}
    for name, desc in spec.items():
        kind, *rest = desc.split()
        heads = H if "qk" in rest else HV
        dims = [{"K": K, "V": V}[d] for d in rest if d in "KV"]
        shape = [Bx, Tx, heads, *dims] if kind == "token" else [heads, *dims]
        x[name] = 0.7 * torch.randn(*shape, generator=gen, dtype=torch.float64)
    x["initial_state"] = torch.randn(N, HV, K, V, generator=gen, dtype=torch.float64) / K ** 0.5
    if cu_seqlens:
        x["cu_seqlens"] = torch.tensor(cu_seqlens)
    return x


@pytest.mark.parametrize("G, cu", [(1, None), (2, None), (1, [0, 5, 6, 23])], ids=["plain", "gva2", "varlen"])
@pytest.mark.parametrize("case", list(CASES))
def test_new_recurrence_gets_a_correct_backward(case, G, cu):
    rec, torch_rec, spec = CASES[case]
    r = dsl.build(rec)
    gen = torch.Generator().manual_seed(7)
    x = _inputs(spec, G, gen, cu)
    scale = 0.3 if "scale" not in r.scalars else 0.45
    names = [*spec, "initial_state"]

    # independent ground truth: the torch transcription through the token recurrence, autograd
    leaves = {n: x[n].clone().requires_grad_(True) for n in names}
    xt = {**x, **leaves}
    o_ref, ht_ref = R.delta_rule_recurrent(*torch_rec(xt), scale, xt["initial_state"], x.get("cu_seqlens"))
    do = torch.randn(o_ref.shape, generator=gen, dtype=o_ref.dtype)
    dht = torch.randn(ht_ref.shape, generator=gen, dtype=ht_ref.dtype)
    truth = dict(zip(names, torch.autograd.grad((o_ref * do).sum() + (ht_ref * dht).sum(), list(leaves.values()))))

    kw = dict(scale=scale if "scale" in r.scalars else None, chunk_size=8)
    leaves = {n: x[n].clone().requires_grad_(True) for n in names}
    o, ht = dsl.interpret.forward(r, {**x, **leaves}, **kw)
    assert rel(o, o_ref) <= 1e-12 and rel(ht, ht_ref) <= 1e-12
    auto = dict(zip(names, torch.autograd.grad((o * do).sum() + (ht * dht).sum(), list(leaves.values()))))
    derived = dsl.interpret.backward(r, x, do, dht, **kw)
    assert set(derived) == set(names)
    for n in names:
        assert rel(derived[n], auto[n]) <= 1e-10, (n, rel(derived[n], auto[n]))
        assert rel(derived[n], truth[n]) <= 1e-10, (n, rel(derived[n], truth[n]))


def test_a_wrong_adjoint_is_caught(monkeypatch):
    """The check can fail: a sigmoid adjoint missing its (1 − y) factor breaks the gradient match."""
    wrong = dataclasses.replace(OPS["sigmoid"], adjoint=lambda c, i: c.dy * c.out)
    monkeypatch.setitem(OPS, "sigmoid", wrong)
    r = dsl.build(tempered_logsigmoid)
    x = _inputs(CASES["tempered_logsigmoid"][2], 1, torch.Generator().manual_seed(3))
    leaf = x["g"].clone().requires_grad_(True)
    o, _ = dsl.interpret.forward(r, {**x, "g": leaf}, scale=0.4, chunk_size=8)
    auto = torch.autograd.grad(o.sum(), leaf)[0]
    derived = dsl.interpret.backward(r, x, torch.ones_like(o), scale=0.4, chunk_size=8)["g"]
    assert rel(derived, auto) > 1e-3


# ---- the backward graph's contract -------------------------------------------------------------

def test_backward_graph_contract():
    r = dsl.build(tempered_logsigmoid)
    bwd = dsl.autodiff.backward(r)
    G = bwd.graph
    assert nx.is_directed_acyclic_graph(G)
    assert bwd.seeds == {role: f"d_{role}" for role in ("query", "key", "value", "beta", "decay")}
    assert G.nodes["d_decay"]["shape"] == ("K",) and G.nodes["d_beta"]["shape"] == ()
    assert bwd.outputs == {n: f"grad_{n}" for n in ("q", "k", "v", "g", "b", "temp", "bias")}
    for name, node in bwd.outputs.items():
        assert G.nodes[node]["op"] == "grad" and G.nodes[node]["shape"] == r.graph.nodes[name]["shape"]
        assert G.nodes[node]["kind"] == r.graph.nodes[name]["kind"]
    vocab = set(OPS) | {"token_input", "head_param", "scalar", "const", "seed", "saved", "grad"}
    assert {a["op"] for _, a in G.nodes(data=True)} <= vocab
    for node in ("grad_temp", "grad_bias"):        # per-head parameter gradients: sums over tokens
        assert any(G.nodes[a]["op"] == "sum_tokens" for a in nx.ancestors(G, node))
    assert bwd.core["operands"] == r.core_operands() and bwd.core["decay_kind"] == "vector"
    fwd_ids = set(r.graph)
    for n, a in G.nodes(data=True):
        if a["op"] == "saved":
            assert n in fwd_ids and r.graph.nodes[n]["saved"] and a["source_op"] == r.graph.nodes[n]["op"]
        elif n in fwd_ids and a["op"] in OPS:
            assert not r.graph.nodes[n]["saved"]  # recomputed under its forward id
    assert set(bwd.saved) <= {n for n, a in r.graph.nodes(data=True) if a["saved"]}
    doc = json.loads(bwd.to_json())
    assert doc["seeds"] == bwd.seeds and bwd.to_json() == dsl.autodiff.backward(r).to_json()


def test_fan_out_is_summed():
    """query and key are one node: its gradient is d_query + d_key; w·w contributes twice."""
    r = dsl.build(shared_qk_head_gates)
    bwd = dsl.autodiff.backward(r)
    kn = r.core_operands()["query"]
    assert r.core_operands()["key"] == kn
    G = bwd.graph
    adds = [n for n, a in G.nodes(data=True) if a["op"] == "add" and set(a["args"]) == {"d_query", "d_key"}]
    assert len(adds) == 1
    assert G.nodes["d_beta"]["kind"] == "token" and G.nodes["grad_b0"]["kind"] == "head"
    assert "d_decay" in bwd.seeds.values() and G.nodes["d_decay"]["shape"] == ()


@pytest.mark.parametrize("case", list(CASES))
def test_recompute_everything_gives_the_same_gradients(case):
    rec, _, spec = CASES[case]
    r = dsl.build(rec)
    x = _inputs(spec, 2, torch.Generator().manual_seed(11))
    do = torch.randn(B, T, 2 * H, V, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    full = dsl.autodiff.backward(r, saved=())
    assert full.saved == () and all(a["op"] != "saved" for _, a in full.graph.nodes(data=True))
    kw = dict(chunk_size=8, scale=0.5 if "scale" in r.scalars else None)
    a = dsl.interpret.backward(r, x, do, **kw)
    b = dsl.interpret.backward(r, x, do, **kw, bwd=full)
    for n in a:
        assert torch.equal(a[n], b[n]) or rel(a[n], b[n]) <= 1e-14, n


def test_saved_must_name_forward_ops():
    r = dsl.build(tempered_logsigmoid)
    with pytest.raises(dsl.DSLError, match="node 'q': only forward op nodes can be saved"):
        dsl.autodiff.backward(r, saved=["q"])
