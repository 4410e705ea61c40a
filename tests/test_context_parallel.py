"""Context parallelism (kdagen.ops.context_parallel): the context builder as pure data, and the sharded op on two
gloo processes — its outputs and every gradient against the whole packed batch run in one process. Both run the
kernels in the CPU emulation."""
from __future__ import annotations

import functools
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kdagen.codegen import emulate
from kdagen.ops.context_parallel import context_for

needs_emulation = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")

CU = [0, 50, 128]                # two sequences; every part boundary cuts one of them
H, HV, K = 1, 2, 64


@pytest.mark.parametrize("layout, rank, want", [
    ("contiguous", 0, dict(cu_seqlens=[0, 50, 64], pre_num_ranks=0, post_num_ranks=1, is_first_rank=True)),
    ("contiguous", 1, dict(cu_seqlens=[0, 64], pre_num_ranks=1, post_num_ranks=0, is_last_rank=True)),
    # parts of 32 tokens: rank 0 holds parts 0 and 3, rank 1 parts 1 and 2; sequence 1 runs through parts 1-3
    ("zigzag", 0, dict(cu_seqlens=[0, 32, 64], front_num_seqs=1, pre_num_ranks_by_part=(0, 2),
                       post_num_ranks_by_part=(1, 0), part_len=32)),
    ("zigzag", 1, dict(cu_seqlens=[0, 18, 32, 64], front_num_seqs=2, pre_num_ranks_by_part=(1, 1),
                       post_num_ranks_by_part=(2, 1), part_len=32)),
])
def test_context_for_places_each_rank(layout, rank, want):
    ctx = context_for(CU, 2, rank, layout)
    assert ctx.cu_seqlens.tolist() == want.pop("cu_seqlens") and ctx.layout == layout
    assert all(getattr(ctx, n) == v for n, v in want.items()), ctx


@pytest.mark.parametrize("cu, layout, message", [
    ([0, 50, 127], "contiguous", "do not divide into 2 equal parts"),
    ([0, 50, 130], "zigzag", "do not divide into 4 equal parts"),
    ([0, 60, 50, 128], "contiguous", "non-decreasing"),
    ([0, 128], "ring", "layout must be one of"),
])
def test_context_for_rejects_what_cannot_be_sharded(cu, layout, message):
    with pytest.raises(ValueError, match=message):
        context_for(cu, 2, 0, layout)


SHARED_FIELDS = ("pre_num_ranks", "post_num_ranks", "is_first_rank", "is_last_rank", "layout", "part_len",
                 "front_num_seqs", "pre_num_ranks_by_part", "post_num_ranks_by_part", "is_first_by_part",
                 "is_last_by_part")


@pytest.mark.parametrize("cu", [CU, [0, 5, 5, 60, 64, 128], [0, 128], [0, 32, 64, 96, 128]])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_context_for_is_flas_context(cu, layout):
    """Where flash-linear-attention is installed: the same offsets and counts as FLA's own builder, every rank."""
    cp = pytest.importorskip("fla.ops.cp.context", reason="flash-linear-attention is not installed")
    for rank in range(2):
        ours, theirs = context_for(cu, 2, rank, layout), cp.get_cp_cu_seqlens(torch.tensor(cu), world_size=2,
                                                                                rank=rank, layout=layout)
        assert ours.cu_seqlens.tolist() == theirs.cu_seqlens_cpu.tolist(), (rank, theirs)
        assert all(getattr(ours, n) == getattr(theirs, n) for n in SHARED_FIELDS), (rank, ours, theirs)


def _inputs(cu: list[int], seed: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    T = cu[-1]
    return dict(q=torch.randn(1, T, H, K, generator=g).bfloat16(), k=torch.randn(1, T, H, K, generator=g).bfloat16(),
                v=torch.randn(1, T, HV, K, generator=g).bfloat16(), g=torch.randn(1, T, HV, K, generator=g),
                beta=torch.randn(1, T, HV, generator=g).bfloat16(),
                # weak decays (≈ −0.01 per token): a part's incoming state still weighs at its end
                A_log=(torch.rand(HV, generator=g) * 0.01 + 0.005).log(),
                dt_bias=torch.randn(HV * K, generator=g) / 2, do=torch.randn(1, T, HV, K, generator=g).bfloat16(),
                initial_state=torch.randn(len(cu) - 1, HV, K, K, generator=g) / 8,
                dht=torch.randn(len(cu) - 1, HV, K, K, generator=g))


TOKENS = ("q", "k", "v", "g", "beta")
PARAMS = ("A_log", "dt_bias")
STATES = ("initial_state",)
RANKS_TIMEOUT_S = 600                 # a sharded run takes ≈ 25 s on the CPU emulation


def _step(x: dict, states: bool, **where):
    """o (and the final states) and the gradients of Σ o⊙do (+ Σ ht⊙dht) with respect to every input (and the
    initial states, with `states`)."""
    import kdagen
    leaves = {n: x[n].clone().requires_grad_() for n in TOKENS + PARAMS + (STATES if states else ())}
    o, ht = kdagen.chunk_kda(*(leaves[n] for n in TOKENS), A_log=leaves["A_log"], dt_bias=leaves["dt_bias"],
                             use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                             initial_state=leaves.get("initial_state"), output_final_state=states, **where)
    loss = (o.float() * x["do"].float()).sum() + ((ht * x["dht"]).sum() if states else 0)
    # a rank on which no sequence begins does not read initial_state: its share of the gradient is zero
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True, materialize_grads=True)
    return o.detach(), None if ht is None else ht.detach(), dict(zip(leaves, grads))


def _local(t: torch.Tensor, world: int, rank: int, layout: str) -> torch.Tensor:
    """This rank's tokens of a [1, T, ...] tensor."""
    parts = t.chunk(world if layout == "contiguous" else 2 * world, dim=1)
    return parts[rank] if layout == "contiguous" else torch.cat([parts[rank], parts[2 * world - 1 - rank]], dim=1)


def _global(pieces: list[torch.Tensor], layout: str) -> torch.Tensor:
    """The [1, T, ...] tensor from every rank's tokens (the inverse of _local)."""
    if layout == "contiguous":
        return torch.cat(pieces, dim=1)
    halves = [p.chunk(2, dim=1) for p in pieces]
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim=1)


def _worker(rank: int, world: int, init: str, layout: str, out: str, cu: list[int], device: str,
            states: bool) -> None:
    """One rank: gloo and the CPU emulation (device "cpu"), or NCCL and GPU `rank` (device "cuda")."""
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{init}", rank=rank,
                            world_size=world)
    try:
        import kdagen
        from kdagen.ops import run as ops_run
        if device == "cpu":
            ops_run.run = functools.partial(ops_run.run, emulate=True)
        x = {n: t.to(device) for n, t in _inputs(cu).items()}
        ctx = kdagen.build_cp_context(torch.tensor(cu, device=device), group=dist.group.WORLD, layout=layout)
        local = {n: _local(x[n], world, rank, layout) if n in TOKENS + ("do",) else x[n] for n in x}
        o, ht, grads = _step(local, states, cp_context=ctx)
        every = []
        for t in [o] + [grads[n] for n in TOKENS]:
            pieces = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(pieces, t.contiguous())
            every.append(_global(pieces, layout))
        # a parameter's (or an initial state's) gradient: the sum of every rank's share; a final state: the rank
        # where its sequence ends holds it, the others zero
        summed = [grads[n] for n in PARAMS + (STATES if states else ())] + ([ht] if states else [])
        for t in summed:
            dist.all_reduce(t)
        if rank == 0:
            saved = {"o": every[0], **dict(zip(TOKENS, every[1:])), **{n: grads[n] for n in PARAMS}}
            if states:
                saved.update(final_state=ht, initial_state=grads["initial_state"])
            torch.save({n: t.cpu() for n, t in saved.items()}, out)
    finally:
        dist.destroy_process_group()


def check_sharded_run(tmp_path, layout: str, cu: list[int], device: str, states: bool = False) -> None:
    """Two ranks against the whole batch in this process (kdagen's kernels on `device`); with `states`, initial
    states in and final states out (and the initial states' gradients)."""
    from kdagen.ops import run as ops_run
    out = tmp_path / "sharded.pt"
    ranks = mp.spawn(_worker, args=(2, str(tmp_path / "init"), layout, str(out), cu, device, states), nprocs=2,
                     join=False)
    deadline = time.monotonic() + RANKS_TIMEOUT_S
    while not ranks.join(timeout=2):                 # a collective one rank never reaches would wait forever
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail(f"the two ranks did not finish in {RANKS_TIMEOUT_S} s: a collective left waiting?")
    sharded = torch.load(out)
    x = {n: t.to(device) for n, t in _inputs(cu).items()}
    real = ops_run.run
    if device == "cpu":
        ops_run.run = functools.partial(real, emulate=True)
    try:
        o, ht, grads = _step(x, states, cu_seqlens=torch.tensor(cu, device=device))
    finally:
        ops_run.run = real
    assert sorted(sharded) == sorted({"o": o, **grads, **({"final_state": ht} if states else {})})
    for name, want in {"o": o, **grads, **({"final_state": ht} if states else {})}.items():
        got, want = sharded[name].float(), want.float().cpu()
        err = ((got - want).norm() / want.norm()).item()
        # the two runs round the state differently (here through the maps' bf16 operands): they differ by the
        # kernels' own error, ≤ 3.3e-3 here, inside today's bound against float64 (0.008); the state dropped at a
        # part boundary, or its map applied transposed, reads ≥ 0.04
        assert err < 8e-3, f"{layout}: {name} rel L2 {err:.2e} against the whole batch"


@needs_emulation
@pytest.mark.parametrize("layout, cu, states", [("contiguous", CU, False), ("zigzag", [0, 50, 50, 128], True)],
                         ids=["contiguous", "zigzag-states"])
def test_sharded_run_matches_the_whole_batch(tmp_path, layout, cu, states):
    """Two ranks, each sequence crossing a part boundary: o and every gradient equal the whole batch run in one
    process up to rounding (no warm-up: the state crosses ranks as S = M·S + B). The zigzag case also carries the
    whole batch's initial states in on both ranks and the final states out where each sequence ends (an empty
    sequence's on rank 0), and the initial states' gradients, summed over the ranks. Each sharded run costs ≈ 25 s
    of CPU emulation, so CI runs these two of the four; the GPU test (tests/gpu/test_context_parallel_gpu.py) runs
    all four."""
    check_sharded_run(tmp_path, layout, cu, "cpu", states=states)


def _call_check(ctx, params=None, T=64, B=1, K=64, V=64):
    from kdagen.ops.context_parallel import check
    check(ctx, params or {}, torch.zeros(B, T, 1, K), torch.zeros(B, T, 1, V))


@pytest.mark.parametrize("change, params, shape, message", [
    (dict(group=None), {}, {}, "no process group"),
    (dict(layout="ring"), {}, {}, "layout must be one of"),
    ({}, dict(initial_state=torch.zeros(1, 1, 64, 64)), {}, "initial_state holds 1 sequences; .* 2 sequences"),
    (dict(global_seqs=None), dict(output_final_state=True), {}, "need a context from kdagen.build_cp_context"),
    (dict(global_seqs=None), dict(initial_state=torch.zeros(2, 1, 64, 64)), {}, "need a context from kdagen"),
    ({}, dict(cu_seqlens=torch.tensor([0, 64])), {}, "cu_seqlens differs from cp_context"),
    ({}, {}, dict(B=2), "B = 1"),
    ({}, {}, dict(T=32), "q has 32 tokens, cp_context.cu_seqlens places 64"),
    ({}, {}, dict(V=32), "needs K = V"),
    (dict(part_len=16), {}, {}, "zigzag cp_context with part_len 16"),
])
def test_a_call_the_context_cannot_serve_is_refused_by_name(change, params, shape, message):
    """Rank 0 of a zigzag context over [0, 50, 128] holds 64 tokens; each mismatch is named."""
    ctx = context_for(CU, 2, 0, "zigzag")
    ctx.group = object()
    for name, value in change.items():
        setattr(ctx, name, value)
    with pytest.raises(ValueError, match=message):
        _call_check(ctx, params, **shape)
    ctx = context_for(CU, 2, 0, "zigzag")
    ctx.group = object()
    _call_check(ctx)                                  # the unchanged call passes


def test_the_builder_refuses_what_kdagen_does_not_do():
    from kdagen.ops.context_parallel import build_cp_context
    with pytest.raises(ValueError, match="use_tf32x3_affine_chain must be True"):
        build_cp_context(torch.tensor(CU), object(), use_tf32x3_affine_chain=False)
    with pytest.raises(ValueError, match="conv1d_kernel_size"):
        build_cp_context(torch.tensor(CU), object(), conv1d_kernel_size=4)
    with pytest.raises(ValueError, match="group"):
        build_cp_context(torch.tensor(CU), None)
