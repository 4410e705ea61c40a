"""Rendering: the Jinja environment (StrictUndefined), the units' text, URIs and hashes, and writing
generated files only when they change."""
from __future__ import annotations

import copy
import sys

import jinja2
import pytest

from kdagen import dsl
from kdagen.codegen.lines import without_directives
from kdagen.codegen import (CodegenError, content_hash, emit, emitted_files, environment, kernel_context, render,
                            render_kernel, render_unit, smem_carveout, write_if_different)
from kdagen.plan import Buffer, Problem, default_problem, make_plan, verify
from kdagen.plan.smem import assign_offsets


@pytest.fixture(scope="module")
def kda():
    problem = default_problem("kda")
    return verify(make_plan(problem)), problem.recurrence


def test_environment_is_strict(kda, monkeypatch):
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ not_in_the_context }}").render()
    plan, r = kda
    full = kernel_context

    def missing_kpt(plan, kernel, recurrence, entries=False):
        ctx = full(plan, kernel, recurrence, entries)
        ctx["opt"] = {k: v for k, v in vars(ctx["opt"]).items() if k != "kpt"}
        return ctx
    monkeypatch.setattr(sys.modules["kdagen.codegen.render"], "kernel_context", missing_kpt)
    with pytest.raises(jinja2.UndefinedError, match="kpt"):
        render_kernel(plan, plan.kernel("prepare"), r)


def test_forward_unit(kda):
    plan, r = kda
    text = render_unit(plan, r, "forward")
    for needle in (f"generated CUDA: {plan.uri} (forward)", "exponent form factored", "#include <cuda_bf16.h>",
                   '__global__ void __launch_bounds__(128, 4) prepare(', 'recurrence(',
                   "-- emitted from the DSL graph", "kdg::sigmoid", "// ===== templates/common/ptx.cuh =====", "// ===== templates/sm80/ptx.cuh =====",
                   f"unsigned char smem_raw[{plan.kernel('prepare').smem_bytes}]",
                   "mbarrier ready[2], arrive count 32"):
        assert needle in text, needle
    assert "{{" not in text and "{% " not in text
    assert text.count("extern \"C\" __global__") == 2


def test_missing_template_is_named(kda):
    plan, r = kda
    k = plan.kernel("prepare")
    broken = type(k)(**{**k.__dict__, "template": "mma16/nope.cu.j2"})
    with pytest.raises(CodegenError, match="kernel 'prepare': template templates/mma16/nope.cu.j2 does not exist"):
        render_kernel(plan, broken, r)


def softsign_gate(r):
    """Defined only here: a new gate activation (−3·σ(g·w)²) and a different β map."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    decay = -3.0 * dsl.square(dsl.sigmoid(g * r.head_param("w", "K")))
    b = 0.5 + 0.5 * dsl.sigmoid(beta) * dsl.sigmoid(-beta)
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=b, decay=decay, scale=r.scalar("scale"))


def _block(text: str) -> str:
    return text.split("-- emitted from the DSL graph")[1].split("-- end of the emitted block")[0]


def test_dsl_only_recurrence_changes_prepare_only(kda):
    plan, r = kda
    custom = dsl.build(softsign_gate)
    cplan = verify(make_plan(Problem(custom, "softsign", 128, 128)))
    mine = render_kernel(cplan, cplan.kernel("prepare"), custom)
    theirs = render_kernel(plan, plan.kernel("prepare"), r)
    assert _block(mine) != _block(theirs) and "n_w[KPT]" in _block(mine) and "A_log" not in mine
    assert "const float* __restrict__ in_w" in mine
    assert without_directives(render_kernel(cplan, cplan.kernel("recurrence"), custom)) == without_directives(
        render_kernel(plan, plan.kernel("recurrence"), r))


def test_uri_and_hash(kda):
    plan, _ = kda
    assert plan.uri == "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm90a"
    assert default_problem("gdn", head_dim=64, gva_ratio=2, varlen=True, arch="sm_80").uri("mma16") == \
        "gdn_sp_l2_bsig_k64v64_bf16_gbf16_bbf16_gva2_varlen_mma16_sm80"
    assert content_hash("a") == content_hash("a") != content_hash("b") and len(content_hash("a")) == 16


def test_write_if_different(tmp_path, kda):
    path = tmp_path / "d" / "f.txt"
    assert write_if_different(path, "x") and not write_if_different(path, "x")
    stamp = path.stat().st_mtime_ns
    assert not write_if_different(path, "x") and path.stat().st_mtime_ns == stamp
    assert write_if_different(path, "y") and path.read_text() == "y"
    plan, r = kda
    assert len(emit(tmp_path, plan, r, ["forward"])) == 2
    assert emit(tmp_path, plan, r, ["forward"]) == []
    files = emitted_files(plan, r, ["forward"])
    assert files[f"{plan.uri}/plan.json"] == plan.to_json()
    assert files[f"{plan.uri}/forward.cu"] == render(plan, r, ["forward"])["forward.cu"]


def test_a_static_shared_array_takes_its_buffers_largest_alignment(kda):
    """The plan's buffer offsets are relative to the kernel's one shared array, so the array must be aligned as
    strictly as its most aligned buffer (a swizzled tile's pattern is a function of the absolute address: 1024)."""
    plan, _ = kda
    kernel = copy.deepcopy(plan.kernel("prepare"))
    assert not kernel.smem_dynamic and "__shared__ __align__(16) unsigned char smem_raw" in smem_carveout(kernel)
    kernel.buffers.append(Buffer("tile", (64, 64), "bf16", swizzle=128, align=1024))
    assign_offsets(kernel, 48 * 1024)
    assert not kernel.smem_dynamic, "the case needs a static array"
    assert "__shared__ __align__(1024) unsigned char smem_raw" in smem_carveout(kernel)
