"""The kernel skeleton is rendered from plan data: every step of every kernel has its `// ---- step <name>`
marker, in the plan's order within each role; mbarriers are initialised with the plan's arrive counts; a
role with a setmaxnreg quota raises or lowers its registers to exactly that quota."""
from __future__ import annotations

import re

import pytest

from kdagen import dsl
from kdagen.codegen import render_kernel
from kdagen.plan import Problem, default_plans, make_plan, problem_from_options, verify
from kdagen.reference import Options


def _plans():
    found = [(plan, r) for plan, r in default_plans()]
    kda = Options(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    for family in ("mma16", "wgmma64"):
        for opt, K, kw in ((kda, 64, dict(varlen=True, gva_ratio=2)), (Options(op="gdn"), 64, {})):
            problem = problem_from_options(opt, K=K, V=K, arch="sm_90a", **kw)
            found.append((verify(make_plan(problem, family=family, directions=("forward",))), problem.recurrence))
    return found


KERNELS = [(plan, r, k) for plan, r in _plans() for k in plan.kernels]


@pytest.mark.parametrize("plan, recurrence, kernel", KERNELS,
                         ids=[f"{p.uri}-{k.name}" for p, _, k in KERNELS])
def test_step_markers_follow_the_plan(plan, recurrence, kernel):
    text = render_kernel(plan, kernel, recurrence)
    found = re.findall(r"// ---- step (\w+) \((\w+), ", text)
    for role in kernel.roles:
        planned = [s.name for s in kernel.steps if s.role == role.name]
        rendered = [name for name, r in found if r == role.name]
        assert rendered == planned, f"{kernel.name}, role {role.name}: markers {rendered}, plan {planned}"


@pytest.mark.parametrize("plan, recurrence, kernel", KERNELS,
                         ids=[f"{p.uri}-{k.name}" for p, _, k in KERNELS])
def test_barriers_and_quotas_come_from_the_plan(plan, recurrence, kernel):
    text = render_kernel(plan, kernel, recurrence)
    for b in kernel.barriers:
        if b.kind == "mbarrier":
            assert f"kdg::mbarrier_init(&bar_{b.name}[kdg_s], {b.count});" in text, b.name
    quotas = re.findall(r"setmaxnreg_(inc|dec)<(\d+)>", text)
    assert sorted(int(q) for _, q in quotas) == sorted(r.regs for r in kernel.roles if r.setmaxnreg)
    if len(kernel.roles) > 1:
        for r in kernel.roles:
            assert f"(kdg_warp >= {r.warps[0]} && kdg_warp < {r.warps[1]}) {{  // role \"{r.name}\"" in text


def test_a_user_recurrence_gets_the_same_skeleton():
    def rec(r):
        q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
        r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(r.token_input("b")),
                     decay=-dsl.softplus(r.token_input("g")), scale=r.scalar("scale"))
    r = dsl.build(rec)
    plan = verify(make_plan(Problem(r, "mine", 64, 64), family="wgmma64", directions=("forward",)))
    text = render_kernel(plan, plan.kernel("recurrence"), r)
    assert "kdg::ptx_setmaxnreg_dec<40>();" in text and "kdg::ptx_setmaxnreg_inc<232>();" not in text
