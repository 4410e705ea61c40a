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
from wgmma64_backward_cases import CHUNK_OUTPUTS, GPU_CASES, row_scales, run_case  # noqa: E402


def main(name: str, seed: int) -> None:
    result = run_case(GPU_CASES[name], seed, device="cuda")
    want, got = result["chunk"], result["debug"]
    for n in CHUNK_OUTPUTS:
        w = want[n]
        err, scale = row_scales(got[n][:result["chunks"]], w)
        rows = w.double().cpu().flatten(0, -2).norm(dim=-1)
        terms = want["terms"][n].double().cpu().flatten(0, -2).norm(dim=-1)
        for k in torch.topk(err / scale, 3).indices.tolist():
            at = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), w.shape[:-1]))
            print(f"{n} row {at}: error {err[k]:.3e}, row norm {rows[k]:.3e}, scale (norm or RMS) {scale[k]:.3e}, "
                  f"error / scale {err[k] / scale[k]:.2e}, |terms| {terms[k]:.3e}, "
                  f"error / |terms| {err[k] / terms[k]:.2e}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
