"""Exact sequence parallelism inside one GPU, built from the ops themselves (docs/segments.md).

A recurrence walks a sequence's chunks one after another, so a few long sequences with few heads leave most of
the GPU idle. The state after a stretch of tokens is an affine function of the state before it,
S_out = M·S_in + B (kv layout; S_out = S_in·M + B with state_v_first), M [K, K] built from the keys, decays and
β alone. So each sequence is cut into segments, and three things run in parallel over every segment:
1. one call of the op with the value heads doubled: per head, a copy with v = 0 and initial state I (its final
   state is M) and a copy with the real v and initial state 0 (its final state is B);
2. a short serial combine across each sequence's segments (S_in of segment j+1 = M_j·S_in_j + B_j, a batched
   matmul per position, in a fixed order);
3. the op again on every segment with its exact incoming state: o and the final states.
Nothing is truncated (a decay that never forgets still gives today's accuracy), every step is an op call or a
torch matmul, so autograd runs each op's backward — segment-parallel too — and the combine's transpose, and two
runs are bitwise equal. It needs K = V (the copy that yields M has a K × K state).
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools

import torch


CHUNK_ALIGN = 64                     # segment lengths are multiples of every family's chunk
_inside = contextvars.ContextVar("kdagen_segments_inside", default=False)


@contextlib.contextmanager
def uncut():
    """The op calls inside are never cut again (a segmented or context-parallel call's own pieces)."""
    token = _inside.set(True)
    try:
        yield
    finally:
        _inside.reset(token)


def segment_length(setting: str) -> int | None:
    """Tokens per segment, or None for no segments. `setting` is KDAGEN_SEGMENTS: "off" (the default), a number of
    tokens, or "auto", which cuts nothing on today's kernels. On the H200 a cut call lost at every shape measured
    once the backward ran its blocks of chunks in parallel (2026-11-30: forward + backward 14.4 → 20.4 ms at
    1×65536×4×128 and 12.6 → 29.9 at 1×32768×16×128; a forward alone already lost, 2.7 → 5.5 and 4.5 → 7.0 ms): the
    three op calls cost more than the serial passes they shorten (benchmarks/NOTES.md, docs/segments.md §3)."""
    if setting in ("off", "auto"):
        return None
    return max(CHUNK_ALIGN, int(setting) // CHUNK_ALIGN * CHUNK_ALIGN)


def cut(bounds: list[int], tokens: int) -> tuple[list[int], list[int]]:
    """(segment bounds, segment count per sequence) for sequences bounds[n]..bounds[n+1] cut every `tokens`
    tokens; an empty sequence keeps one empty segment (its initial state passes through)."""
    seg, counts = [bounds[0]], []
    for start, end in zip(bounds[:-1], bounds[1:]):
        pieces = list(range(start + tokens, end, tokens)) + [end]
        seg += pieces
        counts.append(len(pieces))
    return seg, counts


def firsts(counts: list[int]) -> list[int]:
    """The index of each sequence's first segment, from the segment counts `cut` returns."""
    return [0, *itertools.accumulate(counts[:-1])]


def _doubled(x: torch.Tensor, dim: int, H: int, first: torch.Tensor | None = None) -> torch.Tensor:
    """x with its value-head axis `dim` (HV = H·G heads) doubled to H·2G: per q/k head, G copies (or `first`,
    of x's shape) then the G originals — the head order the ops' grouped value attention reads."""
    y = x.unflatten(dim, (H, -1))
    lead = y if first is None else first.unflatten(dim, (H, -1))
    return torch.cat([lead, y], dim=dim + 1).flatten(dim, dim + 1)


def _halves(state: torch.Tensor, H: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two copies of a doubled-head state [N, H·2G, ...]: (the first G of each group, the last G)."""
    y = state.unflatten(1, (H, 2, -1))
    return y[:, :, 0].flatten(1, 2), y[:, :, 1].flatten(1, 2)


def apply_map(S: torch.Tensor, M: torch.Tensor, B: torch.Tensor, v_first: bool) -> torch.Tensor:
    """The state after a piece whose affine map is (M, B), from the state S before it: M·S + B (S·M + B with
    state_v_first)."""
    return (S @ M if v_first else M @ S) + B


def combine(M: torch.Tensor, B: torch.Tensor, first: torch.Tensor, counts: list[int], v_first: bool) -> torch.Tensor:
    """The incoming state of every segment [S, HV, ·, ·] from the segments' (M, B) and each sequence's initial
    state `first` [N, HV, ·, ·]: position by position along the sequences (a batched matmul each), fixed order."""
    starts = firsts(counts)
    rows, cur = [], first
    order = []                                          # segment index of each row of torch.cat(rows)
    active = list(range(len(counts)))
    for j in range(max(counts)):
        if j:
            keep = [i for i, n in enumerate(active) if counts[n] > j]
            active = [active[i] for i in keep]
            prev = torch.tensor([starts[n] + j - 1 for n in active], device=M.device)
            cur = cur[torch.tensor(keep, device=M.device)]
            cur = apply_map(cur, M[prev], B[prev], v_first)
        rows.append(cur)
        order += [starts[n] + j for n in active]
    stacked = torch.cat(rows)
    return stacked[torch.argsort(torch.tensor(order, device=M.device))]


# what `run` sets itself in its op calls; everything else a caller passed goes through unchanged (chunk_indices
# describes the uncut sequences; the CUDA-graph options never reach here)
_REPLACED = {"initial_state", "output_final_state", "state_v_first", "cu_seqlens", "cu_seqlens_cpu", "cp_context",
             "use_graph", "max_num_seqs", "return_intermediate_states", "chunk_indices", "kwargs"}
_PER_HEAD = ("A_log", "dt_bias")


def maybe_run(fn, q, k, v, g, beta, params: dict, call, setting: str):
    """fn's result computed segment by segment when `setting` (KDAGEN_SEGMENTS) and the shapes ask for it, else
    None. `params` are the public call's parameters by name (extra keywords under "kwargs"), `call` what
    kdagen.ops.api.resolve made of them. Never under use_graph, torch.compile tracing or CUDA-graph capture (the
    cut reads the sequence lengths on the host), nor inside a segmented call."""
    tokens = segment_length(setting)
    if tokens is None or _inside.get() or call.use_graph or torch.compiler.is_compiling():
        return None
    if q.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None
    t = call.tensors
    B, T = q.shape[0], q.shape[1]
    cu = t["cu_seqlens_cpu"] if t["cu_seqlens_cpu"] is not None else t["cu_seqlens"]
    bounds = [int(b) for b in cu.tolist()] if cu is not None else [n * T for n in range(B + 1)]
    lengths = [e - s for s, e in zip(bounds[:-1], bounds[1:])]
    if max(lengths) <= tokens:
        return None
    flat = [x.flatten(0, 1).unsqueeze(0) if cu is None else x for x in (q, k, v, g, beta)]
    options, per_head = call_options(params, call)
    o, final = run(fn, *flat, tokens=tokens, bounds=bounds, initial_state=t["initial_state"],
                   output_final_state=call.output_final_state, state_v_first=call.opt.state_v_first,
                   per_head=per_head, options=options)
    return (o.reshape(B, T, *o.shape[2:]) if cu is None else o), final


def call_options(params: dict, call) -> tuple[dict, dict]:
    """(every argument of the public call that an op call on pieces of its sequences passes on unchanged, the
    value-head parameters it takes in **kwargs: A_log, dt_bias where given)."""
    extra = dict(params.get("kwargs", {}))
    extra.pop("transpose_state_layout", None)          # resolved into call.opt.state_v_first
    options = {n: x for n, x in {**params, **extra}.items() if n not in _REPLACED and n not in _PER_HEAD}
    return options, {n: call.tensors[n] for n in _PER_HEAD if call.tensors[n] is not None}


def affine_maps(fn, q, k, v, g, beta, *, cu: torch.Tensor, cu_cpu: torch.Tensor, state_v_first: bool,
                per_head: dict, options: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, B) of every sequence of cu (on q.. [1, total, heads, dim]): its final state is M·S_in + B (S_in·M + B with
    state_v_first). One call of `fn` with the value heads doubled: per head a copy with v = 0 from I (final state
    M) and one with v from 0 (final state B). Differentiable like any op call."""
    H, HV, K, V = q.shape[2], v.shape[2], k.shape[3], v.shape[3]
    if K != V:
        raise ValueError(f"the affine state maps need K = V (the copy that yields M has a K x K state), got K={K}, "
                         f"V={V}")
    S, device = cu_cpu.numel() - 1, q.device
    eye = torch.eye(K, dtype=torch.float32, device=device).expand(S, HV, K, K)
    zeros = torch.zeros((S, HV, V, K) if state_v_first else (S, HV, K, V), dtype=torch.float32, device=device)
    doubled_params = {n: _doubled(t.reshape(HV, -1), 0, H).reshape(-1) if t.dim() == 1 else _doubled(t, 0, H)
                      for n, t in per_head.items()}
    _, states = fn(q, k, _doubled(v, 2, H, torch.zeros_like(v)), _doubled(g, 2, H), _doubled(beta, 2, H),
                   initial_state=_doubled(zeros, 1, H, eye), output_final_state=True, state_v_first=state_v_first,
                   cu_seqlens=cu, cu_seqlens_cpu=cu_cpu, **doubled_params, **options)
    return _halves(states, H)


def run(fn, q, k, v, g, beta, *, tokens: int, bounds: list[int], initial_state, output_final_state: bool,
        state_v_first: bool, per_head: dict, options: dict):
    """`fn` (chunk_kda or chunk_gated_delta_rule) on sequences bounds[n]..bounds[n+1] of the flattened token axis,
    cut every `tokens` tokens; q.. are [1, total, heads, dim] (callers flatten a fixed-length batch), `per_head`
    the value-head parameters the op takes in **kwargs (A_log, dt_bias; absent ones left out), `options` every
    other argument as the caller gave it. Returns what fn returns for the unsegmented call."""
    HV, K, V = v.shape[2], k.shape[3], v.shape[3]
    seg, counts = cut(bounds, tokens)
    device, N = q.device, len(counts)
    seg_cu = torch.tensor(seg, dtype=torch.int64, device=device)
    seg_cu_cpu = torch.tensor(seg, dtype=torch.int64)
    if initial_state is None:
        initial_state = torch.zeros((N, HV, V, K) if state_v_first else (N, HV, K, V), dtype=torch.float32,
                                    device=device)
    with uncut():
        # 1. (M, B) of every segment in one call
        M, B = affine_maps(fn, q, k, v, g, beta, cu=seg_cu, cu_cpu=seg_cu_cpu, state_v_first=state_v_first,
                           per_head=per_head, options=options)
        # 2. the incoming state of every segment
        h0 = combine(M, B, initial_state, counts, state_v_first)
        # 3. every segment from its exact incoming state
        o, final = fn(q, k, v, g, beta, initial_state=h0, output_final_state=output_final_state,
                      state_v_first=state_v_first, cu_seqlens=seg_cu, cu_seqlens_cpu=seg_cu_cpu, **per_head,
                      **options)
    if final is not None:
        lasts = torch.tensor([f + c - 1 for f, c in zip(firsts(counts), counts)], device=device)
        final = final[lasts]
    return o, final
