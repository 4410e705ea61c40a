"""The backward unit without a GPU: it renders from the plan (names, launch bounds, shared memory, prepare_bwd's
prologue and adjoint emitted from the DSL), and kdagen.ops.backward launches exactly the plan's kernels with
arguments that match the rendered C signatures, refusing inputs the plan does not describe."""
from __future__ import annotations

import re

import pytest
import torch
from backward_cases import dsl_only

from kdagen import dsl, runtime
from kdagen.codegen import render_kernel, render_unit
from kdagen.codegen.lines import without_directives
from kdagen.codegen.adjoint import backward_prologue
from kdagen.ops import backward as bw
from kdagen.ops.config import options_config
from kdagen.plan import Dtypes, Problem, make_plan, problem_from_options, verify
from kdagen.plan.sizes import evaluate, launch_sizes
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import scale_of

KDA_FULL = Options(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
KDA_LB = Options(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                 use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
KDA_PLAIN = Options(state_v_first=True)
GDN_FULL = Options(op="gdn", use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
GDN_PLAIN = Options(op="gdn", state_v_first=True)
KERNEL = r'extern "C" __global__ void __launch_bounds__\(([^)]*)\)\s*(\w+)\(([^)]*)\)'


def planned(opt: Options, K: int, **kw):
    problem = problem_from_options(opt, K=K, V=K, arch="sm_90a", **kw)
    return verify(make_plan(problem)), problem.recurrence


# ---- rendering ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("opt, K", [(KDA_FULL, 128), (KDA_LB, 64), (KDA_PLAIN, 128), (GDN_FULL, 128), (GDN_PLAIN, 64)])
def test_unit_holds_the_plans_kernels(opt, K):
    plan, r = planned(opt, K)
    src = without_directives(render_unit(plan, r, "backward"))
    found = {name: bounds for bounds, name, _ in re.findall(KERNEL, src)}
    assert list(found) == [k.name for k in plan.direction("backward")]
    for k in plan.direction("backward"):
        assert found[k.name] == f"{k.threads}, {k.min_ctas_per_sm}"
        carve = "KDG_DYNAMIC_SMEM(smem_raw)" if k.smem_dynamic else f"unsigned char smem_raw[{k.smem_bytes}]"
        assert f"// shared memory: {k.smem_bytes} B" in src and carve in src, k.name
    assert "states(" in src and "store_state" in src                     # the recurrence itself writes S_c
    assert not re.search(r"\{\{|\{%[\s-]|\{#", src)                      # no Jinja left (inline PTX has {%0)
    assert f"{plan.uri} (backward)" in src.splitlines()[0]


def test_prologue_is_emitted_from_the_dsl():
    """prepare_bwd's prologue and adjoint change with the recurrence's graph: softplus vs lower-bound gate."""
    (soft, rs), (lb, rl), (plain, rp) = planned(KDA_FULL, 128), planned(KDA_LB, 64), planned(KDA_PLAIN, 128)
    soft, lb, plain = (render_kernel(p, p.kernel("prepare_bwd"), r) for p, r in ((soft, rs), (lb, rl), (plain, rp)))
    assert "kdg::softplus(" in soft and "kdg::softplus(" not in lb
    assert "-5.0f" in lb and "2.0f" in lb                                  # lower bound, allow_neg_eigval scale
    assert "l2norm" in soft and "l2norm" not in plain


def test_a_recurrence_defined_here_gets_its_own_prologue_adjoint():
    """A gate activation and β map written only in this test reach prepare_bwd through the emitter, and the plan
    gets a partial workspace and a reduction for its head parameter."""
    r = dsl.build(dsl_only, name="custom")
    plan = verify(make_plan(Problem(r, "custom", 64, 64)))
    k1 = plan.kernel("prepare_bwd")
    src = render_kernel(plan, k1, r)
    ctx = backward_prologue(r, {p.name: "float" if p.dtype == "f32" else "bf16" for p in k1.params if p.kind == "ptr"})
    assert ctx["head_params"] == [{"name": "w", "grad": "grad_in_w", "row": True}]
    assert "float* __restrict__ ws_part_w" in src and "const float* in_w_row = in_w + h * K + d0;" in src
    assert "kdg::square(" in ctx["blocks"]["v_bwd"] and "seed_decay" in ctx["blocks"]["v_bwd"]
    assert plan.workspace("ws_part_w").consumers == ["param_reduce"]
    assert plan.kernel("param_reduce").grid == ["(HV * 64 + 31) // 32", "1"]


# ---- launches against the rendered signatures ---------------------------------------------------------

_CTYPE_DTYPE = {"__nv_bfloat16": torch.bfloat16, "float": torch.float32, "long long": torch.int64, "int": torch.int32}


def signatures(src: str) -> dict:
    """kernel name -> [(C type without qualifiers, is pointer)] from the rendered extern "C" kernels."""
    typedefs = dict((alias, ctype) for ctype, alias in re.findall(r"typedef (\w+) (\w+);", src))
    out = {}
    for _, name, params in re.findall(KERNEL, src):
        sig = []
        for p in params.split(","):
            words = p.replace("__restrict__", "").replace("const", "").replace("*", " * ").split()
            ctype = " ".join(w for w in words[:-1] if w != "*")
            sig.append((typedefs.get(ctype, ctype), "*" in words))
        out[name] = sig
    return out


class SignatureModule:
    """Stands in for a loaded module: checks every launch against the kernel's C signature."""

    def __init__(self, src: str):
        self.sigs, self.launched = signatures(without_directives(src)), []

    def launch(self, name, grid, block, args, smem_bytes=0):
        sig = self.sigs[name]
        assert len(args) == len(sig), f"{name}: {len(args)} arguments for {len(sig)} parameters"
        for i, (arg, (ctype, ptr)) in enumerate(zip(args, sig)):
            if ptr:
                assert arg is None or isinstance(arg, torch.Tensor), f"{name} arg {i}: pointer gets {type(arg)}"
                if arg is not None:
                    assert arg.dtype == _CTYPE_DTYPE[ctype], f"{name} arg {i}: {ctype}* gets {arg.dtype}"
            elif ctype == "int":
                assert type(arg) is int, f"{name} arg {i}: int gets {arg!r}"
            else:
                assert ctype == "float" and isinstance(arg, runtime.f32), f"{name} arg {i}: {ctype} gets {arg!r}"
        self.launched.append((name, tuple(grid), tuple(block), smem_bytes))


def cpu_saved(opt: Options, K: int, g=torch.float32, beta=torch.float32, **shape) -> tuple:
    """A saved dict shaped like the forward's, on the CPU (values do not matter here)."""
    x64 = make_inputs(opt, K=K, V=K, **shape)
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": g, "beta": beta}
    x = {n: t.to(dtypes.get(n, torch.float32)) if t.is_floating_point() else t for n, t in x64.items()}
    short = {torch.bfloat16: "bf16", torch.float32: "f32"}
    config = options_config(opt, K, K, "sm_90a", has_A_log=x.get("A_log") is not None,
                            has_dt_bias=x.get("dt_bias") is not None, G=x["v"].shape[2] // x["q"].shape[2],
                            varlen=x.get("cu_seqlens") is not None, g_dtype=short[g], beta_dtype=short[beta])
    plan, _ = config.planned()
    B, T, HV = x["v"].shape[:3]
    N = B if x.get("cu_seqlens") is None else len(x["cu_seqlens"]) - 1
    sizes = launch_sizes(B=B, T=T, H=x["q"].shape[2], HV=HV, chunk=16,
                         num_seqs=N if x.get("cu_seqlens") is not None else None)
    ws = {name: torch.zeros([evaluate(d, sizes) for d in plan.workspace(name).shape],
                            dtype=torch.bfloat16 if plan.workspace(name).dtype == "bf16" else torch.float32)
          for name in plan.saved}
    saved = {"config": config, "x": x, "scalars": {"scale": scale_of(opt, K)}, "workspace": ws}
    state = (N, HV, K, K)
    return saved, torch.zeros(B, T, HV, K, dtype=torch.bfloat16), torch.zeros(state, dtype=torch.float32)


@pytest.mark.parametrize("opt, K, shape", [
    (KDA_FULL, 128, dict(B=2, T=37, H=2, G=2)),
    (KDA_LB, 64, dict(cu_seqlens=[0, 0, 1, 20, 40], H=1)),
    (GDN_FULL, 64, dict(B=1, T=20, H=2, G=1, initial_state=False)),
    (GDN_PLAIN, 128, dict(B=1, T=33, H=1)),
])
def test_launches_follow_the_plan_and_match_kernel_signatures(opt, K, shape):
    saved, do, dht = cpu_saved(opt, K, **shape)
    loaded = {}

    def loader(config, device, direction):
        plan, r = config.planned()
        loaded["plan"], loaded["module"] = plan, SignatureModule(render_unit(plan, r, "backward"))
        return loaded["module"]

    grads = bw.backward(saved, do, dht, loader=loader)
    plan, mod = loaded["plan"], loaded["module"]
    x = saved["x"]
    B, T, H = x["q"].shape[:3]
    HV = x["v"].shape[2]
    sizes = launch_sizes(B=B, T=T, H=H, HV=HV, chunk=16,
                         num_seqs=len(x["cu_seqlens"]) - 1 if x.get("cu_seqlens") is not None else None)
    want = [(k.name, tuple(evaluate(d, sizes) for d in k.grid), (k.threads,), k.smem_bytes if k.smem_dynamic else 0)
            for k in plan.direction("backward")]
    assert mod.launched == want
    assert [w[0] for w in want] == ["states", "dstate_pass", "recurrence_bwd", "prepare_bwd"] + ["param_reduce"] * opt.use_gate_in_kernel
    for name, t in x.items():
        if name != "cu_seqlens" and t is not None:
            assert grads[name].shape == t.shape and grads[name].dtype == t.dtype, name
    assert (grads["initial_state"] is None) == (x.get("initial_state") is None)


def test_backward_refuses_what_the_plan_does_not_describe():
    saved, do, dht = cpu_saved(KDA_FULL, 64, B=1, T=20, H=1)

    def run(**edit):
        broken = {**saved, "workspace": {**saved["workspace"], **edit.pop("workspace", {})}, **edit}
        bw.backward(broken, do, dht, loader=lambda config, device, direction: SignatureModule(""))

    with pytest.raises(ValueError, match=r"workspace\['ws_q_decayed'\] has shape"):
        run(workspace={"ws_q_decayed": saved["workspace"]["ws_q_decayed"][:, :, :8]})
    with pytest.raises(TypeError, match=r"workspace\['ws_A'\] has dtype torch.bfloat16, the plan expects torch.flo"):
        run(workspace={"ws_A": saved["workspace"]["ws_A"].bfloat16()})
    with pytest.raises(TypeError, match=r"x\['g'\] has dtype torch.bfloat16, the plan expects torch.float32"):
        run(x={**saved["x"], "g": saved["x"]["g"].bfloat16()})
    with pytest.raises(KeyError, match=r"saved\['config'\] is missing"):
        run(config=None)


def test_g_dtype_is_part_of_the_plan():
    """Kernels read g and β in the dtype the caller passes: a bf16 g is a different plan and signature."""
    f32, _ = planned(KDA_FULL, 64, dtypes=Dtypes(g="f32"))
    bf16, _ = planned(KDA_FULL, 64)
    assert {p.name: p.dtype for p in f32.kernel("prepare_bwd").params}["grad_in_g"] == "f32"
    assert {p.name: p.dtype for p in bf16.kernel("prepare_bwd").params}["grad_in_g"] == "bf16"
