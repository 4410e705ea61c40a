"""Per-head parameter gradients (dA_log, ddt_bias) of the GPU test case gdn-gate-l2-bsig on the CPU emulator, seed by
seed, for the kdagen tree at argv[1]: `python benchmarks/probe/param_grad_seeds.py <tree> <first seed> <end seed>`
(run from outside the tree). The test draws do and dht from the global RNG; here they come from the seed.
"""
import functools
import sys

import torch

root = sys.argv[1]
sys.path[:0] = [root, root + "/tests"]

import kdagen  # noqa: E402
import test_runtime_ops_gpu as t  # noqa: E402
from kdagen import reference  # noqa: E402
from kdagen.ops import reference_options, run as ops_run  # noqa: E402

assert kdagen.__file__.startswith(root), kdagen.__file__
ops_run.run = functools.partial(ops_run.run, emulate=True)
op, options, shape = "gdn", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True), dict(T=70, H=2, G=1, K=128)
options = {"output_final_state": True, **options}
for seed in range(int(sys.argv[2]), int(sys.argv[3])):
    x = t.case_inputs(op, options, **shape, seed=seed)
    opt = reference_options(op, **options, **{n: x[n] for n in ("A_log", "dt_bias") if n in x})
    o_ref, ht_ref = reference.chunked(x, opt, 16)
    gen = torch.Generator().manual_seed(seed)
    do, dht = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64), torch.randn(ht_ref.shape, generator=gen, dtype=torch.float64)
    g_ref = reference.chunked_backward(x, opt, do, dht, 16)
    dev = {n: x[n].to(torch.bfloat16 if n in t.IO else torch.float32).requires_grad_() for n in (*t.IO, *t.PARAMS) if n in x}
    o, ht = kdagen.chunk_gated_delta_rule(*(dev[n] for n in t.IO), **{n: dev[n] for n in t.PARAMS if n in dev}, **options)
    ((o.float() * do.float()).sum() + (ht * dht.float()).sum()).backward()
    e = {n: t.rel_l2(dev[n].grad, w) for n, w in g_ref.items() if w is not None and n in ("A_log", "dt_bias")}
    if hasattr(t, "grad_scales"):     # the test's measure since session 5: against the terms' magnitudes
        scales = t.grad_scales(x, opt, g_ref)
        e.update({f"{n} (terms)": t.rel_l2(dev[n].grad, g_ref[n], scales[n]) for n in ("A_log", "dt_bias")})
    print(seed, " ".join(f"{n}={v:.4f}" for n, v in e.items()), flush=True)
