"""Property-based tests (hypothesis) of kdagen's promise: no silent wrong result and no raw traceback:

- a call of chunk_kda / chunk_gated_delta_rule, with options and tensors drawn well- or ill-formed, is refused with a
  TypeError, ValueError or NotImplementedError naming an argument, or it is accepted (checked and planned; the
  kernels are not run) and the float64 reference defines it;
- a small recurrence drawn from the DSL's ops is refused at build or plan (a DSLError or PlanError naming a node),
  or its generated forward kernels, emulated on the CPU, match the float64 interpreter.

CI runs a fixed, small set (derandomized). KDAGEN_PROPERTY_EXAMPLES=N draws N calls and N // 10 recurrences (each
compiles kernels), e.g. `KDAGEN_PROPERTY_EXAMPLES=500 pytest tests/test_properties.py`.
"""
from __future__ import annotations

import functools
import math
import os
import re
from unittest import mock

import pytest
import torch
pytest.importorskip("hypothesis", reason="the property tests need the test extra (hypothesis)")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kdagen
from kdagen import dsl, testing
from kdagen.codegen import emulate
from kdagen.dsl import DSLError
from kdagen.ops import run as ops_run
from kdagen.ops.api import call_params, make_call
from kdagen.ops.forward import call_config
from kdagen.plan import PlanError
from kdagen.reference import chunked

EXAMPLES = int(os.environ.get("KDAGEN_PROPERTY_EXAMPLES") or 0)
SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- calls of the shipped ops --------------------------------------------------------------------------------------

B, T, H, K = 1, 20, 1, 64
CU = [0, 7, 7, 20]
OMIT = object()          # an option left out of the call
TENSORS = ("q", "k", "v", "g", "beta")
OPTIONS = ("use_gate_in_kernel", "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
           "state_v_first", "output_final_state", "scale", "safe_gate", "lower_bound", "disable_recompute",
           "head_first", "chunk_size", "A_log", "dt_bias", "initial_state", "cu_seqlens", "cu_seqlens_cpu",
           "cp_context", "return_intermediate_states", "bogus")


def broken_tensor(draw, t: torch.Tensor):
    """t broken one way: another dtype, shape, head count or length, not contiguous, not a tensor, on meta."""
    how = draw(st.sampled_from(["dtype", "row", "heads", "time", "strided", "number", "meta"]))
    if how == "dtype":
        return t.to(draw(st.sampled_from([torch.float16, torch.float64, torch.int32])))
    if how == "row":
        return t.unsqueeze(-1) if t.dim() == 3 else t[..., : t.shape[-1] // 2]
    if how == "heads":
        return torch.cat([t, t[:, :, :1]], dim=2)
    if how == "time":
        return t[:, :-1]
    if how == "strided":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return 1.0 if how == "number" else torch.empty_like(t, device="meta")


BOOL_RARE = ("False", 1, None)


@st.composite
def op_calls(draw):
    """(op, tensors q … beta, options) of a call: every part valid (an option maybe left out) but up to two,
    which are broken."""
    op = draw(st.sampled_from(["kda", "gdn"]))
    broken = draw(st.sets(st.sampled_from(TENSORS + OPTIONS), max_size=2))

    def option(name, values, rare=()):
        pool = rare if name in broken and rare else [OMIT, *values]
        return draw(st.sampled_from(pool))

    G = draw(st.sampled_from([1, 2]))
    HV = H * G
    varlen = draw(st.booleans())
    options = {"use_gate_in_kernel": option("use_gate_in_kernel", [True, False], BOOL_RARE)}
    for name in ("use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "state_v_first"):
        options[name] = option(name, [True, False], BOOL_RARE)
    sigmoid = options["use_beta_sigmoid_in_kernel"] is True
    options["allow_neg_eigval"] = option("allow_neg_eigval", [True, False] if sigmoid else [False], (True, "False"))
    options["output_final_state"] = option("output_final_state", [True, False], ("yes",))
    options["scale"] = option("scale", [None, 0.125, 1], (math.nan, "0.1", torch.tensor(0.2)))
    gate = options["use_gate_in_kernel"] is True
    if op == "kda":
        options["safe_gate"] = option("safe_gate", [True, False], BOOL_RARE)
        bounded = gate or options["safe_gate"] is True
        options["lower_bound"] = option("lower_bound", [-5.0, -3, -0.5, -1e-5] if bounded else [],
                                        (0.0, 5.0, math.nan, math.inf, "-5", True, -3.0))
        options["disable_recompute"] = option("disable_recompute", [True, False], BOOL_RARE)
        options["return_intermediate_states"] = option("return_intermediate_states", [False], (True,))
    else:
        options["head_first"] = option("head_first", [], (False,))
    options["chunk_size"] = option("chunk_size", [32, 64] + [16] * (op == "gdn"), (48, 16))
    row = HV * K if op == "kda" else HV
    options["A_log"] = option("A_log", [torch.rand(HV)] if gate else [],
                              (torch.rand(HV + 1), torch.rand(HV, dtype=torch.bfloat16), torch.rand(HV)))
    options["dt_bias"] = option("dt_bias", [torch.randn(row)] if gate else [], (torch.randn(row + 1), torch.randn(row)))
    N = len(CU) - 1 if varlen else B
    h0_shape = (N, HV, K, K)
    options["initial_state"] = option("initial_state", [torch.randn(h0_shape) / 8],
                                      (torch.randn(N + 1, HV, K, K), torch.randn(h0_shape, dtype=torch.bfloat16)))
    if varlen:
        cu = torch.tensor(CU)
        options["cu_seqlens"] = draw(st.sampled_from([cu.int(), torch.tensor([0, 9, 7, 20]), torch.tensor([0, 7, 19]),
                                                      cu.to("meta")] if "cu_seqlens" in broken else [cu]))
        options["cu_seqlens_cpu"] = option("cu_seqlens_cpu", [cu.clone()], (torch.tensor([0, 20]),))
    options["cp_context"] = option("cp_context", [], (object(),))
    options["bogus"] = option("bogus", [], (1,))
    options = {n: v for n, v in options.items() if v is not OMIT}

    g_shape = (B, T, HV, K) if op == "kda" else (B, T, HV)
    g = torch.randn(g_shape) if options.get("use_gate_in_kernel") is True else -torch.rand(g_shape) * 3
    beta = torch.randn(B, T, HV) if options.get("use_beta_sigmoid_in_kernel") is True else torch.rand(B, T, HV)
    gdt, bdt = (draw(st.sampled_from([torch.bfloat16, torch.float32])) for _ in range(2))
    tensors = dict(q=torch.randn(B, T, H, K).bfloat16(), k=torch.randn(B, T, H, K).bfloat16(),
                   v=torch.randn(B, T, HV, K).bfloat16(), g=g.to(gdt), beta=beta.to(bdt))
    return op, {n: broken_tensor(draw, t) if n in broken else t for n, t in tensors.items()}, options


def planned_only(call, tensors, initial_state):
    """Stands in for the kernels: plans what the call would launch (what planning can refuse), runs nothing."""
    call_config({**tensors, "initial_state": initial_state, "cu_seqlens": call.cu_seqlens}, call, keep=True).planned()


KWARGS = ("A_log", "dt_bias", "chunk_size", "use_gate_in_kernel", "head_first", "bogus")   # what **kwargs may hold


def argument_names(op: str) -> set[str]:
    return {"q", "k", "v", "g", "beta", *KWARGS} | (set(call_params(op)) - {"kwargs"})


def reference_of(op: str, tensors: dict, options: dict):
    """(o, final state) of the float64 reference for the call's math; a precomputed g is its own decay."""
    call = make_call(op, **options)
    x = {n: t.double() for n, t in tensors.items()}
    for name in ("A_log", "dt_bias", "initial_state"):
        if call.tensors[name] is not None:
            x[name] = call.tensors[name].double()
    if call.tensors["cu_seqlens"] is not None:
        x["cu_seqlens"] = call.tensors["cu_seqlens"]
    return chunked(x, call.opt, chunk_size=16)


@settings(max_examples=EXAMPLES or 120, **SETTINGS)
@given(op_calls())
def test_a_call_is_refused_naming_an_argument_or_the_reference_defines_it(case):
    op, tensors, options = case
    fn = kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule
    with mock.patch.object(ops_run, "run", functools.partial(ops_run.run, emulate=True)), \
            mock.patch.object(ops_run, "apply", planned_only):
        try:
            fn(**tensors, **options)
        except (TypeError, ValueError, NotImplementedError) as e:
            assert not isinstance(e, (DSLError, PlanError)), f"an internal node, not an argument: {e!r}"
            found = [m for n in argument_names(op) if (m := re.search(rf"\b{re.escape(n)}\b", str(e)))]
            assert found, f"names no argument: {e!r}"
            event(f"refused: {type(e).__name__} naming {min(found, key=lambda m: m.start()).group()}")
            return
    event("accepted")
    o, ht = reference_of(op, tensors, options)
    assert o.shape == tensors["v"].shape and torch.isfinite(o).all() and torch.isfinite(ht).all()


# ---- small recurrences from the DSL's ops --------------------------------------------------------------------------

class Leaves:
    """The recurrence's leaves, declared when first used (an unused declaration would be refused)."""

    def __init__(self, r):
        self.r = r

    def __getattr__(self, name):
        declare = {"g": lambda: self.r.token_input("g", "K"), "w": lambda: self.r.head_param("w", "K"),
                   "u": lambda: self.r.token_input("u"), "a": lambda: self.r.head_param("a"),
                   "s": lambda: self.r.scalar("s", bounds=(0.5, 2.0))}[name]
        value = declare()
        setattr(self, name, value)
        return value


BASES = {"g": lambda L: L.g, "g*w": lambda L: L.g * L.w, "g+w": lambda L: L.g + L.w, "g*s": lambda L: L.g * L.s,
         "g*exp(a)": lambda L: L.g * dsl.exp(L.a), "g-u": lambda L: L.g - L.u}
MAPS = {"x": lambda x: x, "sigmoid": dsl.sigmoid, "softplus": dsl.softplus, "square": dsl.square, "-x": dsl.neg,
        "exp(sigmoid)": lambda x: dsl.exp(dsl.sigmoid(x)), "rsqrt(1+x²)": lambda x: dsl.rsqrt(1 + dsl.square(x)),
        "log(1+x²)": lambda x: dsl.log(1 + dsl.square(x)), "x/(1+x²)": lambda x: x / (1 + dsl.square(x))}
DECAYS = {"-softplus": lambda x, L: -dsl.softplus(x), "lb*sigmoid": lambda x, L: -4.0 * dsl.sigmoid(x),
          "log(sigmoid)": lambda x, L: dsl.log(dsl.sigmoid(x)), "-square": lambda x, L: -dsl.square(x),
          "per-head": lambda x, L: -dsl.softplus(0.125 * dsl.rowsum(x)), "-exp(a)*sigmoid": lambda x, L:
          -dsl.exp(L.a) * dsl.sigmoid(x), "raw": lambda x, L: x, "sigmoid": lambda x, L: dsl.sigmoid(x),
          "1+square": lambda x, L: 1 + dsl.square(x)}
BETAS = {"sigmoid(u)": lambda x, L: dsl.sigmoid(L.u), "0.25+0.5σ(u)": lambda x, L: 0.25 + 0.5 * dsl.sigmoid(L.u),
         "2σ(u)": lambda x, L: 2 * dsl.sigmoid(L.u), "σ(rowsum(x)/8)": lambda x, L: dsl.sigmoid(dsl.rowsum(x) / 8)}


def drawn_recurrence(base: str, map_: str, decay: str, beta: str, normalize_q: bool, scale_scalar: bool):
    def drawn(r):
        L = Leaves(r)
        x = MAPS[map_](BASES[base](L))
        q = r.token_input("q", "K")
        r.delta_rule(query=dsl.l2norm(q) if normalize_q else q, key=dsl.l2norm(r.token_input("k", "K")),
                     value=r.token_input("v", "V"), beta=BETAS[beta](x, L), decay=DECAYS[decay](x, L),
                     scale=r.scalar("scale") if scale_scalar else 0.125)
    return drawn


RECURRENCES = st.tuples(*(st.sampled_from(list(d)) for d in (BASES, MAPS, DECAYS, BETAS)), st.booleans(),
                        st.booleans())


@pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")
@settings(max_examples=max(EXAMPLES // 10, 3), **SETTINGS)
@given(RECURRENCES)
def test_a_drawn_recurrence_is_refused_or_its_kernels_match_the_interpreter(choice):
    fn = drawn_recurrence(*choice)
    try:
        op = kdagen.compile(fn, name="drawn", emulate=True)
        op.plan(64)
    except (DSLError, PlanError) as e:
        assert re.search(r"node '\w+'|decay '\w+'|value operand '\w+'", str(e)), e
        event(f"refused: {type(e).__name__}")
        return
    event("compiled and run")
    scalars = {n: v for n, v in (("s", 1.3), ("scale", 0.2)) if n in op.scalars}
    x, kwargs, do, dht = testing.random_inputs(op, T=21, H=1, G=2, cu_seqlens=(0, 9, 21), scalars=scalars)
    with torch.no_grad():
        o, ht = op(**x, **kwargs)
        want = dsl.interpret.forward(op.spec.recurrence, {n: t.double() for n, t in x.items()} | scalars,
                                     chunk_size=16, initial_state=kwargs["initial_state"].double(),
                                     cu_seqlens=kwargs["cu_seqlens"])
    errs = testing.errors({"o": o, "final_state": ht}, dict(zip(("o", "final_state"), want)))
    assert all(e <= testing.bound(op, n) for n, e in errs.items()), (choice, errs)
