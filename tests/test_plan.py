"""The planner: default plans verify, plans round-trip through JSON, the exponent form follows the
decay's proven bounds, and deliberately broken plans are rejected with a message naming the part."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from kdagen import dsl
from kdagen.codegen import render_unit
from kdagen.plan import (ARCHS, Barrier, Buffer, Dtypes, Kernel, Param, Pipeline, PlanError, Plan, Problem, Role, Step,
                         Workspace, default_problem, default_problems, evaluate, exponent_form, launch_sizes, make_plan,
                         problem_from_options, problems, verify)
from kdagen.plan.families.base import facts
from kdagen.plan.families.wgmma64.forward import staging_form
from kdagen.plan.model import TensorMapSpec
from kdagen.plan.smem import assign_offsets
from kdagen.plan.describe import describe, to_dot
from kdagen.reference import Options
from recurrence_cases import channel_scaled_query, per_head_gate, two_gate_inputs


@pytest.fixture(scope="module")
def kda_plan():
    return make_plan(default_problem("kda"))


@pytest.mark.parametrize("problem", default_problems(), ids=lambda p: p.uri("any"))
def test_default_plans_verify(problem):
    plan = verify(make_plan(problem))
    assert [k.name for k in plan.kernels] == ["prepare", "recurrence", "states", "dstate_pass", "recurrence_bwd",
                                              "prepare_bwd", "param_reduce"]
    assert plan.family == "mma16" and plan.uri.endswith(f"_mma16_{problem.arch.replace('_', '')}")
    limit = ARCHS[problem.arch].smem_per_block
    assert all(k.smem_bytes <= limit for k in plan.kernels)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("op", ["kda", "gdn"])
def test_other_configurations_verify(op, head_dim):
    for kw in (dict(gva_ratio=2, varlen=True), dict(arch="sm_80")):
        verify(make_plan(default_problem(op, head_dim=head_dim, **kw)))


def test_json_round_trip(kda_plan):
    text = kda_plan.to_json()
    again = Plan.from_json(text)
    assert again == kda_plan
    assert again.to_json() == text
    assert isinstance(again.kernels[0].roles[0].warps, tuple) and isinstance(again.decay_interval, tuple)
    gdn = make_plan(default_problem("gdn"))          # -inf decay bound survives JSON
    assert Plan.from_json(gdn.to_json()).decay_interval[0] == float("-inf")
    old = json.loads(text)
    old["version"] = 2                                 # a plan written before kernel families existed
    with pytest.raises(ValueError, match="format version 2, this kdagen reads 3: emit it again"):
        Plan.from_dict(old)
    assert type(again.kernel("prepare").options).__name__ == "PrepareOptions"       # typed options survive
    bad = json.loads(text)
    bad["kernels"][0]["options"]["type"] = "NoSuchOptions"
    with pytest.raises(ValueError, match="unknown kernel options type 'NoSuchOptions'"):
        Plan.from_dict(bad)


@pytest.mark.parametrize("opt, form", [
    (dict(op="kda", use_gate_in_kernel=True, lower_bound=-5.0), "factored"),   # 16·5·log2 e = 115 < 126
    (dict(op="kda", use_gate_in_kernel=True, lower_bound=-8.0), "relative"),   # 16·8·log2 e = 185 > 126
    (dict(op="kda", use_gate_in_kernel=True), "relative"),                     # softplus: unbounded below
    (dict(op="kda"), "relative"),                                              # precomputed g in (-inf, 0]
    (dict(op="kda", lower_bound=-5.0), "factored"),                            # safe_gate: g promised in [lb, 0]
    (dict(op="gdn", use_gate_in_kernel=True), "relative"),                     # scalar decay: always relative
])
def test_exponent_form_from_bounds(opt, form):
    plan = make_plan(problem_from_options(Options(**opt), K=64, V=64, arch="sm_90a"))
    assert plan.exponent_form == form
    k1 = plan.kernel("prepare")
    assert k1.options.form == form
    assert {b.name for b in k1.buffers} >= ({"q_decayed", "k_decayed", "k_inv"} if form == "factored"
                                             else {"q_hat", "k_hat"})


def test_exponent_form_rule():
    assert exponent_form("vector", (-5.0, 0.0), 16) == "factored"
    assert exponent_form("vector", (-5.0, 0.5), 16) == "relative"       # a positive decay voids "≤ 1"
    assert exponent_form("vector", (-5.0, 0.0), 32) == "relative"       # 32·5·log2 e = 231
    assert exponent_form("scalar", (-1.0, 0.0), 16) == "relative"


@pytest.mark.parametrize("op", ["kda", "gdn"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_backward_plan_describes_the_built_kernels(op, head_dim):
    """recurrence_bwd: V/16 warps, no producer, __syncthreads only; its shared memory is the tiles the template
    uses (161600 B at K = V = 128, within sm_80's limit); prepare_bwd: 16 lanes per token row, static smem."""
    K, C_ = head_dim, 16
    plan = verify(make_plan(default_problem(op, head_dim=K, arch="sm_80")))
    assert [k.name for k in plan.direction("backward")] == ["states", "dstate_pass", "recurrence_bwd", "prepare_bwd",
                                                            "param_reduce"]
    k2 = plan.kernel("recurrence_bwd")
    assert k2.grid == ["chunks // 8 + N", "HV"] and k2.options.block_chunks == 8
    chain = plan.kernel("dstate_pass")          # the serial pass: 16 value rows, a warp per key quarter, 3 stages
    assert chain.grid == ["N", "HV", K // 16] and chain.threads == 128 and chain.options.block_chunks == 8
    assert chain.smem_bytes == 3 * (2 * (3 * C_ * (K + 8) + 3 * C_ * 24) + 4 * (C_ + K)) + 4 * 4 * 32 * 8
    states = plan.kernel("states")              # restarted per block from the forward's checkpoints
    assert states.grid == ["chunks // 8 + N", "HV", K // 64] and states.options.block_chunks == 8
    kept = plan.workspace("ws_state_blocks")
    assert kept.kept_only and kept.producer == "recurrence" and kept.consumers == ["states"]
    assert kept.shape == ("chunks // 8 + N", "HV", K, K) and "ws_state_blocks" in plan.saved
    assert plan.workspace("ws_dstate_blocks").shape == ("chunks // 8 + N", "HV", K, K)
    assert plan.workspace("ws_dstate_blocks").consumers == ["recurrence_bwd"]
    assert k2.threads == K // 16 * 32 and [r.name for r in k2.roles] == ["all"] and not k2.pipelines
    assert [(b.name, b.kind, b.count) for b in k2.barriers] == [("sync", "cta", k2.threads)]
    C, ldk, ldv, ldc, nw = 16, K + 8, K + 8, 24, K // 16      # bf16 rows padded by 8: ldmatrix without conflicts
    tiles = 2 * (3 * C * ldk + 3 * K * ldk + 2 * C * ldv + 4 * K * ldc + 2 * C * ldc)
    tiles += 4 * (4 * C * C + C + K + nw * (C + K))
    assert k2.smem_bytes == tiles and k2.smem_dynamic
    if K == 128:
        assert k2.smem_bytes == 161600 <= ARCHS["sm_80"].smem_per_block
    k1 = plan.kernel("prepare_bwd")
    assert k1.threads == 256 and k1.options.lanes_per_row == 16 and not k1.smem_dynamic
    assert ("F" in [b.name for b in k1.buffers]) == (op == "gdn")          # a per-head decay's C×C factors
    assert plan.kernel("states").options.mode == "store_states"
    assert plan.workspace("ws_states").producer == "states" and plan.workspace("ws_states").dtype == "bf16"
    assert plan.saved == ["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_A", "ws_Mqk", "ws_beta",
                          "ws_state_blocks"]
    sums = {w.name for w in plan.workspaces if w.consumers == ["param_reduce"]}
    assert sums == {"ws_part_A_log", "ws_part_dt_bias"}


def test_problem_rejects_unplannable():
    r = default_problem("kda").recurrence
    for kw, msg in ((dict(K=0), "K=0"), (dict(arch="sm_70"), "arch='sm_70'"), (dict(name="a b"), "name='a b'")):
        args = dict(recurrence=r, name="kda", K=128, V=128) | kw
        with pytest.raises(PlanError, match=msg):
            Problem(**args)
    with pytest.raises(PlanError, match=r"no kernel family supports this problem:\n  mma16: K=96, V=96.*\n  wgmma64: K=96"):
        make_plan(Problem(r, "kda", 96, 96))


def test_wgmma64_declines_more_head_parameters_than_its_prepare_bwd_stages():
    """Five per-channel head parameters: wgmma64's prepare_bwd stages four, so it says why it passes and mma16 plans
    the problem; four still plan on wgmma64."""
    def gate(n):
        def rec(r):
            q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
            g = r.token_input("g", "K")
            for i in range(n):
                g = g + r.head_param(f"w{i}", "K")
            r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(r.token_input("beta")),
                         decay=-dsl.square(dsl.sigmoid(g)), scale=r.scalar("scale"))
        return Problem(dsl.build(rec), f"gate{n}", 128, 128, arch="sm_90a")
    with pytest.raises(PlanError, match=r"wgmma64: 5 head parameters \(its prepare_bwd stages at most 4\)"):
        make_plan(gate(5), family="wgmma64")
    assert make_plan(gate(5)).family == "mma16"
    assert verify(make_plan(gate(4), family="wgmma64")).family == "wgmma64"


def test_value_operand_must_be_an_input():
    def rec(r):
        q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
        r.delta_rule(query=q, key=k, value=2 * v, beta=r.token_input("beta"), decay=r.token_input("g"),
                     scale=r.scalar("scale"))
    with pytest.raises(PlanError, match="value operand"):
        make_plan(Problem(dsl.build(rec), "vscaled", 64, 64))


def test_sizes():
    s = launch_sizes(B=1, T=100, H=2, HV=4, chunk=16, num_seqs=3)
    assert s == {"N": 3, "HV": 4, "H": 2, "T": 100, "chunks": 100 // 16 + 3}
    assert evaluate("chunks", s) == 9 and evaluate("HV * 2 + 1", s) == 9 and evaluate(7, s) == 7
    with pytest.raises(KeyError, match="unknown symbol 'B'"):
        evaluate("B", s)
    assert evaluate("(T - N) // 16", s) == 6
    for bad in ("HV ** 2", "HV / 2", "abs(HV)", "HV.real", "True + HV", "-HV", "2.0 * HV"):
        with pytest.raises(ValueError, match="only integers, symbols and"):
            evaluate(bad, s)


def test_describe_and_dot(kda_plan):
    text = describe(kda_plan)
    for needle in ("kernel recurrence", "roles", "barriers", "ready", "mbarrier", "arrive count", "mma/thread",
                   "shared memory", "ws_q_decayed", "steps (program order)", "exponent form 'factored'", "family mma16"):
        assert needle in text
    assert to_dot(kda_plan).count("->") == sum(len(w.consumers) for w in kda_plan.workspaces)


# ---- deliberately broken plans -----------------------------------------------------------------------------

def _k(plan, name):
    return plan.kernel(name)


def _cycle(plan):
    plan.workspaces.append(Workspace("ws_loop", ("chunks",), "f32", "recurrence", ["prepare"]))
    _k(plan, "recurrence").steps[-1].global_writes.append("ws_loop")
    _k(plan, "prepare").steps[0].global_reads.append("ws_loop")


def _big_buffer(plan):
    k = _k(plan, "prepare")
    k.buffers.append(Buffer("huge", (300 * 1024,), "f32", offset=k.smem_bytes))
    k.steps[0].writes.append("huge")
    k.steps[1].reads.append("huge")
    k.smem_bytes += 300 * 1024 * 4
    k.smem_dynamic = True


def _alias(plan):
    for b in _k(plan, "prepare").buffers:
        if b.name in ("k_decayed", "k_inv"):
            b.alias = "u"


BROKEN = [
    ("role regs above the cap", lambda p: setattr(_k(p, "prepare"), "min_ctas_per_sm", 5),
     "role 'all' plans 128 registers/thread above the launch-bound cap"),
    ("register file", lambda p: [setattr(r, "regs", 248) or setattr(r, "setmaxnreg", True)
                                 for r in _k(p, "prepare").roles], "register file overflow"),
    ("setmaxnreg granularity", lambda p: [setattr(r, "setmaxnreg", True) or setattr(r, "regs", 100)
                                          for r in _k(p, "recurrence").roles], "multiple of 8"),
    ("smem limit", _big_buffer, "exceeds the sm_90a limit"),
    ("static smem", lambda p: setattr(_k(p, "recurrence"), "smem_bytes", 60 * 1024), "static shared memory"),
    ("arrive count", lambda p: setattr(_k(p, "recurrence").barrier("ready"), "count", 31),
     "barrier 'ready' arrive count 31 != 32"),
    ("arrive role", lambda p: setattr(_k(p, "recurrence").barrier("free"), "arrivals", [("mma", "warp")]),
     "barrier 'free' arrive count 128 != 4"),
    ("read before write", lambda p: _k(p, "recurrence").steps[1].writes.remove("k_decayed"),
     "buffer 'k_decayed' is read by step 'state_products' before any step writes it"),
    ("missing barrier", lambda p: _k(p, "prepare").steps[1].waits.clear(),
     "written by step 'prologue' (all/row) and read by step 'cumsum' (all/column) with no barrier"),
    ("overlapping roles", lambda p: setattr(_k(p, "recurrence").role("load"), "warps", (3, 5)),
     "roles must cover warps 0..4 exactly once (overlapping: [3]"),
    ("named barrier id", lambda p: _k(p, "recurrence").barriers.append(
        Barrier("exchange", "named", 128, [("mma", "thread")], ["mma"], id=0)), "needs ids in 1..15"),
    ("pipeline stages", lambda p: setattr(_k(p, "recurrence").buffer("v"), "stages", 3),
     "pipeline 'chunk_ring' buffer 'v' has 3 stages"),
    ("alias lifetimes", _alias, "buffers 'k_decayed' and 'k_inv' share alias group 'u' but are live at once"),
    ("dead buffer", lambda p: _k(p, "prepare").steps[3].reads.remove("beta"),
     "buffer 'beta' is written but never read"),
    ("launch order", lambda p: p.kernels.insert(0, p.kernels.pop(1)),
     "workspace 'ws_q_decayed' is consumed by 'recurrence' (launch 0) before its producer 'prepare' (launch 1)"),
    ("kernel cycle", _cycle, "kernel dependency cycle"),
    ("undeclared workspace", lambda p: _k(p, "prepare").steps[2].global_writes.append("ws_nowhere"),
     "writes workspace 'ws_nowhere', which the plan does not declare"),
    ("workspace pointer of another dtype", lambda p: setattr(
        next(q for q in _k(p, "prepare").params if q.name == "ws_beta"), "dtype", "bf16"),
     "kernel prepare: parameter 'ws_beta' is bf16 but the workspace holds f32"),
    ("unknown step role", lambda p: _k(p, "recurrence").steps.append(Step("x", "ghost", "strip")),
     "step 'x' runs on unknown role 'ghost'"),
    ("wait nobody completes", lambda p: _k(p, "recurrence").steps[-2].arrives.remove("free"),
     "barrier 'free' is waited on but no step of role(s) ['mma'] arrives on it"),
    ("undeclared waiter", lambda p: _k(p, "recurrence").steps[1].waits.append("ready"),
     "step 'load' (load) waits on barrier 'ready', whose waiters are ['mma']"),
    ("phases of a run", lambda p: setattr(_k(p, "prepare").barrier("sync"), "phases_per_iter", 5),
     "role 'all' waits on barrier 'sync' 4 times per run, but it completes 5 phases"),
    ("phases of an iteration", lambda p: setattr(_k(p, "dstate_pass").barrier("sync"), "phases_per_iter", 3),
     "role 'all' waits on barrier 'sync' 2 times per loop iteration, but it completes 3 phases"),
    ("a wait too many", lambda p: next(s for s in _k(p, "recurrence").steps if s.name == "state_products")
     .waits.append("ready"), "role 'mma' waits on barrier 'ready' 2 times per loop iteration, but it completes 1"),
    ("an arrival too many", lambda p: _k(p, "recurrence").steps[1].arrives.append("ready"),
     "role 'load' arrives on barrier 'ready' 2 times per loop iteration, but it completes 1"),
]


def test_wgmma64_prepare_bwd_two_ctas_per_sm_at_head_dim_64():
    """At K = 64 the tensor-core prepare_bwd (8 warps) runs two CTAs per SM, dgc over the split dM tiles after a
    barrier; verify refuses the plan without that barrier, and with tiles that no longer fit twice. The CUDA-core form
    (softplus gate) and K = 128 stay at one."""
    for op, head_dim, ctas in (("kda", 64, 2), ("gdn", 64, 2), ("kda", 128, 1)):
        plan = verify(make_plan(default_problem(op, head_dim=head_dim, arch="sm_90a"), family="wgmma64"))
        k = plan.kernel("prepare_bwd")
        assert (k.min_ctas_per_sm, k.max_regs) == (ctas, 128), (op, head_dim)
        assert k.buffer("dgc").alias == k.buffer("dM").alias == ("dM_then_dgc" if ctas == 2 else None)
    plan = make_plan(default_problem("kda", head_dim=64, arch="sm_90a"), family="wgmma64")
    elements = lambda p: next(s for s in _k(p, "prepare_bwd").steps if s.name == "branch_elements")  # noqa: E731
    assert_refused(plan, "no barrier before dgc", lambda p: elements(p).waits.clear(),
                   "buffer 'dgc' takes the place of 'dM' (alias group 'dM_then_dgc') with no barrier between 'dM''s")
    step = lambda p, name: next(s for s in _k(p, "prepare_bwd").steps if s.name == name)  # noqa: E731
    # the next value head's split tiles over dgc: param_sums' and the loop top's barriers stand between
    assert_refused(plan, "no barrier before the next head's dM",
                   lambda p: [step(p, n).waits.clear() for n in ("param_sums", "prologue_v", "block_factors",
                                                                 "load_grads")],
                   "buffer 'dM' takes the place of 'dgc' (alias group 'dM_then_dgc') in the next loop iteration")
    assert_refused(plan, "tiles too big for two", lambda p: setattr(_k(p, "prepare_bwd"), "smem_bytes", 120 * 1024),
                   "2 CTAs/SM asked for by its launch bounds, but an SM holds 1 (122880 B of shared memory each")


@pytest.mark.parametrize("name, breaks, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_plans_are_rejected(kda_plan, name, breaks, message):
    assert_refused(kda_plan, name, breaks, message)


def assert_refused(plan, name: str, breaks, message: str) -> None:
    """A copy of the plan, broken by `breaks`, is refused by verify with `message` among its problems."""
    plan = copy.deepcopy(plan)
    breaks(plan)
    found = problems(plan)
    assert found, f"{name}: the broken plan verified"
    assert any(message in f for f in found), found
    with pytest.raises(PlanError, match="fails verification"):
        verify(plan)


# ---- the Hopper vocabulary: swizzled buffers, transaction bytes, tensor maps, setmaxnreg quotas ----------

def _tma_kernel() -> Kernel:
    """A small valid kernel in the Hopper vocabulary: a producer warp group filling a 2-stage ring of 128-byte
    swizzled bf16 tiles by bulk tensor copies (one elected arrive.expect_tx per stage), a consumer warp group
    releasing them; setmaxnreg quotas; the tile's tensor map a parameter."""
    stage = Buffer("tile", (64, 64), "bf16", stages=2, align=1024, swizzle=128)
    tile_map = TensorMapSpec(tensor="ws_q_decayed", dtype="bf16", dims=[64, "chunks * HV * 16"], strides=[64],
                             box=[64, 64], swizzle=128, buffer="tile")
    k = Kernel(
        name="tma_probe", kind="probe", template="none", direction="forward", grid=["N"], threads=256,
        min_ctas_per_sm=1,
        roles=[Role("producer", (0, 4), regs=40, setmaxnreg=True), Role("consumer", (4, 8), regs=232, setmaxnreg=True)],
        buffers=[stage],
        barriers=[Barrier("ready", "mbarrier", 1, [("producer", "elected")], ["consumer"], stages=2,
                          tx_bytes=stage.stage_bytes),
                  Barrier("free", "mbarrier", 128, [("consumer", "thread")], ["producer"], stages=2)],
        pipelines=[Pipeline("ring", 2, "producer", ["consumer"], "ready", "free", ["tile"], copy="tma")],
        steps=[Step("load", "producer", "tma", writes=["tile"], waits=["free"], arrives=["ready"], loop=True),
               Step("use", "consumer", "wgmma", reads=["tile"], waits=["ready"], arrives=["free"], loop=True)],
        params=[Param("tile_map", "tensor_map", "bf16", tensor_map=tile_map)])
    return assign_offsets(k, ARCHS["sm_90a"].static_smem)


@pytest.fixture()
def tma_plan(kda_plan):
    plan = copy.deepcopy(kda_plan)
    plan.kernels.append(_tma_kernel())
    assert problems(plan) == []
    return plan


def _tma(plan):
    return plan.kernel("tma_probe")


def _map(plan):
    return _tma(plan).params[0].tensor_map


HOPPER_BROKEN = [
    ("swizzle row", lambda p: setattr(_tma(p).buffer("tile"), "shape", (64, 32)),
     "buffer 'tile' rows are 64 B, its 128-byte swizzle needs rows of exactly one span"),
    ("swizzle alignment", lambda p: setattr(_tma(p).buffer("tile"), "align", 128),
     "buffer 'tile' with a 128-byte swizzle must be aligned to 1024 B"),
    ("swizzle period", lambda p: setattr(_tma(p).buffer("tile"), "shape", (60, 64)),
     "buffer 'tile' stages of 7680 B break the 1024-byte swizzle period"),
    ("swizzle kind", lambda p: setattr(_tma(p).buffer("tile"), "swizzle", 96), "swizzle 96 is not one of"),
    ("misaligned offset", lambda p: setattr(_tma(p).buffer("tile"), "offset", 16 + 1024),
     "buffer 'tile' at offset 1040"),
    ("tx bytes", lambda p: setattr(_tma(p).barrier("ready"), "tx_bytes", 4096),
     "fills 8192 B per stage by bulk copies, but its ready barrier 'ready' expects 4096 transaction bytes"),
    ("tx bytes on cp.async", lambda p: setattr(_tma(p).pipelines[0], "copy", "cp.async"),
     "copies with cp.async, which counts no bytes, yet barrier 'ready' expects 8192"),
    ("tx bytes off an mbarrier", lambda p: _tma(p).barriers.append(
        Barrier("x", "named", 128, [("consumer", "thread")], ["consumer"], id=3, tx_bytes=64)),
     "only an mbarrier counts bytes"),
    ("copy kind", lambda p: setattr(_tma(p).pipelines[0], "copy", "dma"), "copy kind 'dma' is not one of"),
    ("tensor-map box", lambda p: setattr(_map(p), "box", [64, 512]), "has a dimension outside 1..256"),
    ("tensor-map span", lambda p: setattr(_map(p), "box", [32, 64]),
     "inner box of 64 B must equal its 128-byte swizzle span"),
    ("tensor-map stride", lambda p: setattr(_map(p), "strides", [36]), "stride of 36 elements (72 B)"),
    ("tensor-map rank", lambda p: setattr(_map(p), "strides", []), "rank 2 box with 2 dims and 0 strides"),
    ("tensor-map buffer", lambda p: setattr(_map(p), "buffer", "nowhere"), "lands in unknown buffer 'nowhere'"),
    ("tensor-map dtype", lambda p: setattr(_map(p), "dtype", "f32"),
     "dtype f32 but workspace 'ws_q_decayed' holds bf16"),
    ("tensor-map tensor", lambda p: setattr(_map(p), "tensor", "ws_nowhere"), "is not a workspace of the plan"),
    ("tensor-map spec", lambda p: setattr(_tma(p).params[0], "tensor_map", None), "lacks its tensor-map spec"),
    ("tensor map on sm_80", lambda p: p.problem.update(arch="sm_80"), "sm_80 has no bulk tensor copies"),
    ("quota for every warp group", lambda p: setattr(_tma(p).role("producer"), "setmaxnreg", False),
     "have no setmaxnreg quota while ['consumer'] do"),
    ("quota needs one CTA per SM", lambda p: setattr(_tma(p), "min_ctas_per_sm", 2),
     "setmaxnreg needs a register cap at entry, __launch_bounds__(256, 1)"),
    ("quota range", lambda p: setattr(_tma(p).role("consumer"), "regs", 264), "must be a multiple of 8 in [24, 256]"),
    ("quota whole warp groups", lambda p: [setattr(_tma(p).role("producer"), "warps", (0, 2)),
                                           setattr(_tma(p).role("consumer"), "warps", (2, 8))],
     "uses setmaxnreg but warps (0, 2) are not whole warp groups"),
    ("quota register file", lambda p: setattr(_tma(p).role("producer"), "regs", 296 - 8),
     "register file overflow"),
    ("saved from the backward", lambda p: p.saved.append("ws_states"),
     "saved workspace 'ws_states' is not produced by a forward kernel"),
]


@pytest.mark.parametrize("name, breaks, message", HOPPER_BROKEN, ids=[b[0] for b in HOPPER_BROKEN])
def test_broken_hopper_plans_are_rejected(tma_plan, name, breaks, message):
    assert_refused(tma_plan, name, breaks, message)


def test_named_barrier_copies_take_one_id_each(tma_plan):
    """A named barrier per warp group of its role: ids id .. id + copies − 1, each counting one group."""
    plan = copy.deepcopy(tma_plan)
    k = _tma(plan)
    k.roles = [Role("producer", (0, 4), regs=40, setmaxnreg=True), Role("consumer", (4, 12), regs=232, setmaxnreg=True)]
    k.threads = 384
    k.barrier("free").count = 256
    k.barriers.append(Barrier("staged", "named", 128, [("consumer", "thread")], ["consumer"], id=14, copies=2))
    next(s for s in k.steps if s.role == "consumer").waits.append("staged")
    assert problems(plan) == []
    k.barrier("staged").id = 15
    assert any("needs ids in 1..15 (0 is __syncthreads), got [15, 16]" in f for f in problems(plan))
    k.barrier("staged").id, k.barrier("staged").count = 1, 256
    assert any("arrive count 256 != 128" in f and "per copy of 2" in f for f in problems(plan))
    k.barrier("staged").count = 128
    k.barriers.append(Barrier("other", "named", 128, [("consumer", "thread")], ["consumer"], id=2))
    assert any("named barriers 'staged' and 'other' share id 2" in f for f in problems(plan))


@pytest.mark.parametrize("opt, form", [(Options(op="kda", use_gate_in_kernel=True), "running"),
                                       (Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0), "factored"),
                                       (Options(op="gdn"), "scalar")])
def test_wgmma64_phase_counts(opt, form):
    """The wgmma64 forward's barrier phases as its templates run them: the prepare's __syncthreads (one per level
    of the inverse among them, the diagonal blocks' where that form has them) and the recurrence's one o_staged
    sync per chunk (two staging tiles in turn); a wait more is refused."""
    problem = problem_from_options(opt, K=128, V=128, arch="sm_90a")
    plan = verify(make_plan(problem, family="wgmma64", directions=("forward",)))
    assert plan.kernel("prepare").options.diagonal == form
    # after the prologue, (the diagonal blocks,) decay_columns, factors, blocks, assemble, the inverse's diagonal
    # blocks and its three levels
    assert plan.kernel("prepare").barrier("sync").phases_per_iter == 9 + (form == "running")
    source = render_unit(plan, problem.recurrence, "forward")
    prepare = source[source.index("// ===== prepare:"):source.index("// ===== recurrence:")]
    # the template's own count: the inverse's level loop holds one and runs NB − 1 = 3 times
    assert prepare.count("__syncthreads();") + 2 == 9 + (form == "running")
    assert plan.kernel("recurrence").barrier("o_staged").phases_per_iter == 1
    recurrence = source[source.index("// ===== recurrence:"):]
    assert recurrence.count("named_barrier_sync(") == 1
    # the maps pass is the entries unit's, alone: the forward unit (every call compiles it) does not carry it
    entries = render_unit(plan, problem.recurrence, "forward", entries=True)
    assert " recurrence_maps(" not in source and entries.count(" recurrence_maps(") == 1
    assert " recurrence(" not in entries and " prepare(" not in entries
    assert_refused(plan, "o_staged", lambda p: p.kernel("recurrence").steps[-2].waits.append("o_staged"),
                   "role 'consumer' waits on barrier 'o_staged' 2 times per loop iteration, but it completes 1")
    phases = plan.kernel("prepare").barrier("sync").phases_per_iter
    assert_refused(plan, "inverse", lambda p: next(s for s in p.kernel("prepare").steps if s.name == "inverse")
                   .waits.pop(), f"role 'all' waits on barrier 'sync' {phases - 1} times per run, but it completes "
                   f"{phases}")


@pytest.mark.parametrize("opt, K, g_dtype", [(Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0), 128, "bf16"),
                                           (Options(op="kda", use_gate_in_kernel=True), 64, "f32"),
                                           (Options(op="gdn"), 128, "bf16")])
def test_wgmma64_prepare_stages_its_row_inputs_in_its_tiles(opt, K, g_dtype):
    """The wgmma64 prepare's row inputs (q, k and a per-channel g) wait in the operand tiles its prologue writes,
    copied there by cp.async: the plan says so ("tiles"), and the kernel copies each row input once, waits for its
    own copies and lets a row's outputs overwrite its inputs only after the row's warp has read them back."""
    problem = problem_from_options(opt, K=K, V=K, arch="sm_90a", dtypes=Dtypes(g=g_dtype))
    plan = verify(make_plan(problem, family="wgmma64", directions=("forward",)))
    assert plan.kernel("prepare").options.staging == "tiles"
    prepare = _prepare_source(plan, problem)
    rows = 2 if opt.op == "gdn" else 3
    assert prepare.count("kdg::cp_async_16(") == rows and prepare.count("char* const staged_") == rows
    wait, read, sync = (prepare.index(x) for x in ("kdg::cp_async_wait_all();", "now_k[piece] = ", "__syncwarp();"))
    assert wait < read < sync < prepare.index("// -- emitted from the DSL graph") and "uint4 stage_" not in prepare


def test_wgmma64_prepare_stages_in_registers_where_its_tiles_cannot_hold_the_rows():
    """Four row inputs (q, k and a gate of two inputs, tests/recurrence_cases.py) are more than the three fp32
    tiles: the plan says "registers", and the prologue loads the rows into registers (that case runs end to end in
    tests/test_recurrence_op.py); an fp32 row is wider than the bf16 tiles of a per-head decay."""
    problem = Problem(dsl.build(two_gate_inputs), "two_gate_inputs", 128, 128, arch="sm_90a")
    plan = verify(make_plan(problem, family="wgmma64", directions=("forward",)))
    assert plan.kernel("prepare").options.staging == "registers"
    prepare = _prepare_source(plan, problem)
    assert prepare.count("uint4 stage_") == 4 and "cp_async" not in prepare and "staged_" not in prepare
    f = facts(problem_from_options(Options(op="gdn"), K=128, V=128, arch="sm_90a"))
    assert staging_form(f, "raw") == staging_form(f, "split") == "tiles"
    assert staging_form(dataclasses.replace(f, row_dtypes=["f32", "bf16"]), "split") == "registers"
    assert staging_form(dataclasses.replace(f, row_dtypes=["bf16"] * 3), "raw") == "registers"


def _f32_query(r):
    """A per-head decay whose query is an fp32 token input (x, declared so): not bf16, so not "raw"."""
    x, k, v = r.token_input("x", "K", dtype="f32"), r.token_input("k", "K"), r.token_input("v", "V")
    r.delta_rule(query=dsl.l2norm(x), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(r.token_input("beta")),
                 decay=-dsl.softplus(r.token_input("g")), scale=r.scalar("scale"))


@pytest.mark.parametrize("problem, operands, row_scales", [
    (problem_from_options(Options(op="gdn", use_qk_l2norm_in_kernel=True), K=128, V=128, arch="sm_90a"), "raw",
     ["q_rs", "k_rs"]),
    (problem_from_options(Options(op="gdn"), K=64, V=64, arch="sm_90a"), "raw", []),
    (Problem(dsl.build(per_head_gate), "per_head_gate", 128, 128, arch="sm_90a"), "raw", ["k_rs"]),
    (Problem(dsl.build(channel_scaled_query), "channel_scaled_query", 128, 128, arch="sm_90a"), "split", []),
    (Problem(dsl.build(_f32_query), "f32_query", 128, 128, arch="sm_90a"), "split", []),
    (problem_from_options(Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0), K=128, V=128,
                          arch="sm_90a"), "tf32", [])])
def test_wgmma64_prepare_multiplies_q_and_k_as_loaded_where_a_number_per_row_scales_them(problem, operands,
                                                                                          row_scales):
    """A per-head decay whose q̂ and k̂ are each a bf16 row input or its l2norm: the prepare's tiles hold q and k as
    loaded, one bf16 product per block, and the l2norms' numbers per row (emitted from the DSL graph, 1 without
    l2norm) scale the results ("raw"); a per-channel factor on q or an fp32 input keeps the bf16 hi + lo split."""
    plan = verify(make_plan(problem, family="wgmma64", directions=("forward",)))
    prepare = plan.kernel("prepare")
    assert prepare.options.operands == operands
    names = {b.name for b in prepare.buffers}
    assert ({"q_rs", "k_rs"} <= names and not {"q_lo", "k_lo"} & names) == (operands == "raw")
    source = _prepare_source(plan, problem)
    assert source.count("kdg::mma_16816(mkk_acc") == (2 if operands == "raw" else 0)
    assert source.count("kdg::mma_16816_x3(mkk_acc") == (2 if operands == "split" else 0)
    for rs in ("q_rs", "k_rs"):
        emitted = f"const float {rs} = " in source
        assert emitted == (rs in row_scales), rs
        if operands == "raw":
            assert f"s_{rs}[row] = {rs if emitted else '1.f'};" in source


def _prepare_source(plan, problem) -> str:
    source = render_unit(plan, problem.recurrence, "forward")
    return source[source.index("// ===== prepare:"):source.index("// ===== recurrence:")]
