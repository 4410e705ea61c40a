"""What bf16 storage of chunk_bwd's fp32 gradient workspaces would cost in accuracy, on the CPU: `python
benchmarks/probe/precision_bwd_ws.py [SEED ...]` runs tests/wgmma64_backward_cases.py's CPU cases on the emulator
(kdagen.codegen.emulate) as built, then with chunk_bwd's outputs rounded to bf16 as it writes them (the emulated
module's launch of chunk_bwd followed by a rounding of those workspaces in place: the kernels are unchanged, so the
only difference is that rounding), and prints every input gradient's relative L2 error against float64 for each.
At 1×8192×64×128 chunk_bwd writes ≈ 129 KB per (chunk, head) in fp32 and prepare_bwd reads it back (≈ 2.1 GB in
all); the three [C, K] terms in bf16 would move ≈ 0.8 GB less."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from kdagen.codegen import emulate  # noqa: E402
from wgmma64_backward_cases import CASES, grads_checks, run_case  # noqa: E402

SCHEMES = {
    "as built (fp32)": (),
    "d_q/k_decayed, d_k_to_end bf16": ("ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end"),
    "those and dMqk, dMkk bf16": ("ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end", "ws_dMqk", "ws_dMkk"),
}
BUILD = emulate.build


def rounding(names: tuple):
    """emulate.build with chunk_bwd's workspaces `names` rounded to bf16 after each launch of it."""
    def build(plan, recurrence, kernels="forward"):
        module = BUILD(plan, recurrence, kernels)
        params = [p.name for p in plan.kernel("chunk_bwd").params]
        launch = module.launch

        def launch_and_round(kernel_name, grid, block, args, smem_bytes=0):
            launch(kernel_name, grid, block, args, smem_bytes)
            if kernel_name == "chunk_bwd":
                for name in names:
                    t = args[params.index(name)]
                    t.copy_(t.to(torch.bfloat16).to(t.dtype))
        module.launch = launch_and_round
        return module
    return build


def main(seeds: list[int]) -> None:
    try:
        for name in sorted(CASES):
            for seed in seeds:
                for label, names in SCHEMES.items():
                    emulate.build = rounding(names)
                    figures, _ = grads_checks(run_case(CASES[name], seed=seed))
                    print(f"{name} seed {seed} | {label} | {figures}", flush=True)
    finally:
        emulate.build = BUILD


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [13])
