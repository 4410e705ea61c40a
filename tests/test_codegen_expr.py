"""The expression emitter: DSL graphs (forward prologue and backward adjoint) as CUDA blocks.

The emitted blocks are compiled for the host (one token row per "thread", row_sum = identity) and
run against the DSL interpreter on random inputs, so the emitter's semantics are checked, not just
its text."""
from __future__ import annotations

import ctypes
import subprocess

import networkx as nx
import pytest
import torch

from kdagen import dsl
from kdagen.codegen import CodegenError, emit_block, forward_prologue
from kdagen.codegen import emulate
from kdagen.codegen.prologue import row_scaled_outputs
from kdagen.codegen.emulate import _cuda_include
from kdagen.dsl.interpret import run
from kdagen.plan import default_problem
from kdagen.recurrences import gdn, kda

K, T = 16, 9
needs_cxx = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no host build: {emulate.unavailable()}")


def softsign_gate(r):
    """A recurrence only this test defines: a new gate activation and a different β map."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    w = r.head_param("w", "K")
    decay = -3.0 * dsl.square(dsl.sigmoid(g * w))                 # in (-3, 0]
    b = 0.5 + 0.5 * dsl.sigmoid(beta) * dsl.sigmoid(-beta)
    r.delta_rule(query=dsl.l2norm(q), key=k * dsl.rsqrt(1 + dsl.rowsum(dsl.square(k))), value=v, beta=b,
                 decay=decay, scale=r.scalar("scale"))


def _host_run(graph, outputs: dict, seeds=()) -> tuple:
    """Compile the block for the host and a function running it over T token rows of one head."""
    block = emit_block(graph, outputs)
    leaves = [n for n in nx.lexicographical_topological_sort(graph)
              if graph.nodes[n]["op"] in ("token_input", "head_param") and n in block.leaves]
    scalars = sorted({n for o in outputs.values() for n in nx.ancestors(graph, o) if graph.nodes[n]["op"] == "scalar"})
    rows = lambda n: bool(graph.nodes[n]["shape"])  # noqa: E731
    bind = []
    for i, n in enumerate(leaves):
        step = ("t * K" if rows(n) else "t") if graph.nodes[n]["op"] == "token_input" else "0"
        bind.append(f"const float* in_{n}_row = in[{i}] + {step};")
    for i, n in enumerate(scalars):
        bind.append(f"const float sc_{n} = sc[{i}];")
    for i, (role, row) in enumerate(seeds):
        bind.append(f"float seed_{role}[KPT]; kdg::load_row(seed_{role}, sd[{i}] + t * K, true);" if row
                    else f"const float seed_{role} = sd[{i}][t];")
    stores = [f"for (int j = 0; j < KPT; ++j) out[{i}][t * K + j] = {name}[j];" if rows(n) else
              f"out[{i}][t] = {name};" for i, (name, n) in enumerate(outputs.items())]
    src = "\n".join([
        emulate.host_headers(("common",)),
        f"constexpr int K = {K};",
        'extern "C" void prologue(int T, const float* const* in, const float* sc, const float* const* sd, '
        "float* const* out) {",
        "  for (int t = 0; t < T; ++t) {",
        "    constexpr int KPT = K; const bool valid = true; auto row_sum = [](float x) { return x; }; (void)row_sum;",
        *["    " + b for b in bind], block.code, *["    " + s for s in stores], "  }", "}"])
    return src, leaves, scalars


def _compile(src: str, tmp_path) -> ctypes.CDLL:
    (tmp_path / "p.cpp").write_text(src)
    res = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-w", f"-I{_cuda_include()}",
                          str(tmp_path / "p.cpp"), "-o", str(tmp_path / "p.so")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return ctypes.CDLL(str(tmp_path / "p.so"))


def _leaf_values(graph, gen):
    """Random values for every input, parameter and scalar of the graph (the interpreter runs them all)."""
    vals = {}
    for n, a in sorted(graph.nodes(data=True)):
        if a["op"] not in ("token_input", "head_param", "scalar"):
            continue
        shape = {"token_input": (1, T, 1), "head_param": (1,), "scalar": ()}[a["op"]] + ((K,) if a["shape"] else ())
        vals[n] = torch.randn(shape, generator=gen, dtype=torch.float64)
    return vals


def _call(lib, graph, outputs, leaves, scalars, vals, seed_vals=()):
    f32 = {n: vals[n].float().contiguous() for n in leaves}
    ptrs = (ctypes.c_void_p * max(len(leaves), 1))(*[f32[n].data_ptr() for n in leaves])
    sc = torch.tensor([float(vals[n]) for n in scalars] or [0.0], dtype=torch.float32)
    sd_t = [s.float().contiguous() for s in seed_vals]
    sd = (ctypes.c_void_p * max(len(sd_t), 1))(*[s.data_ptr() for s in sd_t])
    outs = {name: torch.zeros(T * (K if graph.nodes[n]["shape"] else 1)) for name, n in outputs.items()}
    optr = (ctypes.c_void_p * len(outs))(*[o.data_ptr() for o in outs.values()])
    lib.prologue(ctypes.c_int(T), ptrs, ctypes.c_void_p(sc.data_ptr()), sd, optr)
    return outs


@needs_cxx
@pytest.mark.parametrize("build", [
    lambda: kda.build(lower_bound=-5.0, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                      use_beta_sigmoid_in_kernel=True),
    lambda: kda.build(use_gate_in_kernel=True, allow_neg_eigval=True, use_beta_sigmoid_in_kernel=True),
    lambda: gdn.build(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True),
    lambda: dsl.build(softsign_gate),
], ids=["kda_lb", "kda_softplus_neg", "gdn", "custom"])
def test_forward_prologue_matches_the_interpreter(build, tmp_path):
    r = build()
    ops = r.core_operands()
    outputs = {"q_hat": ops["query"], "k_hat": ops["key"], "decay": ops["decay"], "beta_val": ops["beta"]}
    src, leaves, scalars = _host_run(r.graph, outputs)
    lib = _compile(src, tmp_path)
    vals = _leaf_values(r.graph, torch.Generator().manual_seed(3))
    got = _call(lib, r.graph, outputs, leaves, scalars, vals)
    ref = run(r.graph, vals, {"B": 1, "T": T, "K": K})
    for name, n in outputs.items():
        want = ref[n].reshape(-1).float()
        err = (got[name] - want).norm() / want.norm()
        assert err < 1e-5, f"{name} ({n}): relative error {err:.2e}"


def per_head_gate_raw_query(r):
    """A per-head decay whose query is q as given and whose key is l2norm(k): one row number (k_rs) of two."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    r.delta_rule(query=q, key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(r.token_input("beta")),
                 decay=-dsl.softplus(r.token_input("g")), scale=r.scalar("scale"))


@needs_cxx
@pytest.mark.parametrize("build, row_scales", [
    (lambda: gdn.build(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True), ("q_rs", "k_rs")),
    (lambda: dsl.build(per_head_gate_raw_query), ("k_rs",)),
], ids=["gdn", "raw_query"])
def test_row_scaled_prologue_times_its_row_numbers_is_the_interpreters_query_and_key(build, row_scales, tmp_path):
    """The "raw" operands' prologue (row_scaled_outputs): q_hat, k_hat as loaded times the emitted numbers per row
    q_rs, k_rs (1 where there is no l2norm) give the interpreter's query and key."""
    r = build()
    scaled, outputs, emitted = row_scaled_outputs(r)
    assert emitted == row_scales
    outputs.pop("scale_val")  # a per-call scalar, as in the test above
    src, leaves, scalars = _host_run(scaled.graph, outputs)
    vals = _leaf_values(r.graph, torch.Generator().manual_seed(5))
    got = _call(_compile(src, tmp_path), scaled.graph, outputs, leaves, scalars, vals)
    ref = run(r.graph, vals, {"B": 1, "T": T, "K": K})
    ops = r.core_operands()
    for out, role in (("q", "query"), ("k", "key")):
        rs = got[f"{out}_rs"].repeat_interleave(K) if f"{out}_rs" in got else 1.0
        want = ref[ops[role]].reshape(-1).float()
        err = (got[f"{out}_hat"] * rs - want).norm() / want.norm()
        assert err < 1e-5, f"{role}: relative error {err:.2e}"


@needs_cxx
@pytest.mark.parametrize("build", [
    lambda: kda.build(lower_bound=-5.0, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                      use_beta_sigmoid_in_kernel=True),
    lambda: gdn.build(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True),
    lambda: dsl.build(softsign_gate),
], ids=["kda_lb", "gdn", "custom"])
def test_adjoint_block_matches_the_interpreter(build, tmp_path):
    """The backward graph emitted per token: token gradients exactly, per-head gradients as per-token
    terms whose sum over tokens is the interpreter's (the kernels reduce them in a fixed order)."""
    r = build()
    b = dsl.autodiff.backward(r, saved=())
    outputs = {f"d_{name}": node for name, node in b.outputs.items() if name != "v"}
    seeds = [(role, bool(b.graph.nodes[s]["shape"])) for role, s in b.seeds.items() if role != "value"]
    src, leaves, scalars = _host_run(b.graph, outputs, seeds)
    lib = _compile(src, tmp_path)
    gen = torch.Generator().manual_seed(5)
    vals = _leaf_values(b.graph, gen)
    seed_vals = [torch.randn((1, T, 1) + ((K,) if row else ()), generator=gen, dtype=torch.float64)
                 for _, row in seeds]
    got = _call(lib, b.graph, outputs, leaves, scalars, vals, seed_vals)
    leaf_vals = {**vals, **{b.seeds[role]: v for (role, _), v in zip(seeds, seed_vals)},
                 b.seeds["value"]: torch.randn(1, T, 1, K, generator=gen, dtype=torch.float64)}
    ref = run(b.graph, leaf_vals, {"B": 1, "T": T, "K": K, "V": K})
    for name, n in outputs.items():
        a = b.graph.nodes[n]
        want = ref[n].reshape(-1).float()
        mine = got[name]
        if a["kind"] == "head":        # per-token terms: their sum over tokens is the gradient
            mine = mine.reshape(T, -1).sum(0)
        err = (mine - want).norm() / want.norm()
        assert err < 1e-5, f"{name} ({n}): relative error {err:.2e}"


def test_emitted_forward_prologue_names_its_inputs():
    plan_problem = default_problem("kda")
    p = forward_prologue(plan_problem.recurrence, {"in_q": "bf16", "in_k": "bf16", "in_g": "bf16", "in_beta": "bf16",
                                                   "in_A_log": "f32", "in_dt_bias": "f32"})
    heads = {x["name"]: x["heads"] for x in p.inputs}
    assert heads == {"q": "H", "k": "H", "g": "HV", "beta": "HV", "A_log": "HV", "dt_bias": "HV"}
    assert {x["name"]: (x["param"], x["ptr"]) for x in p.inputs}["A_log"] == ("in_A_log", "in_A_log_row")
    for needle in ("float q_hat[KPT]", "row_sum(ss)", "kdg::sigmoid", "const float beta_val", "1e-06f"):
        assert needle in p.block.code


def test_emitter_errors_name_the_node():
    r = kda.build(use_qk_l2norm_in_kernel=True)
    g = r.graph.copy()
    node = r.core_operands()["query"]
    g.nodes[node]["op"] = "cube"
    with pytest.raises(CodegenError, match=f"node '{node}': op 'cube' has no CUDA form"):
        emit_block(g, {"x": node})
    with pytest.raises(CodegenError, match="node 'v': a row of dim 'V'"):
        emit_block(r.graph, {"x": "v"})
    with pytest.raises(CodegenError, match="node 'nothere': not in graph"):
        emit_block(r.graph, {"x": "nothere"})
