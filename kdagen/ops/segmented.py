"""An inference forward cut into segments on the family's own kernels (docs/segments.md §4).

The op-level cut (kdagen.ops.segments) calls the whole op three times, so the token-parallel prepare runs three
times, twice on doubled heads. The prepare's workspace is chunk-local — it depends on where chunks start, not on
where sequences do — so a fixed-length batch [B, T] cut into S segments of T/S tokens (a multiple of the chunk)
is the batch [B·S, T/S] with the same workspace. Here the prepare runs once on that view and the recurrence three
times over the segments in parallel:
1. from state 0 with v (final states: B of every segment) and from the identity with v = 0 (final states: M);
2. the chain across each sequence's segments (S_in of segment j + 1 = M_j·S_in_j + B_j, in order, float64);
3. from every segment's exact incoming state: o and the final states.
Exact like the op-level cut (no decay is trusted to forget). Forward only (no workspace is kept for a
backward), K = V (the identity is a K × K state), fixed-length batches (a varlen cut needs the lengths on the
host), and only where the uncut recurrence leaves at least half the SMs idle. Off until timed on a GPU:
SEGMENT_TOKENS (tokens per segment) None.
"""
from __future__ import annotations

import functools

import torch

from .launcher import Workspaces, run_kernels, scalar_values
from .segments import CHUNK_ALIGN

SEGMENT_TOKENS: int | None = None
H200_SMS = 132                       # the SM count the CPU emulator's calls are judged by


@functools.lru_cache(maxsize=8)
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H200_SMS


def segments_of(v: torch.Tensor, varlen: bool, keep: bool, K: int, V: int, tokens: int | None) -> int:
    """How many segments each sequence of a call with value tensor v [B, T, HV, V] is cut into: 1 (not cut)
    unless `tokens` (a multiple of the chunk alignment) is set and the call is a fixed-length inference call with
    K = V, T a multiple of `tokens` longer than it, whose uncut recurrence (V/64 CTAs per (sequence, head)) leaves
    at least half the SMs idle."""
    if tokens is None or keep or varlen or K != V or tokens % CHUNK_ALIGN:
        return 1
    B, T, HV = v.shape[:3]
    if 2 * B * HV * max(1, V // 64) > sm_count(v.device):
        return 1
    return T // tokens if T > tokens and T % tokens == 0 else 1


def chain(M: torch.Tensor, B: torch.Tensor, first: torch.Tensor, S: int, v_first: bool) -> torch.Tensor:
    """The incoming state of every segment [N·S, HV, ·, ·] (segment j of sequence n at n·S + j) from the segments'
    maps M, B (same layout) and each sequence's initial state `first` [N, HV, ·, ·]: S − 1 positions in order, two
    launches each (a product and an add into place), in float64 — the maps are small, and so no TF32 setting of
    torch's matmuls can round the carried state."""
    N = first.shape[0]
    M64, B64 = (t.double().view(N, S, *t.shape[1:]) for t in (M, B))
    h = torch.empty_like(B64)
    h[:, 0] = first
    for j in range(1, S):
        prev = h[:, j - 1]
        torch.add(prev @ M64[:, j - 1] if v_first else M64[:, j - 1] @ prev, B64[:, j - 1], out=h[:, j])
    return h.flatten(0, 1).float()


def launch_cut(schedule, module, x: dict, scalars: dict, S: int, *, output_final_state: bool, alloc):
    """(o, final state or None, the workspaces) of the forward of x (fixed-length [B, T, ...] tensors,
    initial_state [B, ...]) with each sequence cut into S segments of T/S tokens: the prepare once, the recurrence
    three times (module doc)."""
    value = schedule.value
    v = x[value]
    B, T = v.shape[:2]
    tokens = {name for name, _, _, kind, _ in schedule.inputs if kind != "param"}   # [B, T, heads(, dim)]
    view = {n: t.reshape(B * S, T // S, *t.shape[2:]) if n in tokens else t
            for n, t in x.items() if t is not None and n != "initial_state"}      # [B·S, T/S, ...]: views
    device = v.device
    sized = schedule.checked_sized(view, scalars, device)
    ws = Workspaces(sized, device, alloc, separate=False)
    state = sized.state                                   # [B·S, HV, K, K]: one state per segment
    values = {**schedule.call_tensors(sized, view, device, False), **ws.tensors(), **scalar_values(scalars),
              **sized.scalars, "o": None, "ht": None}
    names = [launch[0] for launch in sized.launches]
    if names[-1] != "recurrence":
        raise NotImplementedError(f"a cut forward runs the recurrence last; the plan's forward runs {names}")
    prepare, recurrence = sized.launches[:-1], sized.launches[-1:]
    run_kernels(prepare, module, values, "forward")

    def run(v_in, h0, o, ht):
        run_kernels(recurrence, module, {**values, "v": v_in, "h0": h0, "o": o, "ht": ht}, "forward")

    # 1. every segment's affine map: B from 0 with v, M from the identity with v = 0 (o is not kept)
    scratch = alloc(view[value].shape, dtype=v.dtype, device=device)
    maps = alloc((2, *state), dtype=torch.float32, device=device)
    run(view[value], None, scratch, maps[0])
    eye = torch.eye(state[-1], dtype=torch.float32, device=device).expand(state).contiguous()
    run(torch.zeros_like(view[value]), eye, scratch, maps[1])
    # 2. every segment's incoming state, sequence by sequence in order
    first = x.get("initial_state")
    if first is None:
        first = torch.zeros((B, *state[1:]), dtype=torch.float32, device=device)
    h0 = chain(maps[1], maps[0], first, S, schedule.plan.problem["state_layout"] == "vk")
    # 3. every segment from its exact incoming state
    o = alloc(view[value].shape, dtype=v.dtype, device=device)
    ht = alloc(state, dtype=torch.float32, device=device) if output_final_state else None
    run(view[value], h0, o, ht)
    final = ht.view(B, S, *state[1:])[:, -1].contiguous() if output_final_state else None   # each last segment's
    return o.reshape(v.shape), final, ws
