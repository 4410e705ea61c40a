"""The interpreter: runs forward and backward graphs on torch tensors (float64 on CPU).

This is the DSL's reference: the prologue graph evaluated op by op, the core by kdagen.reference's
chunked functions, the backward graph from the core's seeds. The forward is plain torch, so
torch.autograd through it checks the derived backward.

Layouts: token values [B,T,heads(,D)] (q/k inputs on H heads, the rest on HV), per-head values
[HV(,D)] (a flat [HV·D] parameter, FLA's dt_bias layout, is accepted and its gradient returned flat),
scalars and consts 0-d. `x` is a dict keyed like FLA's arguments: the recurrence's inputs,
parameters and scalars by name, and optionally initial_state [N,HV,K,V] and cu_seqlens.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import torch

from . import autodiff, core
from .errors import DSLError
from .ops import GRAD_OP, OPS

CALL_KEYS = ("initial_state", "cu_seqlens")


@dataclass
class _Call:
    leaves: dict     # leaf node id -> tensor in the interpreter's layout
    dims: dict       # sizes of B, T, K, V
    dtype: torch.dtype
    h0: torch.Tensor | None
    cu_seqlens: torch.Tensor | None


def _bind(dims: dict, name: str, sizes: dict):
    for dim, n in sizes.items():
        if dims.setdefault(dim, n) != n:
            raise DSLError(name, f"has {dim} = {n}, but an earlier input has {dim} = {dims[dim]}")


def _tensor(x: dict, name: str, what: str) -> torch.Tensor:
    if name not in x:
        raise DSLError(name, f"{what} {name!r} is missing from the inputs")
    return x[name]


def _call(r, x: dict, scale, chunk_size, initial_state, cu_seqlens) -> _Call:
    r.check()
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise DSLError(None, f"chunk_size must be a positive int, got {chunk_size!r}")
    names = r.token_inputs + r.head_params + r.scalars
    unknown = sorted(set(x) - set(names) - set(CALL_KEYS))
    if unknown:
        raise DSLError(None, f"inputs {unknown} are not read by recurrence {r.name!r} (it reads {names})")
    dims, leaves = {}, {}
    for name in r.token_inputs:
        t, shape = _tensor(x, name, "token input"), r.graph.nodes[name]["shape"]
        if t.dim() != 3 + len(shape):
            raise DSLError(name, f"token input of shape {shape} must be [B,T,heads{''.join(',' + d for d in shape)}], "
                                 f"got {list(t.shape)}")
        _bind(dims, name, {"B": t.shape[0], "T": t.shape[1], **{d: t.shape[-1] for d in shape}})
        leaves[name] = t
    for name in r.head_params:
        t, shape = _tensor(x, name, "parameter"), r.graph.nodes[name]["shape"]
        if shape and t.dim() == 1 and shape[0] in dims and t.numel() % dims[shape[0]] == 0:
            t = t.reshape(-1, dims[shape[0]])
        if t.dim() != 1 + len(shape):
            raise DSLError(name, f"parameter of shape {shape} must be [HV{''.join(',' + d for d in shape)}]"
                                 f"{' or [HV*' + shape[0] + ']' if shape else ''}, got {list(t.shape)}")
        _bind(dims, name, {d: t.shape[-1] for d in shape})
        leaves[name] = t
    dtype = leaves[r.token_inputs[0]].dtype
    if scale is not None and "scale" not in r.scalars:
        raise DSLError(None, f"scale={scale} given, but recurrence {r.name!r} has no scalar named 'scale'")
    for name in r.scalars:
        value = scale if name == "scale" and scale is not None else x.get(name)
        if value is None and name == "scale" and "K" in dims:
            value = dims["K"] ** -0.5      # FLA's default scale
        if value is None:
            raise DSLError(name, "scalar has no value: pass it in the inputs")
        leaves[name] = torch.as_tensor(value, dtype=dtype)
    h0 = x.get("initial_state") if initial_state is None else initial_state
    cu = x.get("cu_seqlens") if cu_seqlens is None else cu_seqlens
    return _Call(leaves, dims, dtype, h0, cu)


def _broadcast(graph, node_id: str, tensors: list) -> list:
    """Operands of an elementwise op in the result's layout; values on different heads never meet."""
    a = graph.nodes[node_id]
    out, heads = [], {}
    for x, t in zip(a["args"], tensors):
        xa = graph.nodes[x]
        if xa["kind"] in ("token", "head"):
            heads[x] = t.shape[2 if xa["kind"] == "token" else 0]
            if not xa["shape"] and a["shape"]:
                t = t.unsqueeze(-1)
            if xa["kind"] == "head" and a["kind"] == "token":
                t = t.reshape((1, 1, *t.shape))
        out.append(t)
    if len(set(heads.values())) > 1:
        listing = ", ".join(f"{x!r} on {h} heads" for x, h in heads.items())
        raise DSLError(node_id, f"operands live on different heads ({listing}): values on the q/k heads "
                                "and on the value heads meet only in the core (GVA)")
    return out


def run(graph: nx.DiGraph, leaves: dict, dims: dict, dtype=torch.float64) -> dict:
    """Evaluate every node of a forward or backward graph (the core node is skipped)."""
    vals = {}
    for node_id in nx.lexicographical_topological_sort(graph):
        a = graph.nodes[node_id]
        op = a["op"]
        if op == "const":
            vals[node_id] = torch.tensor(a["value"], dtype=dtype)
        elif op in OPS:
            args = [vals[x] for x in a["args"]]
            if OPS[op].elementwise:
                args = _broadcast(graph, node_id, args)
            vals[node_id] = OPS[op].evaluate(args, a, dims)
        elif op == GRAD_OP:
            vals[node_id] = vals[a["args"][0]]
        elif op != core.CORE_OP:
            if node_id not in leaves:
                raise DSLError(node_id, f"no value given for this {op} node")
            vals[node_id] = leaves[node_id]
    return vals


def _core_operands(r, vals: dict, dims: dict) -> dict:
    """The core's operand tensors; per-head beta or decay broadcast over tokens."""
    ops = {}
    for role, node_id in r.core_operands().items():
        t, a = vals[node_id], r.graph.nodes[node_id]
        if a["kind"] == "head":
            t = t.reshape((1, 1, *t.shape)).expand(dims["B"], dims["T"], *t.shape)
        ops[role] = t
    return ops


def forward(r, x: dict, *, scale=None, chunk_size: int = 64, initial_state=None, cu_seqlens=None):
    """(o [B,T,HV,V], final state [N,HV,K,V]) of recurrence r on inputs x."""
    call = _call(r, x, scale, chunk_size, initial_state, cu_seqlens)
    vals = run(r.graph, call.leaves, call.dims, call.dtype)
    return core.forward(r.core, _core_operands(r, vals, call.dims), call.h0, chunk_size, call.cu_seqlens)


def backward(r, x: dict, do, dht=None, *, scale=None, chunk_size: int = 64, initial_state=None,
             cu_seqlens=None, bwd: autodiff.Backward | None = None) -> dict:
    """Gradients of Σ o⊙do + Σ final_state⊙dht by the derived backward graph.

    Keyed by input and parameter name (each in its input's shape) plus "initial_state" (None
    without one). The backward graph gets only the saved forward values; it recomputes the rest.
    """
    call = _call(r, x, scale, chunk_size, initial_state, cu_seqlens)
    vals = run(r.graph, call.leaves, call.dims, call.dtype)
    seeds, dh0 = core.backward(r.core, _core_operands(r, vals, call.dims), call.h0, chunk_size,
                               call.cu_seqlens, do, dht)
    bwd = autodiff.backward(r) if bwd is None else bwd
    leaves = {**call.leaves, **{n: vals[n] for n in bwd.saved},
              **{seed: seeds[role] for role, seed in bwd.seeds.items()}}
    out = run(bwd.graph, leaves, call.dims, call.dtype)
    grads = {name: out[node].reshape(x[name].shape) for name, node in bwd.outputs.items()}
    grads["initial_state"] = None if call.h0 is None else dh0
    return grads
