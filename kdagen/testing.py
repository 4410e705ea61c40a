"""Checking a compiled recurrence against kdagen's float64 interpreter: random inputs in the dtypes the op takes,
the op's outputs and gradients, the interpreter's, and their relative errors. The tests of a recurrence a user
writes (`kdagen init-recurrence` starts one) and kdagen's own tests use the same functions.

    op = kdagen.compile(my_gate, emulate=not torch.cuda.is_available())
    errors = compare(op, seed=0, T=40, H=2)            # {"o": 1.7e-3, "final_state": ..., "q": ..., ...}
    assert all(e <= bound(op, n) for n, e in errors.items())
"""
from __future__ import annotations

import torch

from . import dsl

# relative L2 bounds: o and the final state; gradients of q/k/v-role inputs, of the rest, of head parameters and
# learned scalars (against their reduction scale, see reduction_scales) and of the initial state (those
# chunk_kda's own GPU tests hold)
BOUNDS = {"o": 0.005, "final_state": 0.005, "token": 0.008, "gate": 0.02, "param": 0.02, "initial_state": 0.02}
PASSED_AS_IS = ("q", "k", "v", "g", "beta")        # bf16 by default; g and beta may also be given in f32


def _bf16(op, name: str, f32_inputs) -> bool:
    r = op.spec.recurrence
    if name in f32_inputs:
        return False
    return name == op.spec.value or name in PASSED_AS_IS or r.graph.nodes[name]["dtype"] == "bf16"


def random_inputs(op, *, B: int = 1, T: int = 40, H: int = 1, G: int = 1, head_dim: int = 64, cu_seqlens=None,
                  state_v_first: bool = False, scalars: dict | None = None, f32_inputs=(), seed: int = 0,
                  device="cpu") -> tuple[dict, dict, torch.Tensor, torch.Tensor]:
    """(inputs by name, the other keyword arguments of a call, do, dht): random, requiring grad, in the dtypes the
    op takes (q/k/v-role and g/beta inputs bf16 unless named in f32_inputs, the rest as declared). With
    cu_seqlens, B = 1 and T = cu_seqlens[-1]. `scalars`: numbers, or 0-d tensors that require grad (learned)."""
    r = op.spec.recurrence
    gen = torch.Generator().manual_seed(seed)
    if cu_seqlens is not None:
        B, T = 1, cu_seqlens[-1]
    HV, K = H * G, head_dim
    x = {}
    for name in r.token_inputs:
        row = (K,) if r.graph.nodes[name]["shape"] else ()
        t = torch.randn(B, T, H if name in op.spec.qk else HV, *row, generator=gen)
        x[name] = t.to(torch.bfloat16 if _bf16(op, name, f32_inputs) else torch.float32)
    for name in r.head_params:
        x[name] = torch.randn(HV, *((K,) if r.graph.nodes[name]["shape"] else ()), generator=gen) / 2
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    x = {n: t.to(device).requires_grad_() for n, t in x.items()}
    h0 = (torch.randn(N, HV, K, K, generator=gen) / 8).to(device).requires_grad_()
    scalars = {n: v.detach().to(device).requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
               for n, v in (scalars or {}).items()}
    kwargs = {"initial_state": h0, "output_final_state": True, "state_v_first": state_v_first, **scalars}
    if cu_seqlens is not None:
        kwargs["cu_seqlens"] = torch.tensor(cu_seqlens, dtype=torch.int64, device=device)
    do = torch.randn(B, T, HV, K, generator=gen).to(torch.bfloat16).to(device)
    dht = torch.randn(N, HV, K, K, generator=gen).to(device)
    return x, kwargs, do, dht


def _learned(kwargs: dict) -> dict:
    """The scalars given as tensors that require grad."""
    return {n: v for n, v in kwargs.items() if isinstance(v, torch.Tensor) and v.dim() == 0 and v.requires_grad}


def outputs_and_grads(op, x: dict, kwargs: dict, do, dht) -> dict:
    """o, the final state and every gradient of Σ o⊙do + Σ final_state⊙dht, by name (learned scalars too)."""
    o, ht = op(**x, **kwargs)
    leaves = {**x, "initial_state": kwargs["initial_state"], **_learned(kwargs)}
    grads = torch.autograd.grad((o.float() * do.float()).sum() + (ht * dht).sum(), list(leaves.values()))
    return {"o": o.detach(), "final_state": ht.detach(), **dict(zip(leaves, grads))}


def _float64(op, x: dict, kwargs: dict, do, dht) -> tuple:
    """(inputs with the fixed scalars, the interpreter's call keywords, do, dht, flip) in float64 on the CPU:
    what the interpreter reads; states transposed to [.., K, V] for state_v_first (`flip` transposes back)."""
    r = op.spec.recurrence
    flip = (lambda s: s.transpose(-1, -2)) if kwargs.get("state_v_first") else (lambda s: s)
    learned = _learned(kwargs)
    x64 = {n: t.detach().cpu().double() for n, t in x.items()}
    x64.update({n: float(v) for n, v in kwargs.items() if n in r.scalars and n not in learned})
    cu = kwargs.get("cu_seqlens")
    call = dict(chunk_size=16, initial_state=flip(kwargs["initial_state"].detach().cpu().double()),
                cu_seqlens=None if cu is None else cu.cpu())
    return x64, call, do.cpu().double(), flip(dht.cpu().double()), flip


def interpreter(op, x: dict, kwargs: dict, do, dht) -> dict:
    """The same from kdagen.dsl.interpret in float64, on exactly the values given (states transposed for
    state_v_first; a missing "scale" is K^-0.5, as in the op). Gradients come from the DSL's derived backward
    graph; those of learned scalars, which it does not have, from torch.autograd through the interpreter."""
    r = op.spec.recurrence
    x64, call, do64, dht64, flip = _float64(op, x, kwargs, do, dht)
    learned = {n: v.detach().cpu().double().requires_grad_() for n, v in _learned(kwargs).items()}
    o, ht = dsl.interpret.forward(r, {**x64, **learned}, **call)
    out = {"o": o.detach(), "final_state": flip(ht.detach())}
    if learned:
        out.update(zip(learned, torch.autograd.grad((o * do64).sum() + (ht * dht64).sum(), list(learned.values()))))
    grads = dsl.interpret.backward(r, {**x64, **{n: v.item() for n, v in learned.items()}}, do64, dht64, **call)
    return {**out, **{n: g for n, g in grads.items() if n != "initial_state"},
            "initial_state": flip(grads["initial_state"])}


def reduction_scales(op, x: dict, kwargs: dict, do, dht) -> dict:
    """For each gradient that is a sum over tokens (head parameters, learned scalars): Σ over tokens of the
    magnitudes of its per-token terms, from the interpreter on the recurrence rebuilt with those inputs per token
    (`dsl.build(..., per_token=...)`). A sum of terms of mixed sign can be tiny beside its terms; its error is
    then measured against this scale instead of its own size. {} when the op was compiled from a built
    Recurrence (nothing to rebuild)."""
    from .ops.compiled import BUILDERS
    r = op.spec.recurrence
    learned = _learned(kwargs)
    reduced = (*r.head_params, *learned)
    if op.spec.key not in BUILDERS or not reduced:
        return {}
    fn, options = BUILDERS[op.spec.key]
    per_token = dsl.build(fn, r.name, per_token=reduced, **options)
    x64, call, do64, dht64, _ = _float64(op, x, kwargs, do, dht)
    B, T, HV = x[op.spec.value].shape[:3]
    for name in r.head_params:                       # [HV] or [HV, K] (also given as [HV * K]) -> every token
        per_head = x64[name].reshape(HV) if op.spec.rows[name] is None else x64[name].reshape(HV, -1)
        x64[name] = per_head.expand(B, T, *per_head.shape)
    for name, value in learned.items():
        x64[name] = value.detach().cpu().double().expand(B, T, HV)
    grads = dsl.interpret.backward(per_token, x64, do64, dht64, **call)
    scales = {n: grads[n].abs().sum(dim=(0, 1)).reshape(x[n].shape) for n in r.head_params}
    scales.update({n: grads[n].abs().sum() for n in learned})
    return scales


def errors(got: dict, want: dict, scales: dict | None = None) -> dict:
    """Relative L2 error of every output and gradient (inf where one is missing, misshapen or not finite); a
    gradient with a scale in `scales` (reduction_scales) relative to that scale."""
    out = {}
    for name, ref in want.items():
        g = got.get(name)
        if g is None or tuple(g.shape) != tuple(ref.shape) or not torch.isfinite(g.float()).all():
            out[name] = float("inf")
            continue
        g = g.detach().cpu().double()
        scale = (scales or {}).get(name, ref)
        out[name] = ((g - ref).norm() / scale.norm().clamp_min(1e-30)).item()
    return out


def bound(op, name: str) -> float:
    """The error bound of an output or gradient (BOUNDS by the input's role in the recurrence)."""
    if name in BOUNDS:
        return BOUNDS[name]
    if name in op.spec.head_params or name in op.spec.scalars:
        return BOUNDS["param"]
    return BOUNDS["token"] if op.spec.roles.get(name) in ("query", "key", "value") else BOUNDS["gate"]


def compare(op, *, seed: int = 0, device=None, **shape) -> dict:
    """Relative errors of the op against the interpreter on random inputs (random_inputs' shape keywords);
    device: "cuda" when the op runs on a GPU, "cpu" when it is emulated (the default follows the op)."""
    device = device or ("cpu" if op.emulate else "cuda")
    x, kwargs, do, dht = random_inputs(op, seed=seed, device=device, **shape)
    return errors(outputs_and_grads(op, x, kwargs, do, dht), interpreter(op, x, kwargs, do, dht),
                  reduction_scales(op, x, kwargs, do, dht))


def report(op, errs: dict) -> str:
    """One line per output and gradient: its error and bound, marked where it is over."""
    return "\n".join(f"  {n:14s} {e:.3e} (bound {bound(op, n):.3g}){'  <-- over' if not e <= bound(op, n) else ''}"
                     for n, e in errs.items())
