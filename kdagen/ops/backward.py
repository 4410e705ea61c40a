"""The backward of the chunked delta rule on the GPU: four kernels from templates/bwd/, one module.

`backward(saved, do, dht)` launches, on torch's current stream:

1. ``kdagen_bwd_states``   K2 in "store states" mode: S_c, the state entering every chunk   grid (N, HV)
2. ``kdagen_k2_bwd``       reverse chunk recurrence (dS fp32 on chip): dv, dh0 and the
                            gradients of the derived tensors qd, kd, kr, gte, Mqk, Mkk, β      grid (N, HV)
3. ``kdagen_k1_bwd``       intra-chunk contractions, reverse cumsum, prologue adjoint       grid (chunks, H)
4. ``kdagen_param_reduce`` per-head parameter gradients: fixed-order sums of per-chunk partials

The math is kdagen.reference.chunked.chunk_delta_rule_bwd_k2 then reference.prepare, split where the
reference splits it. K1_bwd's prologue and its adjoint are emitted from the recurrence's DSL graphs by
kdagen.codegen.expr, so a recurrence written only in the DSL gets its backward kernels unchanged.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import networkx as nx
import torch

from .. import __version__
from ..codegen.env import environment
from ..codegen.expr import c_float, emit
from ..codegen.prologue import head_space
from ..codegen.render import common_sources
from ..dsl import autodiff
from ..plan.problem import recurrence_facts

CHUNK = 16
KERNELS = ("kdagen_bwd_states", "kdagen_k2_bwd", "kdagen_k1_bwd", "kdagen_param_reduce")
CTYPES = {torch.bfloat16: "bf16", torch.float32: "float"}
_SHORT = {"bf16": "bf16", "float": "f32"}
# Names K1_bwd declares itself (and those the emitted blocks use inside their scopes): an input or scalar
# of the recurrence may not take one, nor a prefix of its own bindings.
K1_NAMES = {"c", "jh", "HV", "H", "G", "N", "tid", "i", "rl", "d0", "core_scale", "n", "hi", "mid", "tok0", "L",
            "valid", "tok", "dgc", "kbr", "sm", "dqh", "dkh", "gi", "h", "ws", "bi", "Gi", "bq", "R", "bki", "kR",
            "e", "at", "Gl", "Ei", "Ri", "qv", "kv", "col", "ii", "jj", "mq", "mk", "F", "kf", "x", "rev", "total",
            "acc", "dqd", "dkd", "dkr", "dMqk", "dMkk", "dgT", "dbeta_k2", "cu_seqlens", "chunk_offsets", "j", "r",
            "s", "ss"}
K1_PREFIXES = ("grad_", "part_", "given_", "seed_", "n_", "d_")


@dataclass(frozen=True)
class BackwardConfig:
    """What the backward kernels are specialised on: one rendered and compiled module per value.

    leaf_ctypes: C element type of every token input the prologue reads (q, k, g, beta, ...), by name;
    head parameters are fp32. The recurrence is identified by its graph hash.
    """
    recurrence: object = field(compare=False, repr=False)    # kdagen.dsl.Recurrence
    graph_sha: str
    K: int
    V: int
    leaf_ctypes: tuple                   # ((name, "bf16" | "float"), ...)
    state: str = "bf16"                  # S_c workspace element type
    cc: str = "bf16"                     # A and Mqk in the forward workspace
    state_v_first: bool = False
    lanes_per_row: int = 16              # K1_bwd: lanes per token row

    def __post_init__(self):
        if self.K != self.V or self.K not in (64, 128):
            raise ValueError(f"backward kernels exist for K = V in (64, 128); got K={self.K}, V={self.V}")
        for name in ("state", "cc"):
            if getattr(self, name) not in _SHORT:
                raise ValueError(f"BackwardConfig.{name} must be 'bf16' or 'float', got {getattr(self, name)!r}")
        if self.lanes_per_row not in (4, 8, 16, 32) or self.K % self.lanes_per_row:
            raise ValueError(f"BackwardConfig.lanes_per_row={self.lanes_per_row}: a power of two in 4..32 dividing K")

    @property
    def per_channel(self) -> bool:
        return self.recurrence.decay_kind == "vector"

    @property
    def uri(self) -> str:
        """File-name-safe and readable; the graph hash stands for the prologue."""
        leaves = "".join(f"{n}{_SHORT[t]}" for n, t in self.leaf_ctypes)
        parts = [f"bwd_{self.recurrence.name}", f"k{self.K}v{self.V}", f"s{_SHORT[self.state]}",
                 f"a{_SHORT[self.cc]}", leaves, f"lpr{self.lanes_per_row}", self.graph_sha[:10]]
        return "_".join(parts + (["vfirst"] if self.state_v_first else []))


def config_for(recurrence, x: dict, K: int, V: int, *, cc_dtype=torch.bfloat16, state_dtype=torch.bfloat16,
               state_v_first: bool = False, lanes_per_row: int = 16) -> BackwardConfig:
    """The specialisation for `recurrence` on the tensors `x` (dtypes of its token inputs)."""
    value = recurrence.core_operands()["value"]
    ctypes = []
    for name in recurrence.token_inputs:
        if name == value:
            continue
        t = x.get(name)
        if t is None:
            raise KeyError(f"backward: the recurrence reads token input {name!r}, which the forward did not save")
        if t.dtype not in CTYPES:
            raise TypeError(f"backward: {name} has dtype {t.dtype}; kernels read bfloat16 or float32")
        ctypes.append((name, CTYPES[t.dtype]))
    for what, dt in (("A/Mqk workspace", cc_dtype), ("state workspace", state_dtype)):
        if dt not in CTYPES:
            raise TypeError(f"backward: {what} dtype {dt} has no kernel (bfloat16 or float32)")
    return BackwardConfig(recurrence=recurrence, graph_sha=recurrence_facts(recurrence)["graph_sha"], K=K, V=V,
                          leaf_ctypes=tuple(ctypes), state=CTYPES[state_dtype], cc=CTYPES[cc_dtype],
                          state_v_first=state_v_first, lanes_per_row=lanes_per_row)


def smem_bytes(cfg: BackwardConfig) -> dict:
    """Dynamic shared memory of the two recurrence kernels: the sums of their tiles (ChunkIn, K2BwdSmem).

    Every tile is a multiple of 16 bytes, so the structs have no padding; the rendered source
    static_asserts these numbers, so template and launch cannot drift apart.
    """
    C, K, V = CHUNK, cfg.K, cfg.V
    ldk, ldv, ldc, nw = K + 8, V + 8, C + 8, V // 16
    chunk_in = 2 * (2 * C * ldk + C * ldv + C * ldc) + 4 * (C * C + C + K)
    k2_bwd = chunk_in + 2 * (C * ldk + 3 * V * ldk + C * ldv + 4 * V * ldc + C * ldc) \
        + 4 * (3 * C * C + nw * C + nw * K)
    return {"states": chunk_in, "k2_bwd": k2_bwd}


# ---- K1_bwd's emitted blocks ---------------------------------------------------------------------------

def _ancestors_of(graph: nx.DiGraph, nodes, op: str) -> list[str]:
    found = set()
    for n in nodes:
        found |= {a for a in nx.ancestors(graph, n) | {n} if graph.nodes[a]["op"] == op}
    return sorted(found)


def k1_context(cfg: BackwardConfig) -> dict:
    """What templates/bwd/k1_bwd.cuh.j2 binds: leaves, gradients, head parameters and the four blocks.

    A head parameter's gradient comes out of the emitted adjoint as a per-token term; K1_bwd sums it over
    the chunk's rows and param_reduce over chunks. That is exact because an adjoint is linear in its
    seeds: whatever follows the DSL's sum_tokens node (e.g. the factor e^A_log) distributes over the sum.
    """
    r = cfg.recurrence
    ops = r.core_operands()
    b = autodiff.backward(r, saved=())
    ctypes = dict(cfg.leaf_ctypes)
    for name in [*r.token_inputs, *r.head_params, *r.scalars]:
        if name in K1_NAMES or name.startswith(K1_PREFIXES) or name.endswith("_row"):
            raise ValueError(f"input {name!r} of recurrence {r.name!r}: the name collides with one K1_bwd declares; "
                             "rename it")
    qk_inputs = [n for n in r.token_inputs if head_space(r, n) == "H"]
    v_inputs = [n for n in r.token_inputs if n not in qk_inputs and n != ops["value"]]
    for name in _ancestors_of(r.graph, (ops["query"], ops["key"]), "head_param"):
        raise NotImplementedError(f"head parameter {name!r} feeds the query/key, which live on the q/k heads; "
                                  "K1_bwd binds head parameters per value head")
    for name in qk_inputs:
        if tuple(r.graph.nodes[name]["shape"]) != ("K",):
            raise NotImplementedError(f"token input {name!r} feeds the query/key but is not a K row")
    blocks = {
        "qk_fwd": emit(r.graph, {"qh_out": ops["query"], "kh_out": ops["key"]}),
        "v_fwd": emit(r.graph, {"a_out": ops["decay"], "beta_out": ops["beta"]}),
        "v_bwd": emit(b.graph, {f"d_{n}": b.outputs[n] for n in v_inputs + list(r.head_params)}),
        "qk_bwd": emit(b.graph, {f"d_{n}": b.outputs[n] for n in qk_inputs}, given=(ops["query"], ops["key"])),
    }
    for key in ("v_fwd", "v_bwd"):
        stray = set(blocks[key].leaves) & set(qk_inputs)
        if stray:
            raise NotImplementedError(f"the decay/β prologue reads {sorted(stray)}, which live on the q/k heads")

    def row(name):
        return tuple(r.graph.nodes[name]["shape"]) == ("K",)

    def where(name):                      # this thread's element(s) of a leaf, as the kernel indexes it
        if name in qk_inputs:
            return "(tok * H + jh) * K + d0"
        if name in r.head_params:
            return "h * K + d0" if row(name) else "h"
        return "(tok * HV + h) * K + d0" if row(name) else "tok * HV + h"

    def bind(block):
        """Pointers to the leaves `block` reads, and the given arrays (q̂, k̂ from shared memory)."""
        lines = [f"const {ctypes.get(n, 'float')}* {n}_row = {n} + {where(n)};" for n in block.leaves]
        for node, tile in ((ops["query"], "qh"), (ops["key"], "kh")):
            if node in block.given:
                lines += [f"float given_{node}[KPT];",
                          f"for (int e = 0; e < KPT; ++e) given_{node}[e] = sm.{tile}[i * K + d0 + e];"]
        return "\n".join(lines)

    scale = r.graph.nodes[ops["scale"]]
    return {
        "lanes_per_row": cfg.lanes_per_row,
        "qk_leaves": [{"name": n, "ctype": ctypes[n]} for n in qk_inputs],
        "token_grads": [{"name": n, "ctype": ctypes[n], "row": row(n)} for n in v_inputs],
        "head_params": [{"name": n, "row": row(n)} for n in r.head_params],
        "leaves": ([{"name": n, "ctype": ctypes[n]} for n in qk_inputs + v_inputs]
                   + [{"name": n, "ctype": "float"} for n in r.head_params]),
        "scalars": list(r.scalars),
        "scale": scale["name"] if scale["op"] == "scalar" else c_float(scale["value"]),
        "blocks": {k: v.code.rstrip("\n") for k, v in blocks.items()},
        "bind": {k: bind(v) for k, v in blocks.items()},
    }


# ---- rendering -----------------------------------------------------------------------------------------

def header(cfg: BackwardConfig) -> str:
    lines = [f"kdagen {__version__} generated CUDA: {cfg.uri} (backward)",
             f"configuration: recurrence {cfg.recurrence.name} (graph {cfg.graph_sha}, decay {cfg.recurrence.decay_kind}),"
             f" K={cfg.K} V={cfg.V} chunk={CHUNK}, leaves {dict(cfg.leaf_ctypes)}, S_c {cfg.state}, A/Mqk {cfg.cc},"
             f" state_v_first {cfg.state_v_first}, K1_bwd lanes per row {cfg.lanes_per_row}",
             "Do not edit: rendered from templates/bwd/ by kdagen.ops.backward."]
    return "".join(f"// {line}\n" for line in lines)


def render_kernels(cfg: BackwardConfig) -> str:
    """The four kernels (templates/bwd/backward.cu.j2 and its includes), without the common helpers."""
    return environment().get_template("bwd/backward.cu.j2").render(
        K=cfg.K, V=cfg.V, per_channel=cfg.per_channel, state_v_first=cfg.state_v_first,
        ctype={"state": cfg.state, "cc": cfg.cc}, smem=smem_bytes(cfg), k1=k1_context(cfg))


@functools.cache
def render(cfg: BackwardConfig) -> str:
    """The CUDA translation unit of the backward kernels for `cfg` (templates/unit.cu.j2)."""
    return environment().get_template("unit.cu.j2").render(header=header(cfg), common=common_sources(),
                                                           kernels=[render_kernels(cfg)])


# ---- launches ------------------------------------------------------------------------------------------

def chunk_layout(cu_seqlens: torch.Tensor | None, B: int, T: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(cu_seqlens int64 [N+1], chunk_offsets int32 [N+1]) on the device, without a host sync.

    Fixed-length batches are sequences of T tokens on the flattened B·T token axis.
    """
    if cu_seqlens is None:
        cu = torch.arange(B + 1, device=device, dtype=torch.int64) * T
    else:
        cu = cu_seqlens.to(device=device, dtype=torch.int64)
    counts = (cu[1:] - cu[:-1] + CHUNK - 1) // CHUNK
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)
    return cu, offsets


def _require(d: dict, key: str, where: str):
    if d.get(key) is None:
        raise KeyError(f"backward: {where}[{key!r}] is missing; the forward must save it")
    return d[key]


def _check(name: str, t: torch.Tensor, shape: tuple, dtypes: tuple, device) -> torch.Tensor:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"backward: {name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"backward: {name} has dtype {t.dtype}, expected one of {dtypes}")
    if t.device != device:
        raise ValueError(f"backward: {name} is on {t.device}, expected {device}")
    if not t.is_contiguous() or t.data_ptr() % 16:
        raise ValueError(f"backward: {name} must be contiguous and 16-byte aligned")
    return t


def runtime_loader(cfg: BackwardConfig, device):
    """The compiled backward module for `cfg` (kdagen.runtime: per-process memo, disk cache, NVRTC)."""
    from .. import runtime
    return runtime.load_module(cfg.uri, render(cfg), device=device)


def recurrence_of(saved: dict):
    """The DSL recurrence the forward ran: saved["recurrence"], or FLA's op built from saved["opt"]."""
    if saved.get("recurrence") is not None:
        return saved["recurrence"]
    from ..recurrences import from_options
    opt, x = _require(saved, "opt", "saved"), _require(saved, "x", "saved")
    return from_options(opt, x.get("A_log") is not None, x.get("dt_bias") is not None)


def backward(saved: dict, do: torch.Tensor, dht: torch.Tensor | None = None, *,
             state_dtype: torch.dtype = torch.bfloat16, lanes_per_row: int = 16, alloc=torch.empty,
             debug: dict | None = None, loader=None) -> dict:
    """Gradients of Σ o⊙do + Σ final_state⊙dht, keyed like the forward's inputs.

    saved (from the forward):
      recurrence: the kdagen.dsl.Recurrence that ran, or opt: the kdagen.reference.Options of FLA's op
      x:          the raw inputs by name: q, k [B,T,H,K] bf16; v [B,T,HV,V] bf16; the other token inputs
                  (g [B,T,HV,K] or [B,T,HV], beta [B,T,HV]) bf16 or fp32; head parameters fp32 ([HV·K] or [HV]);
                  initial_state fp32 [N,HV,K,V] ([N,HV,V,K] with state_v_first) or None; cu_seqlens int64 or None
      scalars:    the recurrence's scalars by name (e.g. {"scale": K**-0.5}); or scale: float
      state_v_first: bool (default False)
      workspace:  forward K1's tensors per (chunk, value head); the chunk dim may be an upper bound and rows
                  beyond a chunk's length are ignored: qd, kd, kr [NC,HV,16,K] bf16; gte [NC,HV,K] (vector
                  decay) or [NC,HV] fp32; A, Mqk [NC,HV,16,16] bf16 or fp32; beta [NC,HV,16] fp32
    Returns a gradient for every token input and head parameter and "initial_state" (None without h0).
    `loader(cfg, device)` returns the module to launch on (default runtime_loader; tests pass the CPU emulation
    or a signature checker); `alloc` replaces torch.empty for every output and workspace (tests poison them);
    `debug` receives the S_c and K2_bwd workspaces.
    """
    r = recurrence_of(saved)
    x, ws = _require(saved, "x", "saved"), _require(saved, "workspace", "saved")
    scalars = saved.get("scalars") or {"scale": _require(saved, "scale", "saved")}
    vfirst = bool(saved.get("state_v_first", False))
    ops = r.core_operands()
    q = _require(x, "q", "x")
    v = _require(x, ops["value"], "x")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H:
        raise ValueError(f"backward: value heads HV={HV} must be a multiple of q/k heads H={H}")
    G, dev, C = HV // H, q.device, CHUNK
    cfg = config_for(r, x, K, V, cc_dtype=_require(ws, "A", "workspace").dtype, state_dtype=state_dtype,
                     state_v_first=vfirst, lanes_per_row=lanes_per_row)
    k1 = k1_context(cfg)
    bf16, f32, either = (torch.bfloat16,), (torch.float32,), (torch.bfloat16, torch.float32)
    _check(f"x[{ops['value']!r}]", v, (B, T, HV, V), bf16, dev)
    _check("do", do, (B, T, HV, V), bf16, dev)
    for p in k1["qk_leaves"]:
        _check(f"x[{p['name']!r}]", x[p["name"]], (B, T, H, K), bf16, dev)
    for p in k1["token_grads"]:
        _check(f"x[{p['name']!r}]", x[p["name"]], (B, T, HV, K) if p["row"] else (B, T, HV), either, dev)
    for p in k1["head_params"]:
        _check(f"x[{p['name']!r}]", _require(x, p["name"], "x"), (HV * K,) if p["row"] else (HV,), f32, dev)
    cu, offsets = chunk_layout(x.get("cu_seqlens"), B, T, dev)
    N, NC = cu.numel() - 1, ws["qd"].shape[0]
    KD = K if cfg.per_channel else 1
    for name, shape, dtypes in (("qd", (NC, HV, C, K), bf16), ("kd", (NC, HV, C, K), bf16),
                                ("kr", (NC, HV, C, K), bf16), ("gte", (NC, HV, KD) if KD > 1 else (NC, HV), f32),
                                ("A", (NC, HV, C, C), either), ("Mqk", (NC, HV, C, C), (ws["A"].dtype,)),
                                ("beta", (NC, HV, C), f32)):
        _check(f"workspace[{name!r}]", _require(ws, name, "workspace"), shape, dtypes, dev)
    h0 = x.get("initial_state")
    state_shape = (N, HV, V, K) if vfirst else (N, HV, K, V)
    for name, t in (("initial_state", h0), ("dht", dht)):
        if t is not None:
            _check(name, t, state_shape, f32, dev)
    missing = [s for s in k1["scalars"] if s not in scalars]
    if missing:
        raise KeyError(f"backward: the recurrence's scalars {missing} are not in saved['scalars']")

    module = (loader or runtime_loader)(cfg, dev)
    from ..runtime import f32 as F32
    smem = smem_bytes(cfg)
    rt = 32 * (V // 16)

    def new(*shape, dtype=torch.float32):
        return alloc(shape, dtype=dtype, device=dev)

    states = new(NC, HV, V, K, dtype=state_dtype)
    module.launch("kdagen_bwd_states", (N, HV), (rt,),
                  [v, ws["kd"], ws["kr"], ws["gte"], ws["A"], ws["beta"], h0, states, cu, offsets, HV, KD],
                  smem_bytes=smem["states"])

    k2 = {name: new(NC, HV, C, K) for name in ("dqd", "dkd", "dkr")}
    k2.update(dMqk=new(NC, HV, C, C), dMkk=new(NC, HV, C, C), dgT=new(NC, HV, K), dbeta=new(NC, HV, C))
    dv = new(B, T, HV, V, dtype=v.dtype)
    dh0 = new(*state_shape) if h0 is not None else None
    module.launch("kdagen_k2_bwd", (N, HV), (rt,),
                  [v, do, ws["qd"], ws["kd"], ws["kr"], ws["gte"], ws["A"], ws["Mqk"], ws["beta"], states, dht,
                   k2["dqd"], k2["dkd"], k2["dkr"], k2["dMqk"], k2["dMkk"], k2["dgT"], k2["dbeta"], dv, dh0,
                   cu, offsets, HV, KD],
                  smem_bytes=smem["k2_bwd"])
    if debug is not None:
        debug.update(states=states, **k2)

    grads = {ops["value"]: dv, "initial_state": dh0}
    for p in k1["qk_leaves"] + k1["token_grads"]:
        grads[p["name"]] = new(*x[p["name"]].shape, dtype=x[p["name"]].dtype)
    parts = {p["name"]: new(NC, HV, *((K,) if p["row"] else ())) for p in k1["head_params"]}
    module.launch("kdagen_k1_bwd", (NC, H), (C * lanes_per_row,),
                  [x[p["name"]] for p in k1["leaves"]] + [F32(scalars[s]) for s in k1["scalars"]]
                  + [k2["dqd"], k2["dkd"], k2["dkr"], k2["dMqk"], k2["dMkk"], k2["dgT"], k2["dbeta"]]
                  + [grads[p["name"]] for p in k1["qk_leaves"] + k1["token_grads"]]
                  + list(parts.values()) + [cu, offsets, N, H, G])
    for name, part in parts.items():
        width = part[0].numel()
        grads[name] = new(width)
        module.launch("kdagen_param_reduce", ((width + 31) // 32,), (256,), [part, grads[name], offsets, N, width])
    return grads
