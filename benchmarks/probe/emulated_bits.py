"""Whether a rewrite of the wgmma64 forward keeps its outputs bit for bit, on the CPU: `python
benchmarks/probe/emulated_bits.py OUT.pt [REFERENCE.pt]` runs the emulated forward (kdagen.codegen.emulate) of
tests/test_wgmma64_emulated.py's cases and four at K = 128 (lower-bound and softplus gates, partial chunks), saves o,
the final state and every prepare workspace to OUT.pt, and with REFERENCE.pt (the same run on another tree) prints
each tensor that differs in any bit. Session 17 checked its prepare rewrites this way before the GPU saw them."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from test_wgmma64_emulated import CASES, emulated_forward  # noqa: E402

GATES = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
MORE = {"kda_lb_k128": ("kda", dict(GATES, lower_bound=-5.0), dict(T=100, H=1, K=128, V=128)),
        "kda_softplus_k128": ("kda", GATES, dict(T=100, H=1, K=128, V=128)),
        # K = 128 with more chunks and heads: varlen with an empty and a length-1 sequence, and a batch of two
        "kda_lb_varlen_k128": ("kda", dict(GATES, lower_bound=-5.0), dict(H=2, K=128, V=128,
                                                                          cu_seqlens=[0, 130, 130, 131, 260])),
        "kda_softplus_b2_k128": ("kda", GATES, dict(B=2, T=200, H=2, K=128, V=128))}


def run(op: str, options: dict, shape: dict) -> dict:
    """o, the final state and the prepare workspaces of one emulated forward (NaN-poisoned first)."""
    o, ht, ws, _ = emulated_forward(op, options, shape, seed=5)
    return {name: t.clone() for name, t in dict(o=o, ht=ht, **ws).items()}


def differing(got: dict, want: dict) -> list[str]:
    """`case/tensor` for every tensor whose bits differ (or that one side lacks)."""
    found = []
    for case in sorted(set(got) | set(want)):
        a, b = got.get(case, {}), want.get(case, {})
        for name in sorted(set(a) | set(b)):
            same = (name in a and name in b and a[name].shape == b[name].shape
                    and torch.equal(a[name].view(torch.uint8), b[name].view(torch.uint8)))
            if not same:
                found.append(f"{case}/{name}")
    return found


def main(out: str, reference: str | None = None) -> None:
    results = {name: run(*case) for name, case in {**CASES, **MORE}.items()}
    torch.save(results, out)
    if reference is not None:
        diff = differing(results, torch.load(reference))
        print("\n".join(f"differs: {d}" for d in diff) or f"bit for bit: {sum(map(len, results.values()))} tensors")


if __name__ == "__main__":
    main(*sys.argv[1:])
