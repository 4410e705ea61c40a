"""Building recurrences: graph contract, inspection output, and malformed recurrences rejected."""
import json

import networkx as nx
import pytest
import torch

from kdagen import dsl
from kdagen.recurrences import kda


def design_kda(r, lower_bound=-5.0):
    """The recurrence the README shows (KDA's, written in the DSL), verbatim."""
    q, k = r.token_input("q", "K"), r.token_input("k", "K")
    v = r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    A_log, dt_bias = r.head_param("A_log"), r.head_param("dt_bias", "K")
    a = lower_bound * dsl.sigmoid(dsl.exp(A_log) * (g + dt_bias))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v,
                 beta=dsl.sigmoid(beta), decay=a, scale=r.scalar("scale"))


def test_graph_contract():
    r = dsl.build(design_kda)
    G = r.graph
    assert isinstance(G, nx.DiGraph) and r.name == "design_kda"
    assert G.nodes["q"] == {**G.nodes["q"], "op": "token_input", "name": "q", "shape": ("K",), "kind": "token",
                            "dtype": "f32"}
    assert G.nodes["A_log"]["kind"] == "head" and G.nodes["A_log"]["shape"] == ()
    assert G.nodes["dt_bias"]["kind"] == "head" and G.nodes["dt_bias"]["shape"] == ("K",)
    assert G.nodes["scale"]["kind"] == "scalar"
    ops = r.core_operands()
    assert set(ops) == {"query", "key", "value", "beta", "decay", "scale"} and ops["value"] == "v"
    assert r.core.startswith("delta_rule_") and G.nodes[r.core]["op"] == "delta_rule"
    assert r.decay_kind == "vector"
    for role, node in ops.items():
        assert G.edges[node, r.core]["role"] == role
    decay = G.nodes[ops["decay"]]
    assert decay["op"] == "mul" and decay["shape"] == ("K",) and decay["kind"] == "token"
    const, sig = decay["args"]
    assert G.nodes[const] == {**G.nodes[const], "op": "const", "value": -5.0, "kind": "const"}
    assert G.edges[const, ops["decay"]]["arg"] == 0 and G.edges[sig, ops["decay"]]["arg"] == 1
    assert G.nodes[ops["query"]]["eps"] == 1e-6
    # exp(A_log) is per head; multiplied with a token row it becomes a token row
    mul = G.nodes[G.nodes[sig]["args"][0]]
    assert [G.nodes[a]["kind"] for a in mul["args"]] == ["head", "token"] and mul["kind"] == "token"
    for node_id, a in G.nodes(data=True):
        if a["op"] not in ("token_input", "head_param", "scalar", "delta_rule"):
            assert node_id == f"{a['op']}_{node_id.rsplit('_', 1)[1]}"
        assert set(G.predecessors(node_id)) == set(a["args"])


def test_topo_prologue_is_ordered_and_complete():
    r = dsl.build(design_kda)
    order = dsl.topo_prologue(r)
    G = r.graph
    assert set(order) == {n for n, a in G.nodes(data=True) if a["op"] in dsl.ops.OPS}
    pos = {n: i for i, n in enumerate(order)}
    for n in order:
        assert all(pos[a] < pos[n] for a in G.nodes[n]["args"] if a in pos)
    assert set(r.core_operands().values()) - {"v", "scale"} <= set(order)


def test_saved_marks():
    """Save what the backward reads and is O(T·D); recompute per-head and per-token scalar values."""
    r = dsl.build(design_kda)
    G, ops = r.graph, r.core_operands()
    saved = {n for n, a in G.nodes(data=True) if a["saved"] and a["op"] in dsl.ops.OPS}
    assert {ops["query"], ops["key"], ops["decay"]} <= saved
    for n in saved:
        assert G.nodes[n]["kind"] == "token" and G.nodes[n]["shape"]
    assert not G.nodes[ops["beta"]]["saved"]                       # per-token scalar: recomputed
    exp_node = next(n for n, a in G.nodes(data=True) if a["op"] == "exp")
    assert not G.nodes[exp_node]["saved"]                          # per-head: recomputed
    assert all("saved" in a for _, a in G.nodes(data=True))


def test_to_json_is_stable_and_complete():
    a, b = dsl.build(design_kda).to_json(), dsl.build(design_kda).to_json()
    assert a == b
    doc = json.loads(a)
    assert doc["name"] == "design_kda" and doc["decay_kind"] == "vector"
    assert doc["core_operands"]["value"] == "v"
    ids = [n["id"] for n in doc["nodes"]]
    assert len(ids) == len(set(ids)) == len(dsl.build(design_kda).graph)
    assert list(doc) == sorted(doc) and all(list(n) == sorted(n) for n in doc["nodes"])
    assert all(isinstance(e["arg"], int) for e in doc["edges"])
    g = next(n for n in json.loads(kda.build(lower_bound=-5.0).to_json())["nodes"] if n["id"] == "g")
    assert g["bounds"] == [-5.0, 0.0]
    g = next(n for n in json.loads(kda.build().to_json())["nodes"] if n["id"] == "g")
    assert g["bounds"] == [None, 0.0]                               # -inf written as null


def test_to_dot():
    r = dsl.build(design_kda)
    dot = r.to_dot()
    assert dot.startswith('digraph "design_kda" {') and dot.rstrip().endswith("}")
    assert dot.count("->") == r.graph.number_of_edges()
    assert '"l2norm_' in dot and f'-> "{r.core}" [label="decay"]' in dot
    back = dsl.autodiff.backward(r).to_dot()
    assert '"d_decay"' in back and '"grad_A_log"' in back


def test_operators_and_numbers():
    def rec(r):
        x, y = r.token_input("x", "K"), r.token_input("y", "K")
        v, b = r.token_input("v", "V"), r.token_input("b")
        e = 1 - x / 2 + (-y) * 3 - (2 / (1 + dsl.square(x))) + dsl.neg(dsl.sub(x, y))
        r.delta_rule(query=x, key=y, value=v, beta=b, decay=e + 0.5, scale=0.25)
    r = dsl.build(rec)
    ops = [r.graph.nodes[n]["op"] for n in dsl.topo_prologue(r)]
    assert sorted(set(ops)) == ["add", "div", "mul", "neg", "square", "sub"]
    consts = [a["value"] for _, a in r.graph.nodes(data=True) if a["op"] == "const"]
    assert len(consts) == len(set(consts))                         # one node per distinct constant
    assert r.graph.nodes[r.core_operands()["scale"]]["value"] == 0.25


# ---- malformed recurrences: each rejected, naming the node and the problem --------------------

def _base(r, **over):
    """A valid recurrence; `over` replaces core operands (functions of the inputs dict)."""
    x = {"q": r.token_input("q", "K"), "k": r.token_input("k", "K"), "v": r.token_input("v", "V"),
         "g": r.token_input("g", "K"), "beta": r.token_input("beta")}
    ops = dict(query=x["q"], key=x["k"], value=x["v"], beta=x["beta"], decay=x["g"])
    ops.update({role: f(r, x) for role, f in over.items()})
    if "scale" not in ops:
        ops["scale"] = r.scalar("scale")
    r.delta_rule(**ops)


def _unknown_dim(r):
    r.token_input("q", "D")


def _token_dim_T(r):
    r.token_input("q", "T")


def _param_dim_T(r):
    r.head_param("A_log", "T")


def _shape_mismatch(r):
    _base(r, decay=lambda r, x: x["g"] + x["v"])


def _unused_input(r):
    r.token_input("extra", "K")
    _base(r)


def _unused_param(r):
    r.head_param("w", "K")
    _base(r)


def _dead_value(r):
    _base(r, decay=lambda r, x: (dsl.exp(x["g"]), x["g"])[1])


def _no_core(r):
    r.token_input("q", "K")


def _two_cores(r):
    _base(r)
    r.delta_rule(**dict(zip(("query", "key", "value", "beta", "decay", "scale"),
                            (r.value(n) for n in ("q", "k", "v", "beta", "g", "scale")))))


def _cycle(r):
    _base(r)
    r.graph.add_edge(r.core, "q", arg=0)


def _query_shape(r):
    _base(r, query=lambda r, x: x["v"])


def _decay_shape(r):
    _base(r, decay=lambda r, x: dsl.exp(x["v"]))


def _beta_shape(r):
    _base(r, beta=lambda r, x: x["g"])


def _scale_kind(r):
    _base(r, scale=lambda r, x: x["beta"])


def _query_kind(r):
    _base(r, query=lambda r, x: r.head_param("w", "K"))


def _l2norm_of_scalar(r):
    _base(r, beta=lambda r, x: dsl.l2norm(x["beta"]))


def _duplicate_name(r):
    r.token_input("q", "K")
    r.head_param("q", "K")


def _reserved_name(r):
    r.token_input("initial_state", "K")


def _foreign_value(r):
    other = dsl.Recurrence("other")
    _base(r, decay=lambda r, x: x["g"] * other.token_input("z", "K"))


def _bad_operand(r):
    _base(r, decay=lambda r, x: x["g"] * "0.5")


def _backward_only_op(r):
    _base(r, beta=lambda r, x: dsl.expr.apply("sum_tokens", x["beta"]))


def _edited_shape(r):
    _base(r, decay=lambda r, x: -dsl.softplus(x["g"]))
    r.graph.nodes[r.core_operands()["decay"]]["shape"] = ()


MALFORMED = [
    (_unknown_dim, "q", "unknown dim 'D'"),
    (_token_dim_T, "q", "T is implicit for token inputs"),
    (_param_dim_T, "A_log", "does not vary over tokens"),
    (_shape_mismatch, "add_", "shape mismatch: 'g' has ('K',), 'v' has ('V',)"),
    (_unused_input, "extra", "unused input"),
    (_unused_param, "w", "unused parameter"),
    (_dead_value, "exp_", "unused value"),
    (_no_core, None, "has no core"),
    (_two_cores, "delta_rule_", "two cores"),
    (_cycle, "", "cycle: "),
    (_query_shape, "delta_rule_", "query must have shape ('K',), got ('V',) from 'v'"),
    (_decay_shape, "delta_rule_", "decay must have shape ('K',) or ()"),
    (_beta_shape, "delta_rule_", "beta must have shape ()"),
    (_scale_kind, "delta_rule_", "scale must be of kind const or scalar, got 'token'"),
    (_query_kind, "delta_rule_", "query must be of kind token, got 'head' from 'w'"),
    (_l2norm_of_scalar, "l2norm_", "needs a row"),
    (_duplicate_name, "q", "declared twice"),
    (_reserved_name, "initial_state", "is reserved"),
    (_foreign_value, "mul_", "operand 1 ('z') belongs to graph 'other'"),
    (_bad_operand, "mul_", "operand 1 must be a DSL value or a number, got str"),
    (_backward_only_op, "sum_tokens_", "exists only in backward graphs"),
    (_edited_shape, "neg_", "shape is () but its operands give ('K',)"),
]


@pytest.mark.parametrize("build, node, problem", MALFORMED, ids=[m[0].__name__.strip("_") for m in MALFORMED])
def test_malformed_recurrence_is_rejected(build, node, problem):
    with pytest.raises(dsl.DSLError) as err:
        dsl.build(build)
    e = err.value
    assert problem in str(e)
    if node is None:
        assert e.node is None and "'_no_core'" in str(e)
    else:
        assert e.node is not None and e.node.startswith(node) and repr(e.node) in str(e)


def test_cycle_error_names_the_cycle():
    with pytest.raises(dsl.DSLError, match=r"cycle: .*delta_rule_\d+ -> q|cycle: q -> .*delta_rule"):
        dsl.build(_cycle)


# ---- errors of a call on a valid recurrence -------------------------------------------------

def _inputs(G=1):
    gen = torch.Generator().manual_seed(0)
    H, HV = 2, 2 * G
    t = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)   # noqa: E731
    return {"q": t(1, 9, H, 8), "k": t(1, 9, H, 8), "v": t(1, 9, HV, 6), "g": -t(1, 9, HV, 8).abs(),
            "beta": t(1, 9, HV).sigmoid()}


def test_interpreter_rejects_bad_calls():
    r = dsl.build(_base)
    x = _inputs()
    with pytest.raises(dsl.DSLError, match="'g'.*missing"):
        dsl.interpret.forward(r, {k: v for k, v in x.items() if k != "g"})
    with pytest.raises(dsl.DSLError, match=r"\['A_log'\] are not read"):
        dsl.interpret.forward(r, {**x, "A_log": torch.zeros(2)})
    with pytest.raises(dsl.DSLError, match="node 'k': has K = 7, but an earlier input has K = 8"):
        dsl.interpret.forward(r, {**x, "k": x["k"][..., :7]})
    with pytest.raises(dsl.DSLError, match="scale=0.5 given, but recurrence 'shared' has no scalar"):
        dsl.interpret.forward(dsl.build(lambda r: _base(r, scale=lambda r, x: 0.25), name="shared"), x, scale=0.5)
    with pytest.raises(dsl.DSLError, match=r"node 'v': token input of shape \('V',\) must be \[B,T,heads,V\]"):
        dsl.interpret.forward(r, {**x, "v": x["v"][0]})


def test_interpreter_rejects_mixing_qk_heads_with_value_heads():
    def rec(r):
        _base(r, query=lambda r, x: x["q"] * r.head_param("w", "K"))
    r = dsl.build(rec)
    x = _inputs(G=2)
    with pytest.raises(dsl.DSLError, match=r"node 'mul_\d+': operands live on different heads \('q' on 2 heads, "
                                           r"'w' on 4 heads\)"):
        dsl.interpret.forward(r, {**x, "w": torch.ones(4, 8, dtype=torch.float64)})
    o, _ = dsl.interpret.forward(r, {**_inputs(G=1), "w": torch.ones(2, 8, dtype=torch.float64)})
    assert o.shape == (1, 9, 2, 6)
