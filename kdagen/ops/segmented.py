"""A call cut into segments on the family's own kernels: an inference forward (docs/segments.md §4) or a training
step (§6).

The op-level cut (kdagen.ops.segments) calls the whole op three times, so the token-parallel prepare runs three
times, twice on doubled heads. The prepare's workspace is chunk-local — it depends on where chunks start, not on
where sequences do — so a fixed-length batch [B, T] cut into S segments of T/S tokens (a multiple of the chunk)
is the batch [B·S, T/S] with the same workspace. Here the prepare runs once on that view, then over all the
segments in parallel:
1. the recurrence from state 0 with v (final states: B of every segment) and from the identity with v = 0 (final
   states: M) — one launch of the wgmma64 recurrence's maps pass (recurrence_maps: its grid doubled, no o), or
   two ordinary launches;
2. the chain across each sequence's segments (S_in of segment j + 1 = M_j·S_in_j + B_j, in order), one launch;
3. the recurrence once more from every segment's exact incoming state: o and the final states.
Exact like the op-level cut (no decay is trusted to forget). K = V (the identity is a K × K state), fixed-length
batches (a varlen cut needs the lengths on the host), and where the planner's cost model says it pays
(kdagen.plan.cut; KDAGEN_CUT overrides it).

A training step runs its backward on the same view. The forward keeps its workspaces (chunk-local, and the
states checkpoints of the view's blocks), every segment's incoming state and its map M. The state gradient is
affine across a segment too, dS_in(j) = M_jᵀ·dS_out(j) + C_j, where C_j is the dS entering segment j when its dht
is 0 (it depends on do alone). So the backward runs (1) the dS chain over every segment from dht = 0 (the entry point
dstate_starts of mma16's dstate_pass, through block 0, or of wgmma64's dstate, storing no dh), writing C_j; (2) the
chain in reverse with M_jᵀ from the call's dht, giving each segment's dS_out; (3) the whole
backward on the view with those as dht. Every gradient is then exact, and the per-chunk partials of the head
parameters are summed in the same order as uncut.
"""
from __future__ import annotations

import functools

import torch

from ..paths import templates_dir
from ..plan.cut import CHAIN_DIMS, H200_SMS, Cut, plan_cut, resident_ctas
from ..runtime import env as runtime_env
from .launcher import NOT_KEPT, Workspaces, run_kernels, scalar_values


@functools.lru_cache(maxsize=8)
def sm_count(device: torch.device) -> int:
    """The device's SMs; an H200's for the CPU emulator's calls."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H200_SMS


def has_maps_pass(plan) -> bool:
    """Whether the plan's recurrence computes both maps in one launch (its entry point recurrence_maps)."""
    return any("recurrence_maps" in k.entries for k in plan.kernels if k.name == "recurrence")


def c_pass_kernel(plan) -> str | None:
    """The dS chain's backward kernel, whose entry point dstate_starts is a cut training call's C pass (mma16's
    dstate_pass, wgmma64's dstate), or None."""
    return next((k.name for k in plan.direction("backward") if "dstate_starts" in k.entries), None)


def plan_facts(plan) -> tuple[bool, int, tuple[int, int]]:
    """What the cut's cost models read from a plan: whether the recurrence has a maps pass, how many of its CTAs
    an SM holds, and the CTAs per (sequence, head) of the recurrence and of the dS chain's kernel (their grids' z:
    mma16's dstate_pass, wgmma64's dstate)."""
    kernels = {k.name: k for k in plan.kernels}
    recurrence = kernels.get("recurrence")

    def z(name: str | None) -> int:
        grid = kernels[name].grid if name in kernels else ()
        return grid[2] if len(grid) > 2 and isinstance(grid[2], int) else 1
    return (has_maps_pass(plan), resident_ctas(recurrence, plan.problem["arch"]) if recurrence else 1,
            (z("recurrence"), z(c_pass_kernel(plan))))


@functools.lru_cache(maxsize=64)
def _schedule_facts(schedule) -> tuple[bool, int, tuple[int, int]]:
    """plan_facts of a Schedule's plan, once per Schedule (a call's hot path reads them)."""
    return plan_facts(schedule.plan)


def planned_cut(plan, pairs: int, T: int, sms: int, *, varlen: bool = False, keep: bool = False,
                facts: tuple[bool, int, tuple[int, int]] | None = None) -> Cut:
    """kdagen.plan.cut's decision for a call of this plan (its family, head dims and `facts`, else plan_facts)
    with `pairs` (sequence, value head) pairs of T tokens on `sms` SMs, under KDAGEN_CUT: an inference forward, or
    with `keep` a training step."""
    maps_pass, resident, slices = facts or plan_facts(plan)
    p = plan.problem
    return plan_cut(plan.family, pairs, T, p["K"], p["V"], sms, maps_pass=maps_pass, resident=resident,
                    varlen=varlen, keep=keep, tokens=runtime_env.cut(), slices=slices)


def cut_of(schedule, v: torch.Tensor, varlen: bool, keep: bool) -> Cut:
    """The cut of a call of a forward Schedule with value tensor v [B, T, HV, V] on v's device (planned_cut)."""
    B, T, HV = v.shape[:3]
    return planned_cut(schedule.plan, B * HV, T, sm_count(v.device), varlen=varlen, keep=keep,
                       facts=_schedule_facts(schedule))


CHAIN_PARAMS = ("const float*", "const float*", "const float*", "float*", "int", "int", "int")
CHAIN_COLS, CHAIN_PARTS = 8, 4           # state columns per CTA, ranges of the sum per row (threads: D per range)


def chain_uri(D: int) -> str:
    return f"segment_chain_d{D}"


@functools.cache
def chain_source(D: int) -> str:
    """templates/segments/chain.cu for D × D states, its constants defined in front (D a compile-time constant:
    every loop has a known trip count, so a thread's staged values stay in registers)."""
    if D not in CHAIN_DIMS:
        raise ValueError(f"the segment chain takes a D × D state with D in {CHAIN_DIMS}, got {D}")
    return (f"#define CHAIN_COLS {CHAIN_COLS}\n#define CHAIN_PARTS {CHAIN_PARTS}\n#define CHAIN_D {D}\n"
            + (templates_dir() / "segments" / "chain.cu").read_text())


@functools.cache
def _emulated_chain(D: int):
    from ..codegen import emulate
    return emulate.build_source(chain_source(D), [("segment_chain", CHAIN_PARAMS)], header_groups=())


def chain_module(device: torch.device, arch: str, D: int):
    """The module of the chain kernel for D × D states: compiled for the GPU and `arch` (kdagen.runtime: memo, disk
    cache, NVRTC; `kdagen compile` of a configuration with K = V = D builds it too), or the CPU emulator's build for
    CPU tensors."""
    if device.type != "cuda":
        return _emulated_chain(D)
    return _compiled_chain(torch.cuda.current_device() if device.index is None else device.index, arch, D)


@functools.cache
def _compiled_chain(index: int, arch: str, D: int):
    from .. import runtime
    return runtime.load_module(chain_uri(D), chain_source(D), arch, device=index)


def chain(M: torch.Tensor, B: torch.Tensor, first: torch.Tensor | None, S: int, v_first: bool, *,
          arch: str = "sm_90a", alloc=torch.empty) -> torch.Tensor:
    """The incoming state of every segment [N·S, HV, D, D] (segment j of sequence n at n·S + j) from the segments'
    maps M, B (same layout, fp32, contiguous) and each sequence's initial state `first` [N, HV, D, D] (None: zero):
    S_in(j + 1) = M_j·S_in(j) + B_j (state_v_first: S_in(j)·M_j + B_j), one launch of templates/segments/chain.cu
    (fp32 FMAs in a fixed order: no TF32 setting rounds the carried state), compiled for `arch`; `alloc` makes the
    output (torch.empty, or the poisoning one)."""
    NS, HV, D = B.shape[0], B.shape[1], B.shape[-1]
    if D not in CHAIN_DIMS:
        raise ValueError(f"the segment chain takes a D × D state with D in {CHAIN_DIMS}, got {D}")
    if NS % S or M.shape != B.shape or B.shape[-2] != D or (first is not None and first.shape != (NS // S, *B.shape[1:])):
        raise ValueError(f"the segment chain: maps M {tuple(M.shape)}, B {tuple(B.shape)} of {S} segments per sequence, "
                         f"first {None if first is None else tuple(first.shape)}")
    if any(t is not None and (t.dtype != torch.float32 or not t.is_contiguous()) for t in (M, B, first)):
        raise ValueError("the segment chain reads contiguous float32 maps and initial states")
    h_in = alloc(B.shape, dtype=torch.float32, device=B.device)
    chain_module(B.device, arch, D).launch("segment_chain", (NS // S * HV, D // CHAIN_COLS), (D * CHAIN_PARTS,),
                                           [M, B, first, h_in, S, HV, int(v_first)], smem_bytes=chain_smem_bytes(D))
    return h_in


def chain_smem_bytes(D: int) -> int:
    """The chain kernel's dynamic shared memory: A_j [D][D + 1], X(j)'s columns and the parts' sums, fp32."""
    return 4 * (D * (D + 1) + D * CHAIN_COLS + CHAIN_PARTS * D * CHAIN_COLS)


def token_view(schedule, x: dict, S: int) -> dict:
    """x with its token tensors [B, T, ...] seen as [B·S, T/S, ...] (views) and no initial_state."""
    tokens = {name for name, _, _, kind, _ in schedule.inputs if kind != "param"}   # [B, T, heads(, dim)]
    return {n: t.reshape(t.shape[0] * S, t.shape[1] // S, *t.shape[2:]) if n in tokens else t
            for n, t in x.items() if t is not None and n != "initial_state"}


def launch_cut(schedule, module, entries, x: dict, scalars: dict, S: int, *, output_final_state: bool, alloc,
               keep: bool = False):
    """(o, final state or None, the Workspaces, the segments' states) of the forward of x (fixed-length [B, T, ...]
    tensors, initial_state [B, ...]) with each sequence cut into S segments of T/S tokens: the prepare once, then
    the recurrence's maps, the chain and its ordinary pass (module doc). `module` is the forward's module, `entries`
    its entries module where the recurrence has a maps pass (else None). `keep`: a backward follows — the
    workspaces are separate tensors (their surplus chunk rows zeroed) and the segments' states are
    {"segment_h0": every segment's incoming state, "segment_maps": its M} (else None)."""
    value = schedule.value
    v = x[value]
    B, T = v.shape[:2]
    view = token_view(schedule, x, S)                   # [B·S, T/S, ...]
    device = v.device
    sized = schedule.checked_sized(view, scalars, device)
    ws = Workspaces(sized, device, alloc, separate=keep)
    if keep and sized.tails:
        torch._foreach_zero_([ws.separate[name][start:] for name, start in sized.tails])
    state = sized.state                                   # [B·S, HV, K, K]: one state per segment
    values = {**schedule.call_tensors(sized, view, device, keep), **ws.tensors(), **scalar_values(scalars),
              **sized.scalars, "o": None, "ht": None}
    names = [launch[0] for launch in sized.launches]
    if names[-1] != "recurrence":
        raise NotImplementedError(f"a cut forward runs the recurrence last; the plan's forward runs {names}")
    prepare, recurrence = sized.launches[:-1], sized.launches[-1:]
    run_kernels(prepare, module, values, "forward")

    def run(v_in, h0, o, ht, launches=recurrence, on=module):
        run_kernels(launches, on, {**values, "v": v_in, "h0": h0, "o": o, "ht": ht}, "forward")

    # 1. every segment's affine map: B from 0 with v, M from the identity with v = 0
    if entries is not None:
        # one launch of the maps pass, the grid doubled in z: the B's, then the M's (templates/wgmma64/recurrence)
        maps = alloc((2, *state), dtype=torch.float32, device=device)
        doubled = [("recurrence_maps", (grid[0], grid[1], 2 * grid[2]), *rest) for _, grid, *rest in recurrence]
        run(view[value], None, None, maps, doubled, entries)
    else:                                                 # two ordinary launches (o of both is discarded)
        maps = [alloc(state, dtype=torch.float32, device=device) for _ in range(2)]   # M alone is kept
        scratch = alloc(view[value].shape, dtype=v.dtype, device=device)
        run(view[value], None, scratch, maps[0])
        eye = torch.eye(state[-1], dtype=torch.float32, device=device).expand(state).contiguous()
        run(torch.zeros_like(view[value]), eye, scratch, maps[1])
    # 2. every segment's incoming state, sequence by sequence in order
    first = x.get("initial_state")
    h0 = chain(maps[1], maps[0], None if first is None else first.contiguous(), S,
               schedule.plan.problem["state_layout"] == "vk", arch=schedule.plan.problem["arch"], alloc=alloc)
    # 3. every segment from its exact incoming state
    o = alloc(view[value].shape, dtype=v.dtype, device=device)
    ht = alloc(state, dtype=torch.float32, device=device) if output_final_state else None
    run(view[value], h0, o, ht)
    final = ht.view(B, S, *state[1:])[:, -1].contiguous() if output_final_state else None   # each last segment's
    states = {"segment_h0": h0, "segment_maps": maps[1]} if keep else None
    return o.reshape(v.shape), final, ws, states


def reverse_chain(maps: torch.Tensor, starts: torch.Tensor, dht: torch.Tensor | None, S: int, v_first: bool, *,
                  arch: str, alloc) -> torch.Tensor:
    """Every segment's dS_out [N·S, HV, D, D] from its map M and its C (`starts`, the dS entering it from dht = 0)
    and each sequence's dht [N, HV, D, D] (None: zero): dS_out(S − 1) = dht, dS_out(j − 1) = M_jᵀ·dS_out(j) + C_j
    (state_v_first: dS_out(j)·M_jᵀ + C_j) — the chain kernel over the segments in reverse with the maps transposed."""
    NS, HV, D = starts.shape[0], starts.shape[1], starts.shape[-1]

    def backwards(t: torch.Tensor) -> torch.Tensor:        # segment j of each sequence at S − 1 − j
        return t.reshape(NS // S, S, HV, D, D).flip(1).reshape(NS, HV, D, D)
    out = chain(backwards(maps.transpose(-1, -2)).contiguous(), backwards(starts).contiguous(),
                None if dht is None else dht.contiguous(), S, v_first, arch=arch, alloc=alloc)
    return backwards(out)


def backward_cut(schedule, module, entries, x: dict, workspace: dict, states: dict, scalars: dict, do: torch.Tensor,
                 dht: torch.Tensor | None, S: int, *, alloc, debug: dict | None = None) -> dict:
    """The gradients (kdagen.ops.backward.launch's) of a training call whose forward was cut into S segments
    (launch_cut with keep: `workspace` the view's saved workspaces, `states` its segment_h0 and segment_maps): the
    C pass (the entry point dstate_starts of the dS chain's kernel, on `entries`, the backward's entries module),
    the reverse chain, then the whole backward on `module` on the view (module doc)."""
    from .backward import launch_scheduled
    value = schedule.value
    v = x[value]
    view = {**token_view(schedule, x, S), "initial_state": states["segment_h0"]}
    device = v.device
    do_view = do.reshape(view[value].shape)
    checked: dict = {}                                    # the view's checks, run once for both launches below
    sized = schedule.checked_sized(view, scalars, device, checked)
    problem = schedule.plan.problem
    # 1. C_j: the dS chain from dht = 0 through every chunk of every segment, storing nothing on the way
    starts = alloc(sized.state, dtype=torch.float32, device=device)
    chain_kernel = c_pass_kernel(schedule.plan)
    if chain_kernel is None:
        raise NotImplementedError(f"a cut training call needs a C pass (a backward kernel with the entry point "
                                  f"dstate_starts); family {schedule.plan.family} has none (KDAGEN_CUT=off runs it "
                                  "uncut)")
    passes = [("dstate_starts", *rest) for name, *rest in sized.launches if name == chain_kernel]
    unwritten = dict.fromkeys((name for name, _, _ in sized.workspaces), NOT_KEPT)   # the backward's own: unused
    run_kernels(passes, entries, {**schedule.layout_tensors(sized, None, device), **workspace, **sized.scalars,
                                 **unwritten, "dout": do_view, "dht": None, "grad_h0": None, "dstate_start": starts},
                "backward")
    # 2. every segment's dS_out, from the call's dht backwards
    dht_view = reverse_chain(states["segment_maps"], starts, dht, S, problem["state_layout"] == "vk",
                             arch=problem["arch"], alloc=alloc)
    # 3. the backward of every segment with its dS_out
    grads = launch_scheduled(schedule, module, view, workspace, scalars, do_view, dht_view, alloc=alloc, debug=debug,
                             memo=checked)
    out = {n: g.reshape(x[n].shape) for n, g in grads.items() if n != "initial_state"}
    h0 = x.get("initial_state")
    out["initial_state"] = None if h0 is None else \
        grads["initial_state"].view(h0.shape[0], S, *h0.shape[1:])[:, 0].contiguous()
    return out
