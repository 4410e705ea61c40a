"""Every forward kernel of the default configurations (and of the other exponent forms, and of a
recurrence defined only here) compiles with nvcc for sm_90a and sm_80, compiled in parallel; ptxas's
report must match the plan: no spill stores beyond the plan's allowance, registers within the
launch-bound cap, static shared memory exactly the plan's and within the arch's limit."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from kdagen import dsl
from kdagen.codegen import render_unit
from kdagen.codegen.nvcc import resources
from kdagen.plan import ARCHS, Problem, default_problem, default_problems, make_plan, problem_from_options, verify
from kdagen.reference import Options



def softsign_gate(r):
    """Defined only here: a new gate activation and a different β map."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    decay = -3.0 * dsl.square(dsl.sigmoid(g * r.head_param("w", "K")))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=0.5 + 0.5 * dsl.square(dsl.sigmoid(beta)),
                 decay=decay, scale=r.scalar("scale"))


def _problems() -> dict:
    found = {p.uri(): p for p in default_problems()}
    for arch in ARCHS:
        for p in (problem_from_options(Options(op="kda"), K=64, V=64, arch=arch, varlen=True, gva_ratio=2),
                  default_problem("gdn", head_dim=64, arch=arch),
                  Problem(dsl.build(softsign_gate), "softsign", 128, 128, arch=arch)):
            found[p.uri()] = p
    return found


@pytest.fixture(scope="module")
def reports() -> dict:
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    """uri -> (plan, ptxas report per kernel), all units compiled in parallel."""
    problems = _problems()
    plans = {uri: verify(make_plan(p)) for uri, p in problems.items()}

    def build(uri):
        plan = plans[uri]
        return uri, plan, resources(render_unit(plan, problems[uri].recurrence, "forward"), plan.problem["arch"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        return {uri: (plan, rep) for uri, plan, rep in pool.map(build, plans)}


@pytest.mark.nvcc
@pytest.mark.parametrize("uri", sorted(_problems()))
def test_forward_kernels_fit_their_plan(reports, uri):
    plan, report = reports[uri]
    limit = ARCHS[plan.problem["arch"]].smem_per_block
    for kernel in plan.direction("forward"):
        r = report.get(kernel.name)
        assert r is not None, f"{uri}: ptxas reported no kernel {kernel.name} (got {sorted(report)})"
        assert r.arch == plan.problem["arch"]
        assert r.spill_stores <= kernel.spill_allowance and r.spill_loads <= kernel.spill_allowance, \
            f"{uri}/{kernel.name}: {r.spill_stores} B spill stores, plan allows {kernel.spill_allowance}"
        assert r.registers <= kernel.max_regs, f"{uri}/{kernel.name}: {r.registers} registers > cap {kernel.max_regs}"
        assert r.smem == kernel.smem_bytes <= limit, \
            f"{uri}/{kernel.name}: ptxas {r.smem} B smem, plan {kernel.smem_bytes} B, limit {limit} B"


def test_forward_unit_compiles_with_nvrtc():
    """The runtime's compiler (NVRTC through CuPy) takes the same unit the GPU runs."""
    runtime = pytest.importorskip("kdagen.runtime")
    try:
        runtime.cuda_include_dir()
    except Exception as e:        # no toolkit headers: the runtime cannot compile anything here
        pytest.skip(f"NVRTC headers unavailable: {e}")
    problem = default_problem("gdn", head_dim=64)
    plan = verify(make_plan(problem))
    image = runtime.compile_cubin(render_unit(plan, problem.recurrence, "forward"), "forward.cu", "sm_90a")
    assert image[:4] == b"\x7fELF"
