"""Context parallelism: one packed batch of sequences sharded along its tokens across the ranks of a
torch.distributed process group, forward and backward exact (docs/context_parallel.md).

The token axis (cu_seqlens[-1] tokens) is cut into equal parts: one per rank ("contiguous") or two per rank,
rank r holding parts r and 2W − 1 − r ("zigzag", which balances causal work). A sequence may run across parts.
Each rank runs its parts as packed local sequences; what it cannot know is the state entering a part's first
piece when that piece continues a sequence from earlier parts. The state after a piece is affine in the state
before it (S_out = M·S_in + B), so:
1. each rank summarises each of its parts by its last piece's (M, B), needed only where a later part continues
   that piece's sequence, with M kept only where that piece also begins the part mid-sequence: by one op call with
   the value heads doubled over those pieces' tokens (kdagen.ops.segments.affine_maps) — or, on a rank where
   every local sequence begins (nothing enters it), by the op call itself, whose final states are then those B;
   a rank whose summaries no later part reads computes none;
2. the (M, B) of every part go to every rank (one all_gather), and each rank folds the parts before its own in
   chain order, S = M·S + B from 0 where the sequence began, for the incoming state of each continuing piece;
3. the op runs on the rank's tokens with those incoming states (on a rank where nothing enters, it ran in 1).
Every step is an op call, a torch matmul or the all_gather, whose backward sums the gradients of every rank's
copy (an all_reduce), so autograd gives the exact backward, including the state gradient flowing back across
ranks. initial_state and the final states are the whole batch's (FLA refuses both under CP; kdagen needs its own
context for them, which records each local sequence's global index).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
import torch.distributed as dist

from . import segments

LAYOUTS = ("contiguous", "zigzag")


@dataclass
class CPContext:
    """Where this rank's tokens lie in the global packed batch. The field names are FLA's (FLACPContext), so a
    context built by `fla.ops.cp.build_cp_context` serves as well. cu_seqlens: this rank's local sequences
    ([front part; back part] in zigzag); pre/post_num_ranks: how many parts before / after this one the first /
    last local sequence runs into (per part in zigzag)."""
    group: object = None
    cu_seqlens: torch.Tensor | None = None
    cu_seqlens_cpu: torch.Tensor | None = None
    is_first_rank: bool | None = None
    is_last_rank: bool | None = None
    pre_num_ranks: int | None = None
    post_num_ranks: int | None = None
    layout: str = "contiguous"
    part_len: int | None = None
    front_num_seqs: int | None = None
    pre_num_ranks_by_part: tuple | None = None
    post_num_ranks_by_part: tuple | None = None
    is_first_by_part: tuple | None = None
    is_last_by_part: tuple | None = None
    # kdagen's own (FLA's context has no global sequence indices): the global index of each local sequence, the
    # global sequence count and the sequences without tokens — what initial_state and the final state need
    global_seqs: tuple | None = None
    num_seqs: int | None = None
    empty_seqs: tuple | None = None


def _interval(cu: list[int], start: int, end: int, pos: int,
              part_len: int) -> tuple[list[int], list[int], int, int]:
    """(local offsets of the sequences overlapping tokens [start, end), their global indices, parts before `pos`
    the first one began in, parts after `pos` the last one ends in)."""
    first = next(n for n in range(len(cu) - 1) if cu[n + 1] > start)
    last = max(n for n in range(len(cu) - 1) if cu[n] < end)
    clipped = [min(max(c, start), end) - start for c in cu[first:last + 2]]
    kept = [i for i in range(last + 1 - first) if clipped[i + 1] > clipped[i]]      # sequences cut to nothing go
    local = [clipped[0]] + [clipped[i + 1] for i in kept]
    return local, [first + i for i in kept], pos - cu[first] // part_len, (cu[last + 1] - 1) // part_len - pos


def build_cp_context(cu_seqlens: torch.Tensor, group, conv1d_kernel_size: int | None = None,
                     cu_seqlens_cpu: torch.Tensor | None = None, use_tf32x3_affine_chain: bool = True,
                     layout: str = "contiguous") -> CPContext:
    """This rank's CPContext for the global offsets `cu_seqlens` (int [N + 1], the packed batch before sharding)
    over `group`: the arguments and the result of FLA's build_cp_context. The tokens must divide evenly into
    one part per rank (contiguous) or two (zigzag); rank r then holds global tokens [r·L, (r+1)·L) (contiguous) or
    parts r and 2W − 1 − r concatenated (zigzag), L the part length. `use_tf32x3_affine_chain` must be True, as in
    FLA (kdagen's maps and their fold are fp32 throughout)."""
    if not use_tf32x3_affine_chain:
        raise ValueError("use_tf32x3_affine_chain must be True (as in FLA): kdagen's state maps are always fp32")
    if conv1d_kernel_size is not None:
        raise ValueError("conv1d_kernel_size: kdagen's ops have no short convolution; build the context without it")
    if group is None:
        raise ValueError("group: context parallelism needs a torch.distributed process group")
    cu = [int(c) for c in (cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens).tolist()]
    ctx = context_for(cu, dist.get_world_size(group), dist.get_rank(group), layout)
    ctx.group, ctx.cu_seqlens = group, ctx.cu_seqlens_cpu.to(cu_seqlens.device)
    return ctx


def context_for(cu: list[int], world: int, rank: int, layout: str = "contiguous") -> CPContext:
    """The CPContext (without group; cu_seqlens on the host) of rank `rank` of `world` for global offsets `cu`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must be non-decreasing offsets from 0, got {cu}")
    parts = world if layout == "contiguous" else 2 * world
    if cu[-1] < parts or cu[-1] % parts:
        raise ValueError(f"cu_seqlens: {cu[-1]} tokens do not divide into {parts} equal parts ({layout} layout, "
                         f"{world} ranks)")
    L = cu[-1] // parts
    sequences = dict(num_seqs=len(cu) - 1, empty_seqs=tuple(n for n in range(len(cu) - 1) if cu[n + 1] == cu[n]))
    if layout == "contiguous":
        local, seqs, pre, post = _interval(cu, rank * L, (rank + 1) * L, rank, L)
        offsets = torch.tensor(local, dtype=torch.int64)
        return CPContext(None, offsets, offsets, is_first_rank=pre == 0, is_last_rank=post == 0, pre_num_ranks=pre,
                         post_num_ranks=post, global_seqs=tuple(seqs), **sequences)
    back = 2 * world - 1 - rank
    front_local, front_seqs, front_pre, front_post = _interval(cu, rank * L, (rank + 1) * L, rank, L)
    back_local, back_seqs, back_pre, back_post = _interval(cu, back * L, (back + 1) * L, back, L)
    offsets = torch.tensor(front_local + [c + L for c in back_local[1:]], dtype=torch.int64)
    return CPContext(None, offsets, offsets, layout="zigzag", part_len=L, front_num_seqs=len(front_local) - 1,
                     pre_num_ranks_by_part=(front_pre, back_pre), post_num_ranks_by_part=(front_post, back_post),
                     is_first_by_part=(front_pre == 0, back_pre == 0), is_last_by_part=(front_post == 0, back_post == 0),
                     global_seqs=tuple(front_seqs + back_seqs), **sequences)


@dataclass
class _Part:
    pos: int                 # place in the chain of parts
    first: int               # its first local sequence
    last: int                # its last local sequence
    pre: int                 # parts before it that its first sequence runs through
    post: int                # parts after it that its last sequence runs into


def _parts(ctx, world: int, rank: int, sequences: int) -> list[_Part]:
    if ctx.layout == "contiguous":
        return [_Part(rank, 0, sequences - 1, int(ctx.pre_num_ranks), int(ctx.post_num_ranks))]
    front = int(ctx.front_num_seqs)
    pre, post = ctx.pre_num_ranks_by_part, ctx.post_num_ranks_by_part
    return [_Part(rank, 0, front - 1, int(pre[0]), int(post[0])),
            _Part(2 * world - 1 - rank, front, sequences - 1, int(pre[1]), int(post[1]))]


def _chain_position(world: int, layout: str) -> list[tuple[int, int]]:
    """(rank, part index on that rank) of each place in the chain of parts."""
    if layout == "contiguous":
        return [(r, 0) for r in range(world)]
    return [(p, 0) for p in range(world)] + [(2 * world - 1 - p, 1) for p in range(world, 2 * world)]


def _fold(every: torch.Tensor, parts: list[_Part], places: list[tuple[int, int]], v_first: bool,
          sequences: int) -> torch.Tensor:
    """The incoming state of every local sequence [sequences, HV, ·, ·]: zero, except a part's first piece that
    continues a sequence: S = M·S + B (S·M + B with state_v_first) over the parts before it in chain order, from 0
    where the sequence began. `every`: the summaries of all ranks [world, parts per rank, 2 (M, B), HV, ·, ·]."""
    out = every.new_zeros((sequences, *every.shape[3:]))
    starts = {}
    for p in parts:
        if p.pre:
            S = torch.zeros_like(every[0, 0, 1])
            for place in range(p.pos - p.pre, p.pos):
                m, b = every[places[place]]
                S = segments.apply_map(S, m, b, v_first)
            starts[p.first] = S
    if not starts:
        return out
    return out.index_copy(0, torch.tensor(list(starts), device=out.device), torch.stack(list(starts.values())))


class _IncomingStates(torch.autograd.Function):
    """all_gather of the ranks' summaries, then `_fold`. Its backward runs on every rank (its output is the next
    op call's initial state, whose gradient that call always returns), so the collective there cannot be left
    waiting: each rank's gradient of the gathered summaries, summed over the ranks (an all_reduce: gloo has no
    reduce_scatter), gives every rank the gradient of its own. A rank whose op call runs before the exchange ties
    its output to it (`_Tied`) for the same reason; `anchors` (the call's inputs, gradient None) keep the exchange
    on autograd's path to them where the summaries are constants (a rank that sends nothing)."""

    @staticmethod
    def forward(ctx, summary, group, parts, places, v_first, sequences, *anchors):
        gathered = [torch.empty_like(summary) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, summary.contiguous(), group=group)
        every = torch.stack(gathered)
        ctx.save_for_backward(every)
        ctx.meta, ctx.anchors = (group, parts, places, v_first, sequences), len(anchors)
        return _fold(every, parts, places, v_first, sequences)

    @staticmethod
    def backward(ctx, grad):
        (every,) = ctx.saved_tensors
        group, parts, places, v_first, sequences = ctx.meta
        with torch.enable_grad():
            e = every.detach().requires_grad_()
            h0 = _fold(e, parts, places, v_first, sequences)
            g = torch.autograd.grad(h0, e, grad)[0].contiguous() if h0.requires_grad else torch.zeros_like(every)
        dist.all_reduce(g, group=group)
        return (g[dist.get_rank(group)], None, None, None, None, None) + (None,) * ctx.anchors

    @classmethod
    def exchange(cls, summary, group, parts, places, v_first, sequences, anchors):
        return cls.apply(summary, group, parts, places, v_first, sequences, *anchors)


class _Tied(torch.autograd.Function):
    """o, made to depend on `h0` (unread): autograd then runs the exchange's backward on this rank too."""

    @staticmethod
    def forward(ctx, o, h0):
        ctx.h0_meta = h0.shape, h0.dtype, h0.device
        return o.view_as(o)

    @staticmethod
    def backward(ctx, grad):
        shape, dtype, device = ctx.h0_meta
        return grad, torch.zeros(shape, dtype=dtype, device=device)


def _last_piece_maps(fn, tokens: tuple, spans: list[tuple[int, int]], v_first: bool, per_head: dict,
                     options: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, B) of the local pieces at token spans [a, b) (the last piece of each part a later part continues), from
    one doubled-head call over those pieces' tokens alone: a rank holding many short sequences maps one of them
    per part, not all."""
    pick = (lambda t: t[:, spans[0][0]:spans[0][1]]) if len(spans) == 1 else (
        lambda t: torch.cat([t[:, a:b] for a, b in spans], dim=1))
    cu_cpu = torch.tensor([0, *accumulate(b - a for a, b in spans)], dtype=torch.int64)
    q, k, v, g, beta = (pick(t) for t in tokens)
    return segments.affine_maps(fn, q, k, v, g, beta, cu=cu_cpu.to(q.device), cu_cpu=cu_cpu, state_v_first=v_first,
                                per_head=per_head, options=options)


def check(ctx, params: dict, q: torch.Tensor, v: torch.Tensor) -> None:
    """Errors naming the argument for a call the context cannot serve."""
    if getattr(ctx, "group", None) is None:
        raise ValueError("cp_context has no process group (build it with kdagen.build_cp_context)")
    if getattr(ctx, "layout", "contiguous") not in LAYOUTS:
        raise ValueError(f"cp_context.layout must be one of {LAYOUTS}, got {ctx.layout!r}")
    h0 = params.get("initial_state")
    if (h0 is not None or params.get("output_final_state")) and getattr(ctx, "global_seqs", None) is None:
        raise ValueError("initial_state and output_final_state with cp_context need a context from "
                         "kdagen.build_cp_context (FLA's has no global sequence indices; FLA refuses both under CP)")
    if h0 is not None and h0.shape[0] != ctx.num_seqs:
        raise ValueError(f"initial_state holds {h0.shape[0]} sequences; with cp_context it is the whole batch's, "
                         f"{ctx.num_seqs} sequences, on every rank")
    if params.get("use_graph"):
        raise NotImplementedError("use_graph with cp_context is not supported by kdagen")
    cu = ctx.cu_seqlens_cpu if ctx.cu_seqlens_cpu is not None else ctx.cu_seqlens
    given = params.get("cu_seqlens")
    if given is not None and not torch.equal(given.cpu().long(), cu.cpu().long()):
        raise ValueError("cu_seqlens differs from cp_context.cu_seqlens; pass cp_context alone (it holds this "
                         "rank's offsets)")
    if q.shape[0] != 1:
        raise ValueError(f"q: context parallelism runs one packed batch (B = 1), got B = {q.shape[0]}")
    if q.shape[1] != int(cu[-1]):
        raise ValueError(f"q has {q.shape[1]} tokens, cp_context.cu_seqlens places {int(cu[-1])} on this rank")
    if getattr(ctx, "layout", "contiguous") == "zigzag" and q.shape[1] != 2 * int(ctx.part_len):
        raise ValueError(f"q has {q.shape[1]} tokens, a zigzag cp_context with part_len {ctx.part_len} places "
                         f"{2 * int(ctx.part_len)} (two parts) on this rank")
    if q.shape[3] != v.shape[3]:
        raise ValueError(f"cp_context needs K = V (the state maps are K x K), got K={q.shape[3]}, V={v.shape[3]}")


def run(fn, q, k, v, g, beta, ctx, params: dict, call):
    """fn (chunk_kda or chunk_gated_delta_rule) on this rank's tokens with the exact incoming states: (o, final
    states or None). `params` are the public call's parameters, `call` what kdagen.ops.api.resolve made of them.
    initial_state is the whole batch's [N, ...] on every rank (each rank reads the rows of the sequences that begin
    on it); the final states come back as [N, ...] on every rank, each sequence's row filled on the rank where it
    ends (rank 0 for a sequence without tokens) and zero elsewhere."""
    check(ctx, params, q, v)
    group = ctx.group
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    cu_cpu = (ctx.cu_seqlens_cpu if ctx.cu_seqlens_cpu is not None else ctx.cu_seqlens.cpu()).long()
    cu = cu_cpu.to(q.device)
    v_first = call.opt.state_v_first
    options, per_head = segments.call_options(params, call)
    given_h0, want_final = params.get("initial_state"), bool(params.get("output_final_state"))
    sequences = cu_cpu.numel() - 1
    parts = _parts(ctx, world, rank, sequences)
    places = _chain_position(world, ctx.layout)
    anchors = [t for t in (q, k, v, g, beta, given_h0, *per_head.values())
               if isinstance(t, torch.Tensor) and t.requires_grad]
    continuing = {p.first for p in parts if p.pre}       # local sequences whose state enters from an earlier part

    def call(h0, final: bool):
        return fn(q, k, v, g, beta, initial_state=h0, output_final_state=final, state_v_first=v_first, cu_seqlens=cu,
                  cu_seqlens_cpu=cu_cpu, **per_head, **options)

    def local_h0(folded):
        """Each local sequence's initial state: the folded one where it continues from an earlier part, the given
        initial_state of its global sequence where it begins here (zero without one)."""
        if given_h0 is None:
            return folded
        rows = given_h0[torch.tensor(ctx.global_seqs, device=given_h0.device)]
        if folded is None or not continuing:
            return rows
        entering = torch.tensor(sorted(continuing), device=rows.device)
        return rows.index_copy(0, entering, folded[entering])

    def mapped(M, B, j):
        """M·h0 + B (h0·M + B with state_v_first), h0 the given initial state of local sequence j's sequence."""
        if given_h0 is None:
            return B
        return segments.apply_map(given_h0[ctx.global_seqs[j]], M, B, v_first)

    def finals(final):
        return _final_states(final, ctx, parts, given_h0, rank) if want_final else None

    with segments.uncut():
        if not any(p.pre for p in parts):
            # every local sequence begins here: the op runs first, and a part's summary is (0, final state of its
            # last piece); the ranks after this one wait for it in the exchange
            o, final = call(local_h0(None), True)
            zero = torch.zeros_like(final[0])
            summary = torch.stack([torch.stack([zero, final[p.last] if p.post else zero]) for p in parts])
            h0 = _IncomingStates.exchange(summary, group, parts, places, v_first, sequences, anchors)
            ht = finals(final)
            return _Tied.apply(o, h0), None if ht is None else _Tied.apply(ht, h0)
        # 1. each part's summary: its last piece's (M, B) where a later part continues that piece's sequence, M
        #    only where the piece is also the part's first and continues a sequence (a piece that begins inside
        #    the part sends its state from its own initial state, M·h0 + B); no op call where no later part reads
        #    this rank's summaries
        sending = [p for p in parts if p.post]
        if sending:
            M, B = _last_piece_maps(fn, (q, k, v, g, beta), [(int(cu_cpu[p.last]), int(cu_cpu[p.last + 1]))
                                                             for p in sending], v_first, per_head, options)
            zero = torch.zeros_like(M[0])
            maps = {p.pos: (M[j], B[j]) if p.first == p.last and p.pre else (zero, mapped(M[j], B[j], p.last))
                    for j, p in enumerate(sending)}
            summary = torch.stack([torch.stack(maps.get(p.pos, (zero, zero))) for p in parts])
        else:
            summary = torch.zeros((len(parts), 2, v.shape[2], q.shape[3], q.shape[3]), dtype=torch.float32,
                                  device=q.device)
        # 2. every rank's summaries folded, in chain order, into the incoming state of each continuing piece
        h0 = _IncomingStates.exchange(summary, group, parts, places, v_first, sequences, anchors)
        # 3. this rank's tokens from those states
        o, final = call(local_h0(h0), want_final)
    return o, finals(final)


def _final_states(final: torch.Tensor, ctx, parts: list[_Part], given_h0, rank: int) -> torch.Tensor:
    """[N, ...] final states of the whole batch from this rank's local ones: the rows of the sequences that end
    here (every local sequence but a part's last when a later part continues it); a sequence without tokens ends
    where it began, reported on rank 0 as its initial state (zero without one)."""
    ends = [j for p in parts for j in range(p.first, p.last + 1) if not (j == p.last and p.post)]
    out = final.new_zeros((ctx.num_seqs, *final.shape[1:]))
    device = final.device
    if ends:
        rows = torch.tensor([ctx.global_seqs[j] for j in ends], device=device)
        out = out.index_copy(0, rows, final[torch.tensor(ends, device=device)])
    if rank == 0 and ctx.empty_seqs and given_h0 is not None:
        rows = torch.tensor(ctx.empty_seqs, device=device)
        out = out.index_copy(0, rows, given_h0[rows].to(out.dtype))
    return out
