"""chunk_bwd's worst rows on the GPU for one case and seed (tests/wgmma64_backward_cases.py): for each output, the
rows with the largest error against chunk_oracle, beside the row's norm, the rows' RMS and the norm of the row's
terms in absolute value (for ws_d_k_decayed, |bf16(β⊙dX)|·|Sᵀ|): an error that a bf16 rounding of β⊙dX falling the
other way explains is at most 2^-8 of the last. Usage: python benchmarks/probe/chunk_rows.py CASE SEED"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from wgmma64_backward_cases import C, GPU_CASES, chunk_rows, run_case, spans_of  # noqa: E402


def d_k_decayed_terms(result: dict, spec: tuple) -> torch.Tensor:
    """‖|bf16(β⊙dX)|·|Sᵀ|‖ per row of ws_d_k_decayed [chunks, HV, C]."""
    ws, dstate = result["ws"], result["debug"]["dstate"]
    f = {n: ws[n].double().cpu() for n in ("ws_k_to_end", "ws_A", "ws_Mqk", "ws_beta", "ws_states")}
    d_o = result["do"].reshape(-1, *result["do"].shape[-2:]).double().cpu()
    out, row = [], 0
    for s, e in spans_of(spec[2]):
        for c in range(-(-(e - s) // C)):
            w = {n: t[row] for n, t in f.items()}
            dO = chunk_rows(d_o, s + c * C, min(C, e - s - c * C))
            S, dh = w["ws_states"].transpose(1, 2), dstate[row].double().cpu().transpose(1, 2)
            dVn = w["ws_Mqk"].transpose(1, 2) @ dO + w["ws_k_to_end"] @ dh
            bdX = (w["ws_beta"][..., None] * (w["ws_A"].transpose(1, 2) @ dVn)).to(torch.bfloat16).double()
            out.append((bdX.abs() @ S.transpose(1, 2).abs()).norm(dim=-1))
            row += 1
    return torch.stack(out)


def main(name: str, seed: int) -> None:
    spec = GPU_CASES[name]
    result = run_case(spec, seed, device="cuda")
    want, got = result["chunk"], result["debug"]
    for n in ("ws_d_k_decayed", "ws_d_q_decayed", "ws_d_k_to_end"):
        g, w = got[n][:result["chunks"]].double().cpu(), want[n].double().cpu()
        rows = w.norm(dim=-1)
        rms = w.flatten(0, -2).norm(dim=-1).pow(2).mean().sqrt()
        err = (g - w).norm(dim=-1)
        scale = rows.clamp_min(rms)
        worst = torch.topk((err / scale).flatten(), 3).indices
        terms = d_k_decayed_terms(result, spec) if n == "ws_d_k_decayed" else None
        for k in worst.tolist():
            idx = torch.unravel_index(torch.tensor(k), err.shape)
            line = (f"{n} row {tuple(int(i) for i in idx)}: error {err[idx]:.3e}, row norm {rows[idx]:.3e}, "
                    f"rows' RMS {rms:.3e}, error / scale {err[idx] / scale[idx]:.2e}")
            if terms is not None:
                line += f", |terms| {terms[idx]:.3e}, error / |terms| {err[idx] / terms[idx]:.2e}"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
