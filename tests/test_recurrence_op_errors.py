"""Bad recurrences and bad inputs to a compiled recurrence: each gives an error of the right type naming the part
(the recurrence's node, the argument, the option), before any kernel runs. On the CPU."""
from __future__ import annotations

import pytest
import torch

import kdagen
from kdagen import dsl
from kdagen.dsl import DSLError
from kdagen.plan import PlanError
from kdagen import testing
from recurrence_cases import CASES, compiled


def core(r, *, query=None, value=None, beta=None, decay=None):
    """A valid recurrence with one part replaced (the inputs a replaced part would have read are not declared)."""
    query = dsl.l2norm(r.token_input("q", "K")) if query is None else query
    key = dsl.l2norm(r.token_input("k", "K"))
    value = r.token_input("v", "V") if value is None else value
    beta = dsl.sigmoid(r.token_input("beta")) if beta is None else beta
    decay = -dsl.softplus(r.token_input("g", "K")) if decay is None else decay
    r.delta_rule(query=query, key=key, value=value, beta=beta, decay=decay, scale=r.scalar("scale"))


def unused_input(r):
    r.token_input("extra")
    core(r)


def named(bad: str):
    def fn(r):
        r.token_input(bad, "K")
        core(r)
    return fn


def positive_decay(r):
    core(r, decay=-dsl.softplus(r.token_input("x", "K")) + 0.5)


def value_through_an_op(r):
    core(r, value=2 * r.token_input("w", "V"))


def qk_input_in_beta(r):
    q = r.token_input("q2", "K")
    core(r, query=dsl.l2norm(q), beta=dsl.sigmoid(dsl.rowsum(q)))


def f16_input(r):
    core(r, decay=-dsl.softplus(r.token_input("x", "K", dtype="f16")))


def bf16_head_param(r):
    core(r, decay=-dsl.softplus(r.token_input("x", "K") + r.head_param("b", "K", dtype="bf16")))


def shadowing(r):
    core(r, decay=-dsl.softplus(r.token_input("state_v_first", "K")))


def no_core(r):
    r.token_input("q", "K")


RECURRENCES = [
    # (id, recurrence, error, message)
    ("name-not-identifier", named("1x"), DSLError, "must be an identifier"),
    ("name-reserved", named("initial_state"), DSLError, "'initial_state' is reserved"),
    ("name-twice", named("q"), DSLError, "'q' is declared twice"),
    ("unused-input", unused_input, DSLError, "node 'extra': unused input: it does not reach the core"),
    ("no-core", no_core, DSLError, "has no core"),
    ("decay-can-be-positive", positive_decay, PlanError, r"admits positive values.*bounds=\(lo, 0\)"),
    ("value-through-an-op", value_through_an_op, PlanError, "value operand .*must be a token input"),
    ("qk-input-in-beta", qk_input_in_beta, PlanError, "'q2': a token input feeding both query/key"),
    ("f16-input", f16_input, PlanError, "token input 'x': declared dtype 'f16'"),
    ("bf16-head-param", bf16_head_param, PlanError, "head parameter 'b': declared dtype 'bf16'"),
    ("shadows-call-option", shadowing, ValueError, r"inputs named \['state_v_first'\] would shadow"),
]


@pytest.mark.parametrize("fn, error, message", [c[1:] for c in RECURRENCES], ids=[c[0] for c in RECURRENCES])
def test_bad_recurrences_name_the_part(fn, error, message):
    with pytest.raises(error, match=message):
        kdagen.compile(fn, emulate=True).plan(64)


def test_compile_arguments():
    with pytest.raises(TypeError, match="recurrence must be a kdagen.dsl.Recurrence or a function"):
        kdagen.compile("kda")
    with pytest.raises(ValueError, match="name='my-gate' must be ASCII letters, digits and '_'"):
        kdagen.compile(core, name="my-gate")
    with pytest.raises(ValueError, match="name='β_gate' must be ASCII letters"):     # a file name on every system
        kdagen.compile(core, name="β_gate")
    with pytest.raises(TypeError, match=r"options \['lb'\] need a function"):
        kdagen.compile(dsl.build(core), lb=-3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lb'"):
        kdagen.compile(core, lb=-3)
    with pytest.raises(PlanError, match="family 'wgmma32': known families are"):
        kdagen.compile(core, family="wgmma32")


def valid(name="unbounded_gate_batch2"):
    op = compiled(name, emulate=True)
    x, kwargs, _, _ = testing.random_inputs(op, **CASES[name][1])
    return op, {n: t.detach() for n, t in x.items()}, kwargs


def change(inputs: dict, edits: dict) -> dict:
    out = {**inputs, **edits}
    return {n: t for n, t in out.items() if t is not None}


B, T, H, K = 2, 21, 2, 64
INPUTS = [
    # (id, edit of the inputs, edit of the call keywords, error, message)
    ("missing-input", dict(gate=None), {}, TypeError, "missing input 'gate'"),
    ("unknown-input", dict(g=torch.zeros(B, T, H, K)), {}, TypeError, r"unexpected input\(s\) \['g'\]"),
    ("value-heads", dict(write=torch.zeros(B, T, H + 1)), {}, ValueError, r"write must have shape \[B, T, HV\]"),
    ("per-token-passed-per-head", dict(gate=torch.zeros(H, K, dtype=torch.bfloat16)), {}, ValueError,
     r"gate must have shape \[B, T, HV, K\]"),
    ("value-time", dict(val=torch.zeros(B, T + 1, H, K, dtype=torch.bfloat16)), {}, ValueError,
     r"val must be \[B, T, HV, V\] = \[2, 21, HV, V\] like x"),
    ("gva", dict(val=torch.zeros(B, T, 3, K, dtype=torch.bfloat16)), {}, ValueError,
     "val has HV = 3 heads, which must be a positive multiple of the q/k inputs' H = 2"),
    ("head-dim", dict(x=torch.zeros(B, T, H, 96)), {}, NotImplementedError,
     r"head dim K = 96 \(x.shape\[-1\]\) has no kernel"),
    ("declared-dtype", dict(gate=torch.zeros(B, T, H, K)), {}, NotImplementedError,
     "gate has dtype float32; inputs declared dtype='bf16' in the recurrence take bfloat16"),
    ("io-dtype", dict(key=torch.zeros(B, T, H, K, dtype=torch.float16)), {}, NotImplementedError,
     "key has dtype float16"),
    ("head-param-shape", dict(bias=torch.zeros(H)), {}, ValueError, r"bias must have shape \[HV \* K\] = \[128\]"),
    ("head-param-dtype", dict(bias=torch.zeros(H * K, dtype=torch.bfloat16)), {}, NotImplementedError,
     "bias has dtype bfloat16; head parameters take float32"),
    ("missing-scalar", {}, dict(temperature=None), TypeError, "missing scalar 'temperature'"),
    ("scale-with-grad", {}, dict(scale=torch.tensor(0.1, requires_grad=True)), ValueError,
     r"scalars \['scale'\] require grad, but one of them cannot be learned: .*scale must be of kind const or scalar"),
    ("scalar-not-0d", {}, dict(temperature=torch.ones(2, requires_grad=True)), ValueError,
     r"temperature must be a number or a 0-d tensor, got shape \[2\]"),
    ("scalar-type", {}, dict(temperature="1.0"), TypeError, "temperature must be a float, got str"),
    ("scalar-nan", {}, dict(scale=float("nan")), ValueError, "scale must be finite"),
    ("h0-shape", {}, dict(initial_state=torch.zeros(1, H, K, K)), ValueError,
     r"initial_state must have shape \[N, HV, K, V\] = \[2, 2, 64, 64\]"),
    ("final-state-flag", {}, dict(output_final_state=1), TypeError, "output_final_state must be a bool"),
    ("cu-seqlens-batch", {}, dict(cu_seqlens=torch.tensor([0, 21])), ValueError,
     "with cu_seqlens the batch size must be 1"),
    ("not-contiguous", dict(x=torch.zeros(B, H, T, K).transpose(1, 2)), {}, ValueError,
     "x is not contiguous"),
]


@pytest.mark.parametrize("edit, options, error, message", [c[1:] for c in INPUTS], ids=[c[0] for c in INPUTS])
def test_bad_inputs_name_the_argument(edit, options, error, message):
    op, x, kwargs = valid()
    kwargs = {n: v for n, v in {**kwargs, **options}.items() if v is not None}
    with pytest.raises(error, match=message):
        op(**change(x, edit), **kwargs)


def test_positional_inputs_follow_the_declaration_order():
    op, x, kwargs = valid()
    assert op.inputs == ("x", "key", "val", "gate", "write", "bias")
    with pytest.raises(TypeError, match="takes at most 6 positional inputs"):
        op(*x.values(), x["x"], **kwargs)
    with pytest.raises(TypeError, match="got multiple values for input 'x'"):
        op(x["x"], **x, **kwargs)


def only_built(r):
    """Compiled only as a built Recurrence (never from this function): its scalars cannot be learned."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    decay = -dsl.softplus(r.token_input("g", "K")) * r.scalar("t", bounds=(0.1, 1.0))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(r.token_input("beta")),
                 decay=decay, scale=r.scalar("scale"))


def test_a_built_recurrence_cannot_learn_scalars():
    built = kdagen.compile(dsl.build(only_built), emulate=True)
    x, kwargs, _, _ = testing.random_inputs(built, scalars={"t": torch.tensor(0.5, requires_grad=True)})
    with pytest.raises(ValueError, match="compiled from a built Recurrence; compile the function"):
        built(**x, **kwargs)


def test_chunk_kda_scale_takes_no_gradient():
    from kdagen.ops.validate import check_scalar
    with pytest.raises(ValueError, match="scale requires grad, but this scalar takes no gradient here"):
        check_scalar("scale", torch.tensor(0.1, requires_grad=True))


def test_the_gpu_op_refuses_cpu_tensors():
    _, x, kwargs = valid()
    with pytest.raises(ValueError, match="x is on cpu; kdagen's kernels run on CUDA devices"):
        compiled("unbounded_gate_batch2")(**x, **kwargs)
