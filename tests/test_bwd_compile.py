"""The backward kernels (templates/bwd/, kdagen.ops.backward) without a GPU: rendering, launch plumbing
against the rendered signatures, and compilation (nvcc for sm_90a and sm_80 with the ptxas report;
NVRTC, the runtime's compiler)."""
from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from kdagen import runtime
from kdagen.ops import backward as bw
from kdagen.recurrences import from_options
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import scale_of

KDA_FULL = Options(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
KDA_LB = Options(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                 use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
KDA_PLAIN = Options(state_v_first=True)
GDN_FULL = Options(op="gdn", use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
GDN_PLAIN = Options(op="gdn", state_v_first=True)

# (options, K, g dtype, beta dtype, state dtype, lanes per row): the configurations compiled below
CONFIGS = {
    "kda_full_k128": (KDA_FULL, 128, torch.bfloat16, torch.bfloat16, torch.bfloat16, 16),
    "kda_lb_k64_f32": (KDA_LB, 64, torch.float32, torch.float32, torch.float32, 8),
    "kda_plain_vfirst_k128": (KDA_PLAIN, 128, torch.float32, torch.bfloat16, torch.bfloat16, 8),
    "gdn_full_k128": (GDN_FULL, 128, torch.float32, torch.bfloat16, torch.bfloat16, 16),
    "gdn_plain_vfirst_k64": (GDN_PLAIN, 64, torch.float32, torch.float32, torch.bfloat16, 16),
}
SMEM_LIMIT = {"sm_90a": 227 * 1024, "sm_80": 163 * 1024}


def config(name: str) -> bw.BackwardConfig:
    opt, K, g, b, state, lpr = CONFIGS[name]
    x = {"q": torch.zeros(1, dtype=torch.bfloat16), "k": torch.zeros(1, dtype=torch.bfloat16),
         "g": torch.zeros(1, dtype=g), "beta": torch.zeros(1, dtype=b)}
    return bw.config_for(from_options(opt), x, K, K, state_dtype=state, state_v_first=opt.state_v_first,
                         lanes_per_row=lpr)


# ---- rendering ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_render_names_every_kernel_and_plan_sizes(name):
    cfg = config(name)
    src = bw.render(cfg)
    for kernel in bw.KERNELS:
        assert re.search(rf'extern "C" __global__ void __launch_bounds__\([^)]*\)\s*{kernel}\(', src), kernel
    smem = bw.smem_bytes(cfg)
    assert f"sizeof(kdg_bwd::ChunkIn) == {smem['states']}" in src
    assert f"sizeof(K2BwdSmem) == {smem['k2_bwd']}" in src
    assert not re.search(r"\{\{|\{%[\s-]|\{#", src)                 # no Jinja left (inline PTX has {%0)
    assert cfg.uri in src.splitlines()[0]


def test_prologue_is_emitted_from_the_dsl():
    """K1_bwd's prologue and adjoint change with the recurrence's graph: softplus vs lower-bound gate."""
    soft, lb = bw.render(config("kda_full_k128")), bw.render(config("kda_lb_k64_f32"))
    assert "kdg::softplus(" in soft and "kdg::softplus(" not in lb
    assert "-5.0f" in lb and "2.0f" in lb                                  # lower bound, allow_neg_eigval scale
    plain = bw.render(config("kda_plain_vfirst_k128"))
    assert "l2norm" in soft and "l2norm" not in plain


def test_a_recurrence_defined_here_gets_its_own_prologue_adjoint():
    """A gate activation and β map written only in this test reach K1_bwd through the emitter."""
    from kdagen import dsl

    def tanh_gate(r):
        q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
        g, b = r.token_input("g", "K"), r.token_input("beta")
        w = r.head_param("w", "K")
        r.delta_rule(query=dsl.l2norm(q), key=k, value=v, beta=dsl.square(dsl.sigmoid(b)),
                     decay=-dsl.square(g) * dsl.exp(w), scale=r.scalar("scale"))

    r = dsl.build(tanh_gate, name="custom")
    x = {n: torch.zeros(1, dtype=torch.bfloat16) for n in ("q", "k", "g", "beta")}
    cfg = bw.config_for(r, x, 64, 64)
    src = bw.render(cfg)
    ctx = bw.k1_context(cfg)
    assert [p["name"] for p in ctx["head_params"]] == ["w"] and ctx["head_params"][0]["row"]
    assert "float* __restrict__ part_w" in src and "const float* w_row = w + h * K + d0;" in src
    assert "kdg::square(" in ctx["blocks"]["v_bwd"] and "seed_decay" in ctx["blocks"]["v_bwd"]
    assert "l2norm" not in ctx["blocks"]["qk_bwd"].split("l2norm_")[0] or "seed_query" in ctx["blocks"]["qk_bwd"]
    assert cfg.uri != config("kda_full_k128").uri


def test_an_input_named_like_a_kernel_local_is_refused():
    from kdagen import dsl

    def clash(r):
        q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
        tok, beta = r.token_input("tok", "K"), r.token_input("beta")
        r.delta_rule(query=q, key=k, value=v, beta=beta, decay=-dsl.softplus(tok), scale=r.scalar("scale"))

    r = dsl.build(clash, name="clash")
    x = {n: torch.zeros(1, dtype=torch.bfloat16) for n in ("q", "k", "tok", "beta")}
    with pytest.raises(ValueError, match="'tok'.*collides"):
        bw.render(bw.config_for(r, x, 64, 64))


# ---- launch plumbing against the rendered signatures -------------------------------------------------

_CTYPE_DTYPE = {"__nv_bfloat16": torch.bfloat16, "float": torch.float32, "long long": torch.int64, "int": torch.int32}


def signatures(src: str) -> dict:
    """kernel name -> [(C type without qualifiers, is pointer)] from the rendered extern "C" kernels."""
    typedefs = dict((alias, ctype) for ctype, alias in re.findall(r"typedef (\w+) (\w+);", src))
    out = {}
    for name, params in re.findall(r'extern "C" __global__ void __launch_bounds__\([^)]*\)\s*(\w+)\(([^)]*)\)', src):
        sig = []
        for p in params.split(","):
            words = p.replace("__restrict__", "").replace("const", "").replace("*", " * ").split()
            ptr = "*" in words
            ctype = " ".join(w for w in words[:-1] if w != "*").replace("kdg_bwd::", "")
            while ctype in typedefs:
                ctype = typedefs[ctype]
            sig.append((ctype, ptr))
        out[name] = sig
    return out


class SignatureModule:
    """Stands in for a loaded module: checks every launch against the kernel's C signature."""

    def __init__(self, src: str):
        self.sigs, self.launched = signatures(src), []

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


def cpu_saved(opt: Options, K: int, **shape) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """A saved dict shaped like the forward's, on the CPU (values do not matter here)."""
    x64 = make_inputs(opt, K=K, V=K, **shape)
    x = {n: t.to(torch.float32) if t.is_floating_point() else t for n, t in x64.items()}
    for n in ("q", "k", "v"):
        x[n] = x64[n].to(torch.bfloat16)
    B, T, HV = x["v"].shape[:3]
    N = B if x.get("cu_seqlens") is None else len(x["cu_seqlens"]) - 1
    NC = B * T // 16 + N
    ws = {n: torch.zeros(NC, HV, 16, K, dtype=torch.bfloat16) for n in ("qd", "kd", "kr")}
    ws.update(gte=torch.zeros(NC, HV, *((K,) if opt.per_channel else ()), dtype=torch.float32),
              A=torch.zeros(NC, HV, 16, 16, dtype=torch.bfloat16), Mqk=torch.zeros(NC, HV, 16, 16, dtype=torch.bfloat16),
              beta=torch.zeros(NC, HV, 16, dtype=torch.float32))
    saved = {"opt": opt, "x": x, "scale": scale_of(opt, K), "state_v_first": opt.state_v_first, "workspace": ws}
    state = (N, HV, K, K)
    return saved, torch.zeros(B, T, HV, K, dtype=torch.bfloat16), torch.zeros(state, dtype=torch.float32)


@pytest.mark.parametrize("opt, K, shape", [
    (KDA_FULL, 128, dict(B=2, T=37, H=2, G=2)),
    (KDA_LB, 64, dict(cu_seqlens=[0, 0, 1, 20, 40], H=1)),
    (GDN_FULL, 64, dict(B=1, T=20, H=2, G=1, initial_state=False)),
    (GDN_PLAIN, 128, dict(B=1, T=33, H=1)),
])
def test_launch_arguments_match_kernel_signatures(opt, K, shape):
    saved, do, dht = cpu_saved(opt, K, **shape)
    loaded = {}

    def loader(cfg, device):
        loaded["cfg"] = cfg
        loaded["module"] = SignatureModule(bw.render(cfg))
        return loaded["module"]

    grads = bw.backward(saved, do, dht, loader=loader)
    cfg, mod = loaded["cfg"], loaded["module"]
    names = [launch[0] for launch in mod.launched]
    expected_reduce = sum(saved["x"].get(p) is not None for p in ("A_log", "dt_bias")) if opt.use_gate_in_kernel else 0
    assert names == ["kdagen_bwd_states", "kdagen_k2_bwd", "kdagen_k1_bwd"] + ["kdagen_param_reduce"] * expected_reduce
    smem = bw.smem_bytes(cfg)
    assert mod.launched[0][3] == smem["states"] and mod.launched[1][3] == smem["k2_bwd"]
    assert mod.launched[0][2] == (2 * K,) and mod.launched[2][2] == (16 * cfg.lanes_per_row,)
    for name, t in saved["x"].items():
        if name != "cu_seqlens" and t is not None:
            assert grads[name].shape == t.shape and grads[name].dtype == t.dtype, name


def test_backward_rejects_a_mismatched_workspace():
    saved, do, dht = cpu_saved(KDA_FULL, 64, B=1, T=20, H=1)
    saved["workspace"]["qd"] = saved["workspace"]["qd"][:, :, :8]
    with pytest.raises(ValueError, match=r"workspace\['qd'\] has shape"):
        bw.backward(saved, do, dht, loader=lambda cfg, device: SignatureModule(""))


# ---- compilation --------------------------------------------------------------------------------------

def _ptxas(src: str, arch: str, tmp_path) -> dict:
    path = tmp_path / f"{arch}_{abs(hash(src))}.cu"
    path.write_text(src)
    proc = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", str(path.with_suffix(".cubin")),
                           str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "warning" not in proc.stderr.lower(), proc.stderr[-4000:]
    report = {}
    for name, body in re.findall(r"Compiling entry function '(\w+)'.*?\n(.*?)(?=Compiling entry|\Z)", proc.stderr, re.S):
        report[name] = {
            "spill_stores": int(re.search(r"(\d+) bytes spill stores", body).group(1)),
            "stack": int(re.search(r"(\d+) bytes stack frame", body).group(1)),
            "regs": int(re.search(r"Used (\d+) registers", body).group(1)),
            "smem": int(m.group(1)) if (m := re.search(r"(\d+) bytes smem", body)) else 0,
        }
    return report


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_every_backward_kernel_compiles_without_spills(tmp_path):
    jobs = [(name, arch) for name in sorted(CONFIGS) for arch in SMEM_LIMIT]
    with ThreadPoolExecutor(max_workers=4) as pool:
        reports = list(pool.map(lambda job: _ptxas(bw.render(config(job[0])), job[1], tmp_path), jobs))
    problems = []
    for (name, arch), report in zip(jobs, reports):
        assert sorted(report) == sorted(bw.KERNELS), (name, arch, sorted(report))
        dynamic = bw.smem_bytes(config(name))
        for kernel, r in report.items():
            smem = r["smem"] + dynamic.get({"kdagen_bwd_states": "states", "kdagen_k2_bwd": "k2_bwd"}.get(kernel), 0)
            if r["spill_stores"] or r["stack"] or smem > SMEM_LIMIT[arch] or r["smem"] > 48 * 1024:
                problems.append(f"{name} {arch} {kernel}: {r}, total smem {smem}")
    assert not problems, "\n".join(problems)


def _nvrtc_available() -> bool:
    try:
        runtime.cuda_include_dir()
        from cupy.cuda import nvrtc  # noqa: F401
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _nvrtc_available(), reason="CuPy's NVRTC or the CUDA headers are missing")
def test_nvrtc_compiles_the_backward_module_for_sm90a():
    image = runtime.compile_cubin(bw.render(config("gdn_full_k128")), "bwd.cu", "sm_90a")
    assert image[:4] == b"\x7fELF"
