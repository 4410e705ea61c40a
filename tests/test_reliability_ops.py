"""Reliability of the ops on bad and edge inputs: no silent wrong result, no error about an internal node
or from deep inside torch; each case names the argument or the recurrence's input. On the CPU, no kernel run (the
value bound by its role, not by the name `v`, is tests/test_reliability_dsl.py's every-kind-of-name recurrence)."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import kdagen
from cli_run import run_main
from kdagen import dsl, testing
from kdagen.codegen import render_unit
from kdagen.ops.api import make_call
from kdagen.ops.config import Config, options_spec
from kdagen.plan import PlanError, Problem
from kdagen.plan.families import FAMILIES
from kdagen.reference import Options
from kdagen.runtime.cache import entry_key

B, T, H, HV, K = 1, 20, 2, 4, 64
bf16, f32 = torch.bfloat16, torch.float32


def fla_inputs(op: str) -> dict:
    """The tensors of a valid chunk_kda / chunk_gated_delta_rule call (GVA 2) on the CPU."""
    g = (B, T, HV, K) if op == "kda" else (B, T, HV)
    return dict(q=torch.randn(B, T, H, K, dtype=bf16), k=torch.randn(B, T, H, K, dtype=bf16),
                v=torch.randn(B, T, HV, K, dtype=bf16), g=torch.randn(g, dtype=bf16),
                beta=torch.rand(B, T, HV, dtype=bf16))


def fla_call(op: str, **options):
    fn = kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule
    return fn(**fla_inputs(op), **options)


# ---- 2. declared dtypes: read as declared, or refused; every input's dtype checked --------------------------------

def declaring(where: str, dtype: str):
    """A recurrence declaring `dtype` on one input: "gate" (a gate input), "g" (one named g, read as the call passes
    it), "value" (the core's value, read as bf16) or "param" (a head parameter)."""
    def fn(r):
        q, k = r.token_input("q", "K"), r.token_input("k", "K")
        v = r.token_input("val", "V", dtype=dtype if where == "value" else "bf16")
        g = r.token_input("g" if where == "g" else "gate", "K", dtype=dtype if where in ("g", "gate") else "f32")
        w = r.head_param("w", "K", dtype=dtype if where == "param" else "f32")
        r.delta_rule(query=q, key=k, value=v, beta=dsl.sigmoid(r.token_input("beta")), decay=-dsl.softplus(g + w),
                     scale=r.scalar("scale"))
    return fn


@pytest.mark.parametrize("where, dtype, message", [
    ("gate", "f16", "token input 'gate': declared dtype 'f16'"),
    ("g", "f16", "token input 'g': declared dtype 'f16'"),          # read as the call passes g: was ignored
    ("value", "f64", "token input 'val': declared dtype 'f64'"),    # the value: was read as bf16 regardless
    ("param", "bf16", "head parameter 'w': declared dtype 'bf16'"),
])
def test_a_declared_dtype_no_kernel_reads_is_refused_when_compiled(where, dtype, message):
    with pytest.raises(PlanError, match=message):
        kdagen.compile(declaring(where, dtype), emulate=True)
    with pytest.raises(PlanError, match=message):
        Problem(dsl.build(declaring(where, dtype)), "declared", 64, 64)


def test_every_input_in_another_dtype_is_refused_by_name():
    op = kdagen.compile(declaring("gate", "bf16"), emulate=True)     # q, k, val, gate, beta, w
    x, kwargs, _, _ = testing.random_inputs(op, T=16)
    x = {n: t.detach() for n, t in x.items()}
    for name in op.inputs:
        wrong = torch.float16 if x[name].dtype != torch.float16 else f32
        with pytest.raises((NotImplementedError, ValueError), match=f"^{name} has dtype float"):
            op(**{**x, name: x[name].to(wrong)}, **kwargs)


# ---- 3. a decay that can be positive is refused where it is given ----------------------------------------------

@pytest.mark.parametrize("lower_bound", [5.0, 1e-3, 0.0])
def test_a_non_negative_lower_bound_is_refused_naming_it(lower_bound):
    with pytest.raises(ValueError, match=f"lower_bound must be a finite negative number.*got {lower_bound}"):
        fla_call("kda", use_gate_in_kernel=True, lower_bound=lower_bound)


def test_the_cli_refuses_a_positive_lower_bound(capsys):
    code, _, err = run_main(["plan", "--op", "kda", "--use-gate-in-kernel", "--lower-bound", "5", "--head-dim", "64"],
                            capsys)
    assert code == 2 and "lower_bound must be a finite negative number" in err and "Traceback" not in err


def positive_sigmoid(r):
    core(r, dsl.sigmoid(r.token_input("g", "K")))


def one_plus_square(r):
    core(r, 1 + dsl.square(r.token_input("g", "K")))


def core(r, decay):
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    r.delta_rule(query=q, key=k, value=v, beta=dsl.sigmoid(r.token_input("beta")), decay=decay,
                 scale=r.scalar("scale"))


@pytest.mark.parametrize("fn, node", [(positive_sigmoid, "sigmoid_0"), (one_plus_square, "add_1")])
def test_a_dsl_decay_that_can_be_positive_is_refused_naming_it(fn, node):
    with pytest.raises(PlanError, match=f"decay '{node}': its proven interval .* admits positive values"):
        kdagen.compile(fn, emulate=True).plan(64)


# ---- 4. distinct configurations, distinct URIs -----------------------------------------------------------------

LOWER_BOUNDS = (None, -5, -5.0000001, -0.5, -1e-05, -2.5e20, 5.0)      # 5.0: refused by the ops, still named apart
SHAPES = [dict(K=64, V=64, G=1, varlen=False, state_layout="kv", g_dtype="bf16"),
          dict(K=128, V=128, G=2, varlen=True, state_layout="vk", g_dtype="f32")]


def fla_specs():
    """The Spec of every combination of chunk_kda's and chunk_gated_delta_rule's options (a bound without the
    in-kernel gate: safe_gate's promise about a precomputed g)."""
    for op, gate, l2, beta_map, bound, has_A_log, has_dt_bias in itertools.product(
            ("kda", "gdn"), (True, False), (True, False), ("raw", "sigmoid", "neg"), LOWER_BOUNDS, (True, False),
            (True, False)):
        if (op == "gdn" and bound is not None) or (not gate and not (has_A_log and has_dt_bias)) or \
                (not gate and bound is not None and bound > 0):
            continue
        opt = Options(op=op, use_gate_in_kernel=gate, use_qk_l2norm_in_kernel=l2,
                      use_beta_sigmoid_in_kernel=beta_map != "raw", allow_neg_eigval=beta_map == "neg",
                      lower_bound=bound if gate else None)
        yield options_spec(opt, has_A_log, has_dt_bias, None if gate else bound)


def test_no_two_configurations_share_a_uri():
    """lower_bound=5 and -5 were both kda_lb5_..., -5.0000001 too, and -1e-05 gave a name with '-' in it."""
    specs = list(fla_specs())
    assert len({s.graph_sha for s in specs}) == len({s.name for s in specs}) == len(specs) > 200
    seen = {}
    for spec, shape, arch, family in itertools.product(specs, SHAPES, ("sm_90a", "sm_80"), FAMILIES):
        config = Config(spec, arch=arch, **shape)
        uri = config.problem().uri(family)
        assert seen.setdefault(uri, (config, family)) == (config, family), uri


def gate_of(r, lower_bound: float = -3.0):
    core(r, lower_bound * dsl.sigmoid(r.token_input("g", "K")))


def test_a_users_recurrence_names_its_graph_in_the_uri():
    """One function with two options are two recurrences of one name: their URIs (the folders `kdagen emit` writes)
    differ, and so do their sources, which the compile cache keys on; the shipped ops' URIs are their names."""
    ops = [kdagen.compile(gate_of, lower_bound=lb) for lb in (-3.0, -4.0)]
    plans = [op.plan(64) for op in ops]
    assert plans[0].uri != plans[1].uri and all(p.uri.startswith("gate_of_k64v64_") for p in plans)
    assert kdagen.compile(gate_of, lower_bound=-3.0).plan(64).uri == plans[0].uri          # stable
    sources = [render_unit(p, op.spec.recurrence, "forward") for p, op in zip(plans, ops)]
    assert all(p.uri in s.splitlines()[0] for p, s in zip(plans, sources))
    assert len({entry_key(s, "sm_90a", "cubin", (), {}) for s in sources}) == 2
    assert options_spec(Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0)).uri_hash is False


# ---- 5. options checked up front, naming the option ------------------------------------------------------------

@pytest.mark.parametrize("lower_bound, error, message", [
    (math.nan, ValueError, "lower_bound must be a finite negative number.*got nan"),
    (math.inf, ValueError, "lower_bound must be a finite negative number.*got inf"),
    (-math.inf, ValueError, "lower_bound must be a finite negative number.*got -inf"),
    ("-5", TypeError, "lower_bound must be a float, got str '-5'"),
    (True, TypeError, "lower_bound must be a float, got bool True"),
    (3.0, ValueError, "lower_bound must be a finite negative number.*got 3.0"),
])
@pytest.mark.parametrize("gate", ["in-kernel", "safe-gate-precomputed"])
def test_a_bad_lower_bound_is_refused_naming_it(lower_bound, error, message, gate):
    options = dict(use_gate_in_kernel=True) if gate == "in-kernel" else dict(safe_gate=True)
    with pytest.raises(error, match=message):
        make_call("kda", lower_bound=lower_bound, **options)
    with pytest.raises(error, match=message):
        fla_call("kda", lower_bound=lower_bound, **options)


@pytest.mark.parametrize("op, option", [
    ("kda", "use_qk_l2norm_in_kernel"), ("kda", "use_gate_in_kernel"), ("kda", "use_beta_sigmoid_in_kernel"),
    ("kda", "safe_gate"), ("kda", "state_v_first"), ("kda", "disable_recompute"), ("kda", "use_graph"),
    ("kda", "return_intermediate_states"), ("gdn", "use_gate_in_kernel"), ("gdn", "allow_neg_eigval"),
    ("gdn", "transpose_state_layout"),
])
@pytest.mark.parametrize("value", ["False", 0, None])
def test_a_boolean_option_must_be_a_bool(op, option, value):
    with pytest.raises(TypeError, match=f"{option} must be a bool, got {type(value).__name__}"):
        fla_call(op, **{option: value})


# ---- 9. no raw torch error ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["kda", "gdn"])
def test_an_all_meta_call_is_refused_by_device(op):
    x = {n: torch.empty_like(t, device="meta") for n, t in fla_inputs(op).items()}
    with pytest.raises(ValueError, match="q is on meta; kdagen's kernels run on CUDA devices"):
        (kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule)(
            **x, cu_seqlens=torch.empty(2, dtype=torch.int64, device="meta"))


def test_a_users_op_plans_the_family_its_calls_run(monkeypatch):
    """`op.plan` / `op.precompile` take the calls' (sequence, head) pairs: an inference call with few of them runs
    the long-chunk family on sm_90a, so the plan and the precompiled modules are that family's."""
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    op = kdagen.compile(gate_of)
    assert op.plan(64, inference=True, pairs=4, arch="sm_90a").family == "wgmma64"
    assert op.plan(64, inference=True, arch="sm_90a").family == "mma16"
    assert op.plan(64, pairs=4, arch="sm_90a").family == "mma16"          # training on few pairs: mma16 (its cut)
    assert op.plan(64, pairs=16, arch="sm_90a").family == "wgmma64"       # training on 16 or more: wgmma64
