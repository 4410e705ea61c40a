"""chunk_bwd's worst rows on the GPU for one case and seed (tests/wgmma64_backward_cases.py): for each output, the
rows with the largest error against chunk_oracle relative to the larger of the row's norm and the rows' RMS, beside
the norm of the row's terms in absolute value (chunk_oracle's "terms"): an error that a bf16 rounding falling the
other way explains is at most 2^-8 of the last. Usage: python benchmarks/probe/chunk_rows.py CASE SEED"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from wgmma64_backward_cases import CHUNK_OUTPUTS, GPU_CASES, run_case  # noqa: E402


def main(name: str, seed: int) -> None:
    result = run_case(GPU_CASES[name], seed, device="cuda")
    want, got = result["chunk"], result["debug"]
    for n in CHUNK_OUTPUTS:
        g, w = got[n][:result["chunks"]].double().cpu(), want[n].double().cpu()
        rows, terms = w.norm(dim=-1), want["terms"][n].double().cpu().norm(dim=-1)
        rms = w.flatten(0, -2).norm(dim=-1).pow(2).mean().sqrt()
        err = (g - w).norm(dim=-1)
        scale = rows.clamp_min(rms)
        for k in torch.topk((err / scale).flatten(), 3).indices.tolist():
            at = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), err.shape))
            print(f"{n} row {at}: error {err[at]:.3e}, row norm {rows[at]:.3e}, rows' RMS {rms:.3e}, "
                  f"error / scale {err[at] / scale[at]:.2e}, |terms| {terms[at]:.3e}, "
                  f"error / |terms| {err[at] / terms[at]:.2e}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
