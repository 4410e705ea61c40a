"""The forward of chunk_kda / chunk_gated_delta_rule on the GPU: K1 "prepare" then K2 "recurrence".

`forward(x, call, keep)` (the signature kdagen.ops.autograd calls) builds the
recurrence from the call's options, plans it (kdagen.plan), renders the forward unit (kdagen.codegen,
cached per process), loads it through kdagen.runtime and launches on torch's current stream:

    K1 k1_prepare     grid (chunks, HV)    the prologue, Γ, decayed q/k, Mqk, A -> workspace
    K2 k2_recurrence  grid (N, HV, V/64)   the state recurrence -> o, final state

Fixed-length batches run as B sequences of T tokens on the flattened B·T token axis; varlen runs the
cu_seqlens segments. The chunk grid is the upper bound B·T // 16 + N (no host sync); its surplus CTAs
exit. `saved` is what kdagen.ops.backward reads: the Config (whose plan also holds the backward
kernels), the inputs, the scalars and the workspace in the plan's shapes (qd, kd, kr [NC,HV,16,K] bf16;
gte [NC,HV,K] or [NC,HV,1] fp32; A, Mqk [NC,HV,16,16] fp32; beta [NC,HV,16] fp32). The helpers both
directions launch with (`sequence_layout`, `run_kernels`, `runtime_loader`) live here.
`reference_workspace` / `workspace_errors` check K1's output against float64 (tests, and debugging on a GPU).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import torch

from ..codegen import render_unit
from ..plan import Dtypes, Plan, make_plan, problem_from_options, verify
from ..plan.sizes import evaluate, launch_sizes
from ..runtime import env as runtime_env

WS_KEYS = {"ws_qd": "qd", "ws_kd": "kd", "ws_kr": "kr", "ws_gte": "gte", "ws_A": "A", "ws_Mqk": "Mqk",
           "ws_beta": "beta"}
_DTYPE = {torch.bfloat16: "bf16", torch.float32: "f32"}
_TORCH = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "i64": torch.int64}


def plan_options(call):
    """The Options the recurrence is built from: safe_gate's promise (g in [gate_bound, 0)) becomes the
    precomputed gate's declared lower bound, which lets the planner prove the factored form. The scale is a
    run-time argument of the kernels, not something they are specialised on: one plan serves every scale."""
    opt = dataclasses.replace(call.opt, scale=None)
    bound = getattr(call, "gate_bound", None)
    if bound is not None and not opt.use_gate_in_kernel:
        opt = dataclasses.replace(opt, lower_bound=bound)
    return opt


def default_arch(device=None) -> str:
    """The arch kernels are planned for: KDAGEN_ARCH, else the GPU's, else sm_90a (CPU emulation, emit)."""
    from .. import runtime
    if runtime_env.arch_override() or (torch.cuda.is_available() and (device is None or device.type == "cuda")):
        return runtime.detect_arch(device)
    return "sm_90a"


@dataclasses.dataclass(frozen=True)
class Config:
    """What the forward kernels are specialised on (a hashable key: one plan and one module per value)."""
    opt: object                   # kdagen.reference.Options (after plan_options)
    K: int
    V: int
    arch: str
    has_A_log: bool
    has_dt_bias: bool
    G: int
    varlen: bool
    g_dtype: str
    beta_dtype: str

    def planned(self):
        """(verified plan, recurrence), once per process."""
        return _planned(self)

    def source(self, direction: str = "forward") -> str:
        """The rendered unit of a direction ("forward", "backward"), once per process."""
        return _source(self, direction)


@functools.lru_cache(maxsize=64)
def _planned(config: Config):
    problem = problem_from_options(config.opt, K=config.K, V=config.V, arch=config.arch, has_A_log=config.has_A_log,
                                   has_dt_bias=config.has_dt_bias, gva_ratio=config.G, varlen=config.varlen,
                                   dtypes=Dtypes(g=config.g_dtype, beta=config.beta_dtype))
    return verify(make_plan(problem)), problem.recurrence


@functools.lru_cache(maxsize=64)
def _source(config: Config, direction: str) -> str:
    plan, recurrence = config.planned()
    return render_unit(plan, recurrence, direction)


def config_for(call, K: int, V: int, G: int, varlen: bool, dtypes: dict, arch: str) -> Config:
    """The Config of a call; dtypes maps "g" and "beta" to torch dtypes."""
    for name in ("g", "beta"):
        if dtypes[name] not in _DTYPE:
            raise NotImplementedError(f"{name} of dtype {dtypes[name]}: kernels read bfloat16 or float32")
    t = call.tensors
    return Config(plan_options(call), K, V, arch, t.get("A_log") is not None, t.get("dt_bias") is not None, G, varlen,
                  _DTYPE[dtypes["g"]], _DTYPE[dtypes["beta"]])


def module_uri(plan: Plan, direction: str = "forward") -> str:
    return f"{plan.uri}_{direction}"


def module_source(call, dims, dtypes, arch: str | None, direction: str) -> list[tuple[str, str]]:
    """[(uri, CUDA source)] of the module a call with these sizes and dtypes loads for a direction."""
    config = config_for(call, dims.K, dims.V, dims.HV // dims.H, call.tensors.get("cu_seqlens") is not None,
                        dtypes, arch or default_arch())
    return [(module_uri(config.planned()[0], direction), config.source(direction))]


def kernel_sources(call, dims, dtypes, arch: str | None = None) -> list[tuple[str, str]]:
    """(uri, CUDA source) of the forward module a call with these sizes and dtypes loads (kdagen compile)."""
    return module_source(call, dims, dtypes, arch, "forward")


def runtime_loader(config: Config, device, direction: str = "forward"):
    """The compiled module of a direction for this config (kdagen.runtime: memo, disk cache, NVRTC)."""
    from .. import runtime
    plan, _ = config.planned()
    return runtime.load_module(module_uri(plan, direction), config.source(direction), config.arch, device=device)


def chunk_layout(cu_seqlens, B: int, T: int, C: int, device):
    """(cu_seqlens int64 [N+1], chunk_offsets int32 [N+1]) on the device, computed without a host sync."""
    if cu_seqlens is None:
        cu = torch.arange(B + 1, device=device, dtype=torch.int64) * T
    else:
        cu = cu_seqlens.to(device=device, dtype=torch.int64)
    counts = (cu[1:] - cu[:-1] + C - 1) // C
    return cu, torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)


def check_operand(where: str, name: str, t, dtype=None, shape=None, device=None):
    """t as the kernels read it: the plan's dtype and shape (a 1-tuple: the element count, any shape), the
    device, contiguous and 16-byte aligned. None passes (an absent optional input); returns t."""
    if t is None:
        return t
    if shape is not None and ((t.numel(),) if len(shape) == 1 else tuple(t.shape)) != tuple(shape):
        raise ValueError(f"{where}: {name} has shape {tuple(t.shape)}, the plan expects {tuple(shape)}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{where}: {name} has dtype {t.dtype}, the plan expects {dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{where}: {name} is on {t.device}, expected {device}")
    if not t.is_contiguous() or t.data_ptr() % 16:
        raise ValueError(f"{where}: {name} must be contiguous and 16-byte aligned")
    return t


def planned_sizes(plan: Plan, x: dict, where: str) -> dict:
    """B, T, H, HV and the q/k inputs of the tensors x, checked against the plan (plain data: per call)."""
    p = plan.problem
    qk = p["qk_inputs"]
    q, v = x[qk[0]], x[p["value_input"]]
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if (K, V, HV // H) != (p["K"], p["V"], p["gva_ratio"]) or HV % H:
        raise ValueError(f"{where}: {qk[0]} {tuple(q.shape)} and {p['value_input']} {tuple(v.shape)} do not fit the "
                         f"plan (K={p['K']}, V={p['V']}, GVA {p['gva_ratio']})")
    if (x.get("cu_seqlens") is not None) != p["varlen"]:
        raise ValueError(f"{where}: the plan is for {'packed' if p['varlen'] else 'fixed-length'} sequences")
    return {"B": B, "T": T, "H": H, "HV": HV, "qk": qk}


def sequence_layout(plan: Plan, cu_seqlens, B: int, T: int, H: int, HV: int, device) -> tuple[dict, dict]:
    """(kernel arguments that locate sequences and chunks, launch sizes for the plan's symbols)."""
    cu, offsets = chunk_layout(cu_seqlens, B, T, plan.chunk, device)
    N = cu.numel() - 1
    sizes = launch_sizes(B=B, T=T, H=H, HV=HV, chunk=plan.chunk, num_seqs=N if cu_seqlens is not None else None)
    values = {"cu_seqlens": cu, "chunk_offsets": offsets, "T": T if cu_seqlens is None else B * T, "N": N,
              "H": H, "HV": HV, "G": HV // H}
    return values, sizes


def kernel_args(kernel, values: dict) -> list:
    """Kernel arguments in the plan's parameter order, by name."""
    from ..runtime import f32, i64
    out = []
    for p in kernel.params:
        if p.name not in values:
            raise KeyError(f"{kernel.direction}: no value for parameter {p.name!r} of kernel {kernel.name}")
        v = values[p.name]
        out.append(f32(float(v)) if p.kind == "f32" else i64(int(v)) if p.kind == "i64" else v)
    return out


def run_kernels(kernels, module, values: dict, sizes: dict) -> None:
    """Launch each kernel on its plan grid (skipping empty grids) with its arguments taken from values."""
    for kernel in kernels:
        grid = tuple(evaluate(d, sizes) for d in kernel.grid)
        if min(grid) == 0:
            continue
        module.launch(kernel.name, grid, (kernel.threads,), kernel_args(kernel, values),
                      smem_bytes=kernel.smem_bytes if kernel.smem_dynamic else 0)


def workspace_shape(w, sizes: dict) -> tuple:
    return tuple(evaluate(d, sizes) for d in w.shape)


def launch(plan: Plan, module, x: dict, scalars: dict, *, output_final_state: bool = True,
           poison: bool = False):
    """Run the plan's forward kernels on the inputs x (the recurrence's tensors by name, plus
    initial_state and cu_seqlens): returns (o, final state or None, workspace by plan name)."""
    p = plan.problem
    dims = planned_sizes(plan, x, "forward")
    B, T, H, HV, qk = dims["B"], dims["T"], dims["H"], dims["HV"], dims["qk"]
    v = x[p["value_input"]]
    device = v.device
    seq, sizes = sequence_layout(plan, x.get("cu_seqlens"), B, T, H, HV, device)
    for name in (*qk, p["value_input"]):
        check_operand("forward", name, x[name], torch.bfloat16)
    for name, t in x.items():
        if name not in (*qk, p["value_input"], "cu_seqlens"):
            check_operand("forward", name, t, torch.float32 if name == "initial_state" else None)

    def alloc(shape, dtype):
        fill = torch.full if poison else (lambda s, _, **kw: torch.empty(s, **kw))
        return fill(shape, math.nan, dtype=dtype, device=device)

    ws = {w.name: alloc(workspace_shape(w, sizes), _TORCH[w.dtype]) for w in plan.workspaces
          if w.producer == "k1_prepare"}
    o = alloc(v.shape, v.dtype)
    ht = alloc(state_shape(plan, seq["N"], HV), torch.float32) if output_final_state else None
    values = {**{n: t for n, t in x.items() if n != "cu_seqlens"}, **ws, **scalars, **seq,
              "v": v, "h0": x.get("initial_state"), "o": o, "ht": ht}
    run_kernels(plan.direction("forward"), module, values, sizes)
    return o, ht, ws


def state_shape(plan: Plan, N: int, HV: int) -> tuple:
    """h0, the final state and their gradients: [N,HV,K,V], or [N,HV,V,K] with state_v_first."""
    p = plan.problem
    return (N, HV, p["V"], p["K"]) if p["state_layout"] == "vk" else (N, HV, p["K"], p["V"])


def forward(x: dict, call, keep: bool = True, *, loader=None, poison: bool = False):
    """(o [B,T,HV,V], final state or None, saved) for inputs x (q, k, v, g, beta, A_log, dt_bias,
    initial_state, cu_seqlens by name) and a resolved call (kdagen.ops.api.Call: .opt, .output_final_state,
    .gate_bound, .tensors). `loader(config, device)` returns a module with `launch(...)` (default
    `runtime_loader`; tests pass the CPU emulation); `poison` fills every output and workspace with NaN
    first (tests; also KDAGEN_DEBUG=1). Sizes come from the tensors: nothing here syncs with the host."""
    q, v = x["q"], x["v"]
    H, K, HV, V = q.shape[2], q.shape[3], v.shape[2], v.shape[3]
    if HV % H:
        raise ValueError(f"forward: HV={HV} value heads must be a multiple of H={H} q/k heads")
    config = config_for(call, K, V, HV // H, x.get("cu_seqlens") is not None,
                        {"g": x["g"].dtype, "beta": x["beta"].dtype}, default_arch(q.device))
    plan, recurrence = config.planned()
    opt = call.opt
    scale = K ** -0.5 if opt.scale is None else float(opt.scale)
    tensors = {n: t for n, t in x.items() if t is not None}
    module = (loader or runtime_loader)(config, q.device)
    poison = poison or runtime_env.debug()
    o, ht, ws = launch(plan, module, tensors, {"scale": scale}, output_final_state=call.output_final_state,
                       poison=poison)
    saved = None
    if keep:
        saved = {"config": config, "plan": plan, "recurrence": recurrence, "opt": opt, "x": dict(x),
                 "scalars": {"scale": scale}, "workspace": {WS_KEYS[n]: t for n, t in ws.items()}}
    return o, ht, saved


def reference_workspace(x: dict, opt, chunk: int = 16) -> list[dict]:
    """What K1 must write, in float64, for debugging and tests: one dict per (sequence, chunk) with the
    workspace index `chunk`, the valid length `L` and the terms per value head (qd, kd, kr [HV,L,K];
    gte [HV,K] or [HV]; A, Mqk [HV,L,L]; beta [HV,L]). x holds float64 inputs like kdagen.reference's."""
    from ..reference.chunked import chunk_terms
    from ..reference.options import chunk_spans, expand_heads, prologue, scale_of, sequence_spans
    p = prologue(x, opt)
    B, T, HV = x["v"].shape[:3]
    K = x["q"].shape[-1]
    scale = scale_of(opt, K)
    q, k = expand_heads(p["q"], HV), expand_heads(p["k"], HV)
    a = p["a"] if p["a"].dim() == 4 else p["a"][..., None].expand(*p["a"].shape, K)
    out, first = [], 0
    for b, bos, eos in sequence_spans(B, T, x.get("cu_seqlens")):
        spans = chunk_spans(bos, eos, chunk)
        for c, (s, e) in enumerate(spans):
            cut = lambda t: t[b, s:e].transpose(0, 1)  # noqa: E731
            t = chunk_terms(cut(q), cut(k), cut(x["v"]), cut(a), cut(p["beta"]), scale)
            gte = t["Gl"].exp()
            out.append({"chunk": first + c, "L": e - s, "qd": scale * cut(q) * t["E"], "kd": cut(k) * t["E"],
                        "kr": cut(k) * t["R"], "gte": gte if p["a"].dim() == 4 else gte[:, 0], "A": t["A"],
                        "Mqk": t["Mqk"], "beta": cut(p["beta"])})
        first += len(spans)                  # chunk_offsets (varlen) or n·⌈T/C⌉ (fixed length)
    return out


def workspace_errors(saved: dict, x64: dict, opt) -> dict:
    """Relative L2 error of each K1 workspace term against reference_workspace, and the largest
    magnitude found in rows past a chunk's end (they must be zero)."""
    ws = saved["workspace"]
    got, want, tail = {}, {}, [0.0]
    for ref in reference_workspace(x64, opt):
        c, L = ref["chunk"], ref["L"]
        for key in ("qd", "kd", "kr", "gte", "A", "Mqk", "beta"):
            mine = ws[key][c].double().cpu()
            if key in ("qd", "kd", "kr", "beta", "A", "Mqk"):
                tail.append(mine[:, L:].abs().max().item() if L < mine.shape[1] else 0.0)
                mine = mine[:, :L, :L] if key in ("A", "Mqk") else mine[:, :L]
            got.setdefault(key, []).append(mine.reshape(-1))
            want.setdefault(key, []).append(ref[key].reshape(-1))
    errors = {}
    for key in got:
        g, w = torch.cat(got[key]), torch.cat(want[key])
        errors[key] = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    errors["tail_max"] = max(tail)
    return errors
