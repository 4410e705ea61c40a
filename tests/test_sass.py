"""What the Hopper forward becomes in machine code: wgmma (HGMMA) and bulk tensor copies (UTMALDG) in the SASS,
no local-memory traffic, and the register quotas the plan assigned (setmaxnreg) — read from cuobjdump where
the toolkit has it (the device machine), skipped elsewhere; ptxas's report (registers, spills, stack) is
checked wherever nvcc is, for the forward and for the backward (prepare_bwd in both its forms: tensor cores for the
lower-bound gate and GDN, CUDA cores for a gate without a bound)."""
from __future__ import annotations

import re
import shutil

import pytest

from kdagen.codegen import has_entries, render_unit
from kdagen.codegen.nvcc import NvccUnavailable, parse_report, sass
from kdagen.codegen.nvcc import _run as nvcc_run
from kdagen.plan import default_problem, make_plan, verify
from kdagen.plan.configs import problem_from_options
from kdagen.reference.options import Options

pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")]


@pytest.fixture(scope="module", params=[("kda", 128, "forward"), ("gdn", 64, "forward"), ("gdn", 128, "forward"),
                                        ("kda", 128, "backward"), ("gdn", 128, "backward"),
                                        ("kda_softplus", 128, "backward")])
def unit(request):
    op, head_dim, direction = request.param
    problem = (problem_from_options(Options(op="kda", use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True),
                                    K=head_dim, V=head_dim, arch="sm_90a") if op == "kda_softplus"
               else default_problem(op, head_dim=head_dim))
    plan = verify(make_plan(problem, family="wgmma64", directions=(direction,)))
    return plan, render_unit(plan, problem.recurrence, direction), direction, problem.recurrence


def test_ptxas_report_matches_the_plan(unit):
    """No spills or stack beyond what the plan accepts on purpose (Kernel.spill_allowance: prepare_bwd's factored
    form at K = 128), registers within the cap, and no wgmma the compiler had to serialise or fence on its own (its
    C75xx remarks are "info", not warnings): the forward and the backward."""
    plan, source, direction, _ = unit
    text, _ = nvcc_run(["-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-Werror", "all-warnings"], source, ".cubin")
    assert "(C75" not in text, [line for line in text.splitlines() if "(C75" in line]
    report = parse_report(text)
    for k in plan.direction(direction):
        r = report[k.name]
        assert max(r.spill_stores, r.spill_loads, r.stack) <= k.spill_allowance, f"{k.name}: {r}"
        assert r.registers <= k.max_regs, f"{k.name}: {r.registers} registers > {k.max_regs}"


def test_sass_has_wgmma_tma_and_the_quotas(unit):
    """Every kernel of the unit (its further entry points too) carries exactly the setmaxnreg quotas its plan
    assigned — the backward's chunk_bwd raises and lowers them, the forward's split-value recurrence, 256 threads
    at 255 registers, has none to move — and no local memory; the forward's recurrence runs on HGMMA and UTMALDG."""
    plan, source, direction, recurrence = unit
    try:
        # the direction's unit and its entries unit where it has one (recurrence_maps, dstate_starts, ...)
        text = sass(source, "sm_90a")
        if has_entries(plan, direction):
            text += sass(render_unit(plan, recurrence, direction, entries=True), "sm_90a")
    except NvccUnavailable as e:
        pytest.skip(str(e))
    functions = dict(re.findall(r"Function : (\w+)\n(.*?)(?=\n\s*Function : |\Z)", text, re.S))
    if direction == "forward":
        rec = functions["recurrence"]
        assert "HGMMA" in rec and "UTMALDG" in rec, "the recurrence runs on wgmma and bulk tensor copies"
    kernels = plan.direction(direction)
    assert direction == "forward" or any(r.setmaxnreg for k in kernels for r in k.roles), \
        "the backward unit should have a kernel with setmaxnreg quotas to check"
    for k in kernels:
        want = {r.regs for r in k.roles if r.setmaxnreg}
        for name in [k.name, *k.entries]:
            body = functions[name]
            if not k.spill_allowance:          # the few bytes a plan accepts on purpose are local memory
                assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local-memory traffic"
            quotas = {int(m, 16) for m in re.findall(r"USETMAXREG\.\w+(?:\.\w+)*\s+(?:\w+,\s*)?0x([0-9a-f]+)", body)}
            lines = [line.strip() for line in body.splitlines() if "SETMAXREG" in line]
            assert quotas == want, f"{name}: setmaxnreg in SASS {quotas} from {lines}, the plan's {want}"
