"""Every kernel of the default configurations, forward and backward, compiles with nvcc for sm_90a and
sm_80 without a warning, as do those of other exponent forms, layouts and dtypes and of a recurrence
defined only here; all units compile in parallel. ptxas's report must match the plan: no spill stores
beyond the plan's allowance, registers within the launch-bound cap, static shared memory exactly the
plan's (a dynamic kernel: none static, and the plan's bytes within the arch's limit). NVRTC, the runtime's
compiler, takes the same units."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from kdagen import dsl
from kdagen.codegen import render_unit
from kdagen.codegen.nvcc import resources
from kdagen.plan import (ARCHS, Dtypes, Problem, default_plans, default_problem, make_plan, problem_from_options,
                         verify)
from kdagen.reference import Options


def softsign_gate(r):
    """Defined only here: a new gate activation and a different β map."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    decay = -3.0 * dsl.square(dsl.sigmoid(g * r.head_param("w", "K")))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=0.5 + 0.5 * dsl.square(dsl.sigmoid(beta)),
                 decay=decay, scale=r.scalar("scale"))


def _problems() -> dict:
    """uri -> (plan, recurrence): the default configurations by every family that serves them, and more."""
    found = {plan.uri: (plan, r) for plan, r in default_plans()}
    vfirst = Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
                     allow_neg_eigval=True, state_v_first=True)
    softplus = Options(op="kda", use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    for arch in ARCHS:
        for p in (problem_from_options(Options(op="kda"), K=64, V=64, arch=arch, varlen=True, gva_ratio=2),
                  problem_from_options(softplus, K=128, V=128, arch=arch),   # the bench's unbounded gate
                  problem_from_options(vfirst, K=64, V=64, arch=arch, dtypes=Dtypes(g="f32", beta="f32")),
                  default_problem("gdn", head_dim=64, arch=arch),
                  Problem(dsl.build(softsign_gate), "softsign", 128, 128, arch=arch)):
            plan = verify(make_plan(p))
            found[plan.uri] = (plan, p.recurrence)
    return found


PLANS = _problems()
UNITS = [(uri, d) for uri in sorted(PLANS) for d in PLANS[uri][0].directions()]


@pytest.fixture(scope="module")
def reports() -> dict:
    """(uri, direction) -> (plan, ptxas report per kernel), every unit compiled in parallel."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    def build(unit):
        uri, direction = unit
        plan, recurrence = PLANS[uri]
        source = render_unit(plan, recurrence, direction)
        return plan, resources(source, plan.problem["arch"], ("-Werror", "all-warnings"))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(UNITS, pool.map(build, UNITS)))


@pytest.mark.nvcc
@pytest.mark.parametrize("uri, direction", UNITS, ids=[f"{u}-{d}" for u, d in UNITS])
def test_kernels_fit_their_plan(reports, uri, direction):
    plan, report = reports[uri, direction]
    limit = ARCHS[plan.problem["arch"]].smem_per_block
    kernels = plan.direction(direction)
    assert sorted(report) == sorted(k.name for k in kernels), f"{uri} {direction}: ptxas reported {sorted(report)}"
    for kernel in kernels:
        r, where = report[kernel.name], f"{uri}/{kernel.name}"
        assert r.arch == plan.problem["arch"]
        assert r.spill_stores <= kernel.spill_allowance and r.spill_loads <= kernel.spill_allowance, \
            f"{where}: {r.spill_stores} B spill stores, plan allows {kernel.spill_allowance}"
        assert r.registers <= kernel.max_regs, f"{where}: {r.registers} registers > cap {kernel.max_regs}"
        static = 0 if kernel.smem_dynamic else kernel.smem_bytes
        assert r.smem == static and kernel.smem_bytes <= limit, \
            f"{where}: ptxas {r.smem} B static smem, plan {kernel.smem_bytes} B " \
            f"({'dynamic' if kernel.smem_dynamic else 'static'}), limit {limit} B"


@pytest.mark.parametrize("family, direction", [("mma16", "forward"), ("mma16", "backward"), ("wgmma64", "forward")])
def test_units_compile_with_nvrtc(family, direction):
    """The runtime's compiler (NVRTC through CuPy) takes the same units the GPU runs, each family's."""
    runtime = pytest.importorskip("kdagen.runtime")
    try:
        runtime.cuda_include_dir()
    except Exception as e:        # no toolkit headers: the runtime cannot compile anything here
        pytest.skip(f"NVRTC headers unavailable: {e}")
    problem = default_problem("gdn", head_dim=64)
    plan = verify(make_plan(problem, family=family, directions=(direction,)))
    image = runtime.compile_cubin(render_unit(plan, problem.recurrence, direction), f"{direction}.cu", "sm_90a")
    assert image[:4] == b"\x7fELF"
