"""An inference forward cut into segments on the family's own kernels (docs/segments.md §4).

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
Exact like the op-level cut (no decay is trusted to forget). Forward only (no workspace is kept for a
backward), K = V (the identity is a K × K state), fixed-length batches (a varlen cut needs the lengths on the
host), and where the planner's cost model says it pays (kdagen.plan.cut; KDAGEN_CUT overrides it).
"""
from __future__ import annotations

import functools

import torch

from ..paths import templates_dir
from ..plan.cut import H200_SMS, Cut, plan_cut, resident_ctas
from ..runtime import env as runtime_env
from .launcher import Workspaces, run_kernels, scalar_values


@functools.lru_cache(maxsize=8)
def sm_count(device: torch.device) -> int:
    """The device's SMs; an H200's for the CPU emulator's calls."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H200_SMS


def has_maps_pass(plan) -> bool:
    """Whether the plan's recurrence computes both maps in one launch (its entry point recurrence_maps)."""
    return any("recurrence_maps" in k.entries for k in plan.kernels if k.name == "recurrence")


def plan_facts(plan) -> tuple[bool, int]:
    """What the cut's cost model reads from a plan: whether the recurrence has a maps pass, and how many of its
    CTAs an SM holds."""
    recurrence = [k for k in plan.kernels if k.name == "recurrence"]
    return has_maps_pass(plan), resident_ctas(recurrence[0], plan.problem["arch"]) if recurrence else 1


@functools.lru_cache(maxsize=64)
def _schedule_facts(schedule) -> tuple[bool, int]:
    """plan_facts of a Schedule's plan, once per Schedule (a call's hot path reads them)."""
    return plan_facts(schedule.plan)


def planned_cut(plan, pairs: int, T: int, sms: int, *, varlen: bool = False, keep: bool = False,
                facts: tuple[bool, int] | None = None) -> Cut:
    """kdagen.plan.cut's decision for a call of this plan (its family, head dims, maps pass and the recurrence's
    CTAs per SM: `facts`, else plan_facts) with `pairs` (sequence, value head) pairs of T tokens on `sms` SMs,
    under KDAGEN_CUT."""
    maps_pass, resident = facts or plan_facts(plan)
    p = plan.problem
    return plan_cut(plan.family, pairs, T, p["K"], p["V"], sms, maps_pass=maps_pass, resident=resident,
                    varlen=varlen, keep=keep, tokens=runtime_env.cut())


def cut_of(schedule, v: torch.Tensor, varlen: bool, keep: bool) -> Cut:
    """The cut of a call of a forward Schedule with value tensor v [B, T, HV, V] on v's device (planned_cut)."""
    B, T, HV = v.shape[:3]
    return planned_cut(schedule.plan, B * HV, T, sm_count(v.device), varlen=varlen, keep=keep,
                       facts=_schedule_facts(schedule))


CHAIN_URI = "segment_chain"
CHAIN_PARAMS = ("const float*", "const float*", "const float*", "float*", "int", "int", "int", "int")
CHAIN_COLS, CHAIN_STAGE, CHAIN_MAX_D = 8, 32, 128   # state columns per CTA, columns of M staged at a time, largest D


@functools.cache
def chain_source() -> str:
    """templates/segments/chain.cu with its constants defined in front."""
    return (f"#define CHAIN_COLS {CHAIN_COLS}\n#define CHAIN_STAGE {CHAIN_STAGE}\n#define CHAIN_MAX_D {CHAIN_MAX_D}\n"
            + (templates_dir() / "segments" / "chain.cu").read_text())


@functools.cache
def _emulated_chain():
    from ..codegen import emulate
    return emulate.build_source(chain_source(), [("segment_chain", CHAIN_PARAMS)], header_groups=())


def chain_module(device: torch.device, arch: str):
    """The module of the chain kernel: compiled for the GPU and `arch` (kdagen.runtime: memo, disk cache, NVRTC;
    `kdagen compile` of an inference configuration builds it too), or the CPU emulator's build for CPU tensors."""
    if device.type != "cuda":
        return _emulated_chain()
    return _compiled_chain(torch.cuda.current_device() if device.index is None else device.index, arch)


@functools.cache
def _compiled_chain(index: int, arch: str):
    from .. import runtime
    return runtime.load_module(CHAIN_URI, chain_source(), arch, device=index)


def chain(M: torch.Tensor, B: torch.Tensor, first: torch.Tensor | None, S: int, v_first: bool, *,
          arch: str = "sm_90a", alloc=torch.empty) -> torch.Tensor:
    """The incoming state of every segment [N·S, HV, D, D] (segment j of sequence n at n·S + j) from the segments'
    maps M, B (same layout, fp32, contiguous) and each sequence's initial state `first` [N, HV, D, D] (None: zero):
    S_in(j + 1) = M_j·S_in(j) + B_j (state_v_first: S_in(j)·M_j + B_j), one launch of templates/segments/chain.cu
    (fp32 FMAs in a fixed order: no TF32 setting rounds the carried state), compiled for `arch`; `alloc` makes the
    output (torch.empty, or the poisoning one)."""
    NS, HV, D = B.shape[0], B.shape[1], B.shape[-1]
    if D % CHAIN_STAGE or not CHAIN_STAGE <= D <= CHAIN_MAX_D:
        raise ValueError(f"the segment chain takes a D × D state with D a multiple of {CHAIN_STAGE} up to "
                         f"{CHAIN_MAX_D}, got {D}")
    if NS % S or M.shape != B.shape or B.shape[-2] != D or (first is not None and first.shape != (NS // S, *B.shape[1:])):
        raise ValueError(f"the segment chain: maps M {tuple(M.shape)}, B {tuple(B.shape)} of {S} segments per sequence, "
                         f"first {None if first is None else tuple(first.shape)}")
    if any(t is not None and (t.dtype != torch.float32 or not t.is_contiguous()) for t in (M, B, first)):
        raise ValueError("the segment chain reads contiguous float32 maps and initial states")
    h_in = alloc(B.shape, dtype=torch.float32, device=B.device)
    chain_module(B.device, arch).launch("segment_chain", (NS // S * HV, D // CHAIN_COLS), (D,),
                                        [M, B, first, h_in, S, HV, D, int(v_first)])
    return h_in


def launch_cut(schedule, module, entries, x: dict, scalars: dict, S: int, *, output_final_state: bool, alloc):
    """(o, final state or None, the workspaces) of the forward of x (fixed-length [B, T, ...] tensors,
    initial_state [B, ...]) with each sequence cut into S segments of T/S tokens: the prepare once, then the
    recurrence's maps, the chain and its ordinary pass (module doc). `module` is the forward's module, `entries`
    its entries module where the recurrence has a maps pass (else None)."""
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

    def run(v_in, h0, o, ht, launches=recurrence, on=module):
        run_kernels(launches, on, {**values, "v": v_in, "h0": h0, "o": o, "ht": ht}, "forward")

    # 1. every segment's affine map: B from 0 with v, M from the identity with v = 0
    maps = alloc((2, *state), dtype=torch.float32, device=device)
    if entries is not None:
        # one launch of the maps pass, the grid doubled in z: the B's, then the M's (templates/wgmma64/recurrence)
        doubled = [("recurrence_maps", (grid[0], grid[1], 2 * grid[2]), *rest) for _, grid, *rest in recurrence]
        run(view[value], None, None, maps, doubled, entries)
    else:                                                 # two ordinary launches (o of both is discarded)
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
    return o.reshape(v.shape), final, ws
