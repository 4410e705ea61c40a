"""Reliability of the DSL → plan → render path on bad and edge inputs: every valid Python identifier is
an input name that works end to end or is refused by dsl.build; what cannot be planned is refused by Problem; the
interpreter, render and a graph edited after building fail with a message naming the part. On the CPU."""
from __future__ import annotations

import keyword

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kdagen
from kdagen import dsl, testing
from kdagen.codegen import emulate, render, render_unit
from kdagen.codegen.prologue import forward_prologue
from kdagen.plan import PlanError, Problem, make_plan, verify
from kdagen.runtime import nvrtc
from markers import needs_nvrtc

# ---- 6. names: CUDA and C++ words, kernel locals, the kernels' own prefixes, Python keywords ------------------------

QUERY, KEY, VALUE = "threadIdx", "class", "val"
GATE_ROWS = ("blockIdx", "bf16", "expf", "decay", "int", "float", "q", "k", "in_x", "sc_x", "n_q", "given_q",
             "seed_decay", "row_sum", "kdg", "std", "template", "nullptr", "__restrict__", "_", "C", "K", "KPT", "T",
             "tok", "valid", "j", "r", "s", "ss", "q_hat", "dgc", "smem_raw", "self", "lambda", "x", "x0")
BETA_TERMS = ("beta", "e", "ws", "i", "h", "o", "N", "H", "HV", "G", "L", "at", "None")
ROW_PARAMS = ("v", "dt_bias", "ws_part_x", "bi", "R", "ld_v")         # "v": a head parameter, the value is "val"
HEAD_PARAMS = ("g", "core_scale", "kdg_prepare")
SCALARS = ("beta_val", "printf", "max")
SCALE = "scale_val"


def every_kind_of_name(r):
    """A recurrence with inputs of every kind named after what the kernels, CUDA, C++ or Python use themselves; the
    value is `val` beside a head parameter `v`, and inputs named q and k feed the gate, not the query and key."""
    rows = sum(r.token_input(n, "K") for n in GATE_ROWS) + sum(r.head_param(n, "K") for n in ROW_PARAMS)
    per_head = dsl.sigmoid(sum(r.head_param(n) for n in HEAD_PARAMS))
    decay = -dsl.softplus(0.1 * rows) * per_head
    for n in SCALARS:
        decay = decay * r.scalar(n, bounds=(0.5, 2.0))
    r.delta_rule(query=dsl.l2norm(r.token_input(QUERY, "K")), key=dsl.l2norm(r.token_input(KEY, "K")),
                 value=r.token_input(VALUE, "V"), beta=dsl.sigmoid(sum(r.token_input(n) for n in BETA_TERMS)),
                 decay=decay, scale=r.scalar(SCALE))


@pytest.fixture(scope="module")
def every_name():
    return kdagen.compile(every_kind_of_name, emulate=True)


@pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")
def test_every_kind_of_name_runs_forward_and_backward(every_name):
    """The kernels bind the value by its role, not by the name `v` (a head parameter may be called v)."""
    errs = testing.compare(every_name, T=19, H=1, G=2, cu_seqlens=(0, 7, 19),
                           scalars={n: 1.0 for n in SCALARS} | {SCALE: 0.125})
    bad = [n for n, e in errs.items() if not e <= testing.bound(every_name, n)]
    assert not bad, testing.report(every_name, errs)


@needs_nvrtc
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_every_kind_of_name_compiles_with_nvrtc(every_name, direction):
    plan = every_name.plan(64, gva=2, varlen=True)
    assert nvrtc.compile_source(render_unit(plan, every_name.spec.recurrence, direction), f"{direction}.cu",
                                "sm_90a", "cubin")


def with_names(query="q", key="k", value="v", gate="g", beta="beta", param="w", scalar="t", scale="scale"):
    def fn(r):
        decay = -dsl.softplus(r.token_input(gate, "K") * r.head_param(param, "K")) * r.scalar(scalar, bounds=(0, 1))
        r.delta_rule(query=r.token_input(query, "K"), key=r.token_input(key, "K"), value=r.token_input(value, "V"),
                     beta=dsl.sigmoid(r.token_input(beta)), decay=decay, scale=r.scalar(scale))
    return fn


@pytest.mark.parametrize("names, node, message", [
    (dict(gate="βeta"), "βeta", "must be an ASCII identifier"),
    (dict(param="gé"), "gé", "must be an ASCII identifier"),
    (dict(gate="x", param="x_row"), "x_row", "inputs 'x' and 'x_row' cannot both be declared"),
    (dict(gate="x_row", param="x"), "x", "inputs 'x' and 'x_row' cannot both be declared"),
    (dict(query="d_q"), "d_q", "is reserved"),
    (dict(gate="initial_state"), "initial_state", "is reserved"),
])
def test_a_name_the_kernels_cannot_carry_is_refused_at_build(names, node, message):
    with pytest.raises(dsl.DSLError, match=message) as e:
        dsl.build(with_names(**names))
    assert e.value.node == node


def test_x_row_beside_a_scalar_x_is_fine():
    """A scalar reaches the kernels as sc_<name>: no row pointer to collide with."""
    assert dsl.build(with_names(scalar="x", gate="x_row"))


IDENTIFIER = st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,11}\Z"),
                       st.text(min_size=1, max_size=6).filter(str.isidentifier),
                       st.sampled_from(GATE_ROWS + BETA_TERMS + ROW_PARAMS + tuple(keyword.kwlist)))
ROLES = ("query", "key", "value", "gate", "beta", "param", "scalar", "scale")


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(IDENTIFIER, min_size=len(ROLES), max_size=len(ROLES), unique=True))
def test_any_identifier_builds_plans_and_renders_or_is_refused(names):
    """Every identifier is refused by dsl.build with a DSLError naming it, or planned and rendered in both
    directions with each kernel's parameters, and the row pointers the prologue reads them through, distinct."""
    try:
        r = dsl.build(with_names(**dict(zip(ROLES, names))))
    except dsl.DSLError as e:
        assert e.node in names, e
        return
    plan = verify(make_plan(Problem(r, "names", 64, 64)))
    assert set(render(plan, r)) == {"forward.cu", "backward.cu", "backward_entries.cu"}
    for kernel in plan.kernels:
        params = [p.name for p in kernel.params]
        assert len(set(params)) == len(params), params
        if kernel.kind == "prepare":
            pointers = {x["ptr"] for x in forward_prologue(r, {p.name: p.dtype for p in kernel.params}).inputs}
            assert not pointers & set(params), pointers & set(params)


# ---- 6. head dims no kernel has ----------------------------------------------------------------------------------

def test_a_problem_with_k_other_than_v_is_refused():
    with pytest.raises(PlanError, match="K=64, V=128: the kernels need V == K"):
        Problem(dsl.build(with_names()), "kv", 64, 128)


# ---- 9. clear messages instead of tracebacks ---------------------------------------------------------------------

def small_inputs() -> dict:
    gen = torch.Generator().manual_seed(0)
    t = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)   # noqa: E731
    return {"q": t(1, 9, 1, 8), "k": t(1, 9, 1, 8), "v": t(1, 9, 1, 8), "g": t(1, 9, 1, 8), "beta": t(1, 9, 1),
            "w": t(1, 8), "t": 0.5}


@pytest.mark.parametrize("chunk_size", [0, -16, 1.5, "16", True])
def test_the_interpreter_checks_the_chunk_size(chunk_size):
    r = dsl.build(with_names())
    with pytest.raises(dsl.DSLError, match=f"chunk_size must be a positive int, got {chunk_size!r}"):
        dsl.interpret.forward(r, small_inputs(), chunk_size=chunk_size)
    with pytest.raises(dsl.DSLError, match="chunk_size must be a positive int"):
        dsl.interpret.backward(r, small_inputs(), torch.zeros(1, 9, 1, 8, dtype=torch.float64), chunk_size=chunk_size)


def test_render_takes_one_direction_by_name():
    r = dsl.build(with_names())
    plan = verify(make_plan(Problem(r, "one", 64, 64)))
    assert render(plan, r, "forward") == render(plan, r, ["forward"])


def test_a_problem_needs_a_built_recurrence():
    with pytest.raises(PlanError, match="recurrence must be a kdagen.dsl.Recurrence .*got function"):
        Problem(with_names(), "fn", 64, 64)


def drop_node(r):
    r.graph.remove_node("w")


def drop_edge(r):
    r.graph.remove_edge("g", next(iter(r.graph.successors("g"))))


def add_stray(r):
    r.graph.add_node("stray", op="token_input", name="stray", shape=(), kind="token", dtype="f32", args=())


def add_bare(r):
    r.graph.add_node("bare")


def retype_leaf(r):
    r.graph.nodes["w"]["kind"] = "token"


def drop_core(r):
    r.graph.remove_node(r.core)


@pytest.mark.parametrize("edit, node, message", [
    (drop_node, "mul_", r"edges \['g'\] disagree with its operands \['g', 'w'\]"),
    (drop_edge, "mul_", r"edges \['w'\] disagree with its operands \['g', 'w'\]"),
    (add_stray, "stray", "unused input: it does not reach the core"),
    (add_bare, "bare", "has no op, args, shape, kind: a node added to r.graph directly"),
    (retype_leaf, "w", "kind is 'token' but its operands give 'head'"),
    (drop_core, "delta_rule_", "the core is no longer in the graph"),
])
def test_a_graph_edited_after_building_is_checked_again(edit, node, message):
    r = dsl.build(with_names())
    edit(r)
    for step in (lambda: Problem(r, "edited", 64, 64), lambda: dsl.interpret.forward(r, small_inputs()),
                 lambda: kdagen.compile(r)):
        with pytest.raises(dsl.DSLError, match=message) as e:
            step()
        assert e.value.node.startswith(node)
