"""Context parallelism on two GPUs, kdagen beside flash-linear-attention:
`torchrun --nproc-per-node 2 benchmarks/probe/cp_probe.py check` and `... time [T H D]` (default 131072 16 128).

check: packed batches whose sequences cross the rank boundaries (both layouts): o and every gradient of the
  sharded run (each rank its tokens, through `cp_context`) against float64 on the whole batch, beside the same
  library's single-GPU run on the whole batch; for kdagen (its own context and FLA's), and for FLA's CP where FLA
  runs (CP_PROBE_LIBS=kdagen leaves FLA's kernels out); whether kdagen's sharded run with FLA's context equals
  its run with kdagen's own, bit for bit; and a case with initial states in and final states out (an empty
  sequence among them), which only kdagen's context serves. FLA runs with one configuration per kernel (its
  autotuning at these shapes takes minutes per rank).
time: forward + backward of one sequence of T tokens, H heads (the bench's lb·σ KDA inputs), kdagen: the two ranks
  sharded (contiguous) against rank 0 alone on the whole sequence; the collectives alone
  (kdagen's all_gather of the summaries and the all_reduce of their gradient); the step's peak memory above what
  was allocated before it (inputs, gradients' leaves), rank 0. CUDA
  events, median of 5 after a warm-up; a step's time is the slower rank's.
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kdagen  # noqa: E402
from kdagen import reference  # noqa: E402
from kdagen.ops import reference_options  # noqa: E402
from kdagen.reference.inputs import make_inputs  # noqa: E402

TOKENS = ("q", "k", "v", "g", "beta")
PARAMS = ("A_log", "dt_bias")
BOUNDS = {"o": 0.005, "q": 0.008, "k": 0.008, "v": 0.008, "g": 0.02, "beta": 0.02, "A_log": 0.02, "dt_bias": 0.02,
          "final_state": 0.005, "initial_state": 0.02}
COLUMNS = ("o",) + ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "final_state", "initial_state")
CASES = {
    # weak decay (≈ −1e-3 per token): the state entering a rank still weighs at the rank's last token
    "kda-weak-decay": ("kda", dict(use_qk_l2norm_in_kernel=True), dict(H=2, G=1, K=128)),
    "kda-gate-lb-gva": ("kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True,
                                    use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
                        dict(H=1, G=2, K=128)),
    "gdn-weak-decay": ("gdn", dict(use_qk_l2norm_in_kernel=True), dict(H=2, G=1, K=64)),
    # initial states in, final states out (kdagen's context only; FLA refuses both under CP), an empty sequence
    "kda-weak-decay-states": ("kda", dict(use_qk_l2norm_in_kernel=True), dict(H=2, G=1, K=128)),
}
CU = [0, 3000, 3001, 8192]
CU_STATES = [0, 3000, 3001, 3001, 8192]
# CP_PROBE_LIBS=kdagen: FLA's kernels left out (its contexts still built where FLA is installed)
LIBS = os.environ.get("CP_PROBE_LIBS", "kdagen,fla").split(",")
RUNS = [(lib, ctx) for lib, ctx in (("kdagen", "kdagen"), ("kdagen", "fla"), ("fla", "fla")) if lib in LIBS]
RANK, WORLD = 0, 1


def say(*args) -> None:
    if RANK == 0:
        print(*args, flush=True)


def fns(lib: str):
    if lib == "kdagen":
        return {"kda": kdagen.chunk_kda, "gdn": kdagen.chunk_gated_delta_rule}, kdagen.build_cp_context
    from fla.ops.cp import build_cp_context
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.kda import chunk_kda
    return {"kda": chunk_kda, "gdn": chunk_gated_delta_rule}, build_cp_context


def local(t: torch.Tensor, layout: str) -> torch.Tensor:
    """This rank's tokens of a [1, T, ...] tensor."""
    parts = t.chunk(WORLD if layout == "contiguous" else 2 * WORLD, dim=1)
    return parts[RANK] if layout == "contiguous" else torch.cat([parts[RANK], parts[2 * WORLD - 1 - RANK]], dim=1)


def whole(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The [1, T, ...] tensor from every rank's tokens (the inverse of `local`)."""
    pieces = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(pieces, t.contiguous())
    if layout == "contiguous":
        return torch.cat(pieces, dim=1)
    halves = [p.chunk(2, dim=1) for p in pieces]
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim=1)


def step(fn, x: dict, do: torch.Tensor, options: dict, dht=None, **where):
    """o, the final states (with `dht`: initial states in, final states out) and the gradients of Σ o⊙do
    (+ Σ ht⊙dht) with respect to every input."""
    names = TOKENS + PARAMS + (("initial_state",) if dht is not None else ())
    leaves = {n: x[n].detach().clone().requires_grad_() for n in names if n in x}
    o, ht = fn(*(leaves[n] for n in TOKENS), **{n: leaves[n] for n in names[5:] if n in leaves}, **options,
               output_final_state=dht is not None, **where)
    loss = (o.float() * do.float()).sum() + ((ht * dht).sum() if dht is not None else 0)
    # a rank on which no sequence begins does not read initial_state: its share of that gradient is zero
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True, materialize_grads=True)
    return o.detach(), ht, dict(zip(leaves, grads))


def rel_l2(got, want, scale=None) -> float:
    got = got.detach().double().cpu()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / (want if scale is None else scale).norm().clamp_min(1e-30))


def check() -> None:
    say("| case | layout | run | " + " | ".join(COLUMNS) + " | in bounds |")
    say("| --- | --- | --- |" + " ---: |" * len(COLUMNS) + " --- |")
    for name, (op, options, shape) in CASES.items():
        states = name.endswith("-states")
        cu_list = CU_STATES if states else CU
        opt = reference_options(op, **options, **({"A_log": "drawn"} if options.get("use_gate_in_kernel") else {}))
        x = make_inputs(opt, **shape, V=shape["K"], cu_seqlens=cu_list, initial_state=states,
                        generator=torch.Generator().manual_seed(5))
        for n in TOKENS:
            x[n] = x[n].to(torch.bfloat16).double()
        if "weak" in name:
            x["g"] = (-1e-3 * torch.rand(x["g"].shape, dtype=torch.float64,
                                         generator=torch.Generator().manual_seed(6))).to(torch.bfloat16).double()
        ref_x = {n: t for n, t in x.items()}
        o_ref, ht_ref = reference.chunked(ref_x, opt, 64) if RANK == 0 else (torch.zeros(1), None)
        do = torch.randn(1, cu_list[-1], shape["H"] * shape["G"], shape["K"], dtype=torch.float64,
                         generator=torch.Generator().manual_seed(7))
        N, HV, K = len(cu_list) - 1, shape["H"] * shape["G"], shape["K"]
        dht = torch.randn(N, HV, K, K, dtype=torch.float64, generator=torch.Generator().manual_seed(8)) if states \
            else None
        grads_ref = reference.chunked_backward(ref_x, opt, do, dht, 64) if RANK == 0 else {}
        if states and RANK == 0:
            grads_ref["final_state"] = ht_ref
        dev = {n: x[n].cuda().to(torch.bfloat16 if n in TOKENS else torch.float32)
               for n in TOKENS + PARAMS + ("initial_state",) if n in x}
        do_dev = do.cuda().to(torch.bfloat16)
        dht_dev = None if dht is None else dht.cuda().float()
        cu = torch.tensor(cu_list, device="cuda")
        for layout in ("contiguous", "zigzag"):
            sharded = {}
            for lib, ctx_lib in RUNS:
                label = f"{lib} sharded" + (" (FLA's context)" if lib != ctx_lib else "")
                try:
                    ops, _ = fns(lib)
                    _, build = fns(ctx_lib)
                    ctx = build(cu, group=dist.group.WORLD, cu_seqlens_cpu=torch.tensor(cu_list), layout=layout)
                    mine = {n: local(t, layout) if n in TOKENS else t for n, t in dev.items()}
                    o, ht, grads = step(ops[op], mine, local(do_dev, layout), options, dht_dev, cp_context=ctx)
                    got = {"o": whole(o, layout), **{n: whole(grads[n], layout) for n in TOKENS}}
                    # summed over the ranks: a parameter's and an initial state's gradient (each rank's share),
                    # the final states (each on the rank where its sequence ends)
                    for n, t in [*grads.items(), ("final_state", ht)]:
                        if n not in TOKENS and t is not None:
                            t = t.detach().contiguous()
                            dist.all_reduce(t)
                            got[n] = t
                except Exception as exc:               # FLA refuses some configurations on this image
                    say(f"| {name} | {layout} | {label} | refused: {type(exc).__name__}: {str(exc)[:100]} |")
                    continue
                sharded[label] = got
                report(name, layout, label, got, o_ref, grads_ref, x, opt)
            mine, theirs = sharded.get("kdagen sharded"), sharded.get("kdagen sharded (FLA's context)")
            if mine is not None and theirs is not None:
                same = all(torch.equal(mine[n], theirs[n]) for n in mine)
                say(f"| {name} | {layout} | kdagen: own context vs FLA's, bitwise equal: {same} |")
        if RANK == 0:
            for lib in LIBS:
                try:
                    ops, _ = fns(lib)
                    o, ht, grads = step(ops[op], dev, do_dev, options, dht_dev, cu_seqlens=cu)
                except Exception as exc:
                    say(f"| {name} | - | {lib} one GPU | refused: {type(exc).__name__}: {str(exc)[:100]} |")
                    continue
                report(name, "-", f"{lib} one GPU", {"o": o, **grads, "final_state": ht}, o_ref, grads_ref, x, opt)
        dist.barrier()


def report(name, layout, label, got, o_ref, grads_ref, x, opt) -> None:
    if RANK != 0:
        return
    import test_runtime_ops_gpu as ops_gpu                      # the GPU tests' measure of parameter gradients
    scales = ops_gpu.grad_scales(x, opt, grads_ref)
    errors = {"o": rel_l2(got["o"], o_ref)}
    errors.update({n: rel_l2(got[n], grads_ref[n], scales.get(n)) for n in COLUMNS[1:]
                   if grads_ref.get(n) is not None and got.get(n) is not None})
    cells = " | ".join(f"{errors[n]:.2e}" if n in errors else "-" for n in COLUMNS)
    ok = all(e <= BOUNDS[n] for n, e in errors.items())
    say(f"| {name} | {layout} | {label} | {cells} | {ok} |")


def timed(fn, repeats: int = 5) -> float:
    """Median ms of fn over the ranks that run it: each repeat starts together and counts the slower rank."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        t = torch.tensor([start.elapsed_time(end)], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.item())
    return statistics.median(times)


def time_cp(T: int, H: int, D: int) -> None:
    from kdagen.bench.cases import VARIANTS, Shape
    from kdagen.bench.inputs import make_set
    variant = VARIANTS["kda_lb"]
    s = make_set(variant, Shape(1, T, H, D), device="cuda", seed=0)
    x = {n: t.detach() for n, t in s.inputs.items()}
    kw = {**variant.call_kwargs(), "output_final_state": False, **{n: x[n] for n in PARAMS}}
    do = torch.randn_like(x["v"])
    cu = torch.tensor([0, T], device="cuda")
    say(f"kdagen, forward + backward, KDA lb·σ, 1×{T}×{H}×{D}: {WORLD} ranks (contiguous) against rank 0 alone")
    say("| run | ms | step's peak GB above its inputs (rank 0) |")
    say("| --- | ---: | ---: |")
    leaves = {n: x[n].clone().requires_grad_() for n in TOKENS}
    mine = {n: local(x[n], "contiguous").clone().requires_grad_() for n in TOKENS}
    ctx = kdagen.build_cp_context(cu, group=dist.group.WORLD, cu_seqlens_cpu=torch.tensor([0, T]))
    my_do = local(do, "contiguous")

    def sharded():
        o, _ = kdagen.chunk_kda(*(mine[n] for n in TOKENS), **kw, cp_context=ctx)
        torch.autograd.grad(o, list(mine.values()), my_do)

    def alone():
        if RANK == 0:
            o, _ = kdagen.chunk_kda(*(leaves[n] for n in TOKENS), **kw, cu_seqlens=cu)
            torch.autograd.grad(o, list(leaves.values()), do)

    for label, run in ((f"{WORLD} GPUs, {T // WORLD} tokens each", sharded), ("1 GPU", alone)):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        ms = timed(run)
        say(f"| {label} | {ms:.2f} | {(torch.cuda.max_memory_allocated() - base) / 1e9:.2f} |")
    summary = torch.randn(1, 2, H, D, D, device="cuda")           # one part's (M, B): what kdagen exchanges
    gathered = [torch.empty_like(summary) for _ in range(WORLD)]
    grad = torch.randn(WORLD, *summary.shape, device="cuda")
    comm = {"all_gather of the summaries (fwd)": lambda: dist.all_gather(gathered, summary),
            "all_reduce of their gradient (bwd)": lambda: dist.all_reduce(grad)}
    for label, run in comm.items():
        say(f"| nccl {label}, {summary.numel() * 4 / 1e6:.1f} MB per rank | {timed(run, 20):.3f} | |")


def main() -> None:
    global RANK, WORLD
    RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    try:
        if sys.argv[1] == "check":
            from fla_untuned import first_config_only           # tests/fla_untuned.py
            first_config_only()
            check()
        else:
            T, H, D = (int(a) for a in sys.argv[2:5]) if len(sys.argv) > 2 else (131072, 16, 128)
            time_cp(T, H, D)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
