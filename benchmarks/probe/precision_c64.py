"""Where a chunk-64 forward on bf16 tensor cores loses accuracy, before writing it (CPU, float64).

Simulates the Hopper forward design (docs/kernels.md, "Hopper forward"): a token-parallel prepare that
writes qd, kd, kr (bf16), A = (I + Mkk)^-1 and Mqk per 64-token chunk, and a head-parallel recurrence whose
products take bf16 operands with fp32 accumulation, the state Sᵀ chained as a bf16 register operand.
Each rounding point can be switched between bf16, tf32, bf16 hi+lo ("x2": hi + lo, the product dropping
only lo·lo) and exact; the script prints o's relative L2 error against the float64 reference for the
bench's input distributions, so the cheapest scheme under the bound (and under FLA's error) can be chosen.
The "WY" schemes simulate the step with A applied in the prepare (w = A·diag(β)·kd, u = A·diag(β)·v, then
Vn = u − w·S), rounding w and u as named. Arguments select schemes by name prefix.

    python benchmarks/probe/precision_c64.py ["kernel today" WY ...]
"""
from __future__ import annotations

import itertools
import sys

import torch

from kdagen.reference import Options, recurrent
from kdagen.reference.options import prologue, scale_of

C = 64


def bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


def tf32(x):
    """Round to nearest even on a 10-bit mantissa (what the tensor cores read from fp32 storage)."""
    f = x.to(torch.float32).contiguous()
    i = f.view(torch.int32)
    i = (i + 0x0FFF + ((i >> 13) & 1)) & ~0x1FFF
    return i.view(torch.float32).to(x.dtype)


def fp32(x):
    return x.to(torch.float32).to(x.dtype)


ROUND = {"bf16": bf16, "tf32": tf32, "f32": fp32, "exact": lambda x: x}


def operand(x, how):
    """The value a tensor-core product sees for an operand stored `how` ("x2": bf16 hi + bf16 lo)."""
    if how == "x2":
        hi = bf16(x)
        return hi + bf16(x - hi)
    return ROUND[how](x)


def run(x, opt, scheme):
    """o of the chunk-64 design under a rounding scheme (dict: point -> how)."""
    p = prologue(x, opt)
    q, k, v, a, beta = p["q"], p["k"], x["v"], p["a"], p["beta"]
    B, T, HV, V = v.shape
    K = q.shape[-1]
    scale = scale_of(opt, K)
    a = a if a.dim() == 4 else a[..., None].expand(B, T, HV, K)
    q, k = fp32(q), fp32(k)                                  # the prologue runs in fp32
    o = torch.zeros_like(v)
    for b in range(B):
        S = torch.zeros(HV, V, K, dtype=torch.float64)       # Sᵀ, fp32 accumulators
        for s in range(0, T, C):
            e = min(s + C, T)
            qc, kc, vc, ac, bc = (t[b, s:e].transpose(0, 1) for t in (q, k, v, a, beta))
            G = ac.cumsum(1)
            diff = G[:, :, None, :] - G[:, None, :, :]
            L = e - s
            incl = torch.ones(L, L, dtype=torch.bool).tril()
            F = torch.where(incl[..., None], diff.masked_fill(~incl[..., None], 0).exp(), diff.new_zeros(()))
            qk = operand(qc, scheme["k1_products"]), operand(kc, scheme["k1_products"])
            Mqk = scale * torch.einsum("hid,hjd,hijd->hij", qk[0], qk[1], F)
            Mkk = bc[..., None] * torch.einsum("hid,hjd,hijd->hij", qk[1], qk[1], F).tril(-1)
            eye = torch.eye(L, dtype=q.dtype).expand_as(Mkk)
            A32 = fp32(torch.linalg.solve_triangular(eye + Mkk, eye, upper=False, unitriangular=True))
            A, Mqk = operand(A32, scheme["A"]), operand(Mqk, scheme["Mqk"])
            E, R = G.exp(), (G[:, -1:] - G).exp()
            qd, kd, kr = bf16(scale * qc * E), bf16(kc * E), bf16(kc * R)
            gte = fp32(G[:, -1].exp())
            Sb = operand(S, scheme["S"])
            Q = Sb @ qd.transpose(1, 2)
            if scheme.get("form") == "wy":                   # the prepare applies A: w = A·diag(β)·kd, u = A·diag(β)·v
                w = operand(fp32(A32 @ (bc[..., None] * kd)), scheme["w"])
                u = operand(fp32(A32 @ (bc[..., None] * vc)), scheme["u"])
                Vn = fp32(u.transpose(1, 2) - Sb @ w.transpose(1, 2))
            else:
                P = Sb @ kd.transpose(1, 2)                  # Pᵀ [V, L]
                X = fp32(bc[:, None, :] * (vc.transpose(1, 2) - P))
                Vn = fp32(operand(X, scheme["X"]) @ A.transpose(1, 2))
            Vo = operand(Vn, scheme["Vn"])
            O = Q + Vo @ Mqk.transpose(1, 2)
            S = fp32(S * gte[:, None, :] + operand(Vn, scheme["Vn_state"]) @ kr)
            o[b, s:e] = bf16(O).transpose(1, 2).transpose(0, 1)
    return o


def inputs(op, gate, T=1024, H=2, D=128, seed=0):
    """The bench's distributions (kdagen.bench.inputs), float64."""
    g = torch.Generator().manual_seed(seed)
    n = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).bfloat16().double()  # noqa: E731
    x = {"q": n(1, T, H, D), "k": n(1, T, H, D), "v": n(1, T, H, D), "g": n(1, T, H, D) if op == "kda" else n(1, T, H),
         "beta": n(1, T, H), "A_log": (1 + 15 * torch.rand(H, generator=g, dtype=torch.float64)).log(),
         "dt_bias": torch.randn(H * D if op == "kda" else H, generator=g, dtype=torch.float64).float().double()}
    opt = Options(op=op, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                  lower_bound=-5.0 if gate == "lb" else None)
    return x, opt


def main():
    points = ("k1_products", "A", "Mqk", "S", "X", "Vn", "Vn_state")
    base = dict(k1_products="x2", A="bf16", Mqk="bf16", S="bf16", X="bf16", Vn="bf16", Vn_state="bf16")
    variants = {"all bf16": {}, "A,Mqk tf32": dict(A="tf32", Mqk="tf32"),
                "A,Mqk tf32; X,Vn tf32": dict(A="tf32", Mqk="tf32", X="tf32", Vn="tf32"),
                "Vn_state x2": dict(Vn_state="x2"),
                "A,Mqk tf32; X,Vn tf32; Vn_state x2": dict(A="tf32", Mqk="tf32", X="tf32", Vn="tf32", Vn_state="x2"),
                "A,Mqk tf32; Vn_state x2": dict(A="tf32", Mqk="tf32", Vn_state="x2"),
                "S x2": dict(S="x2"), "everything exact but o": {p: "exact" for p in points},
                "kernel today: X, Vn x2": dict(X="x2", Vn="x2"),
                "kernel today, Mqk/Mkk operands tf32": dict(X="x2", Vn="x2", k1_products="tf32"),
                "kernel today, Mqk/Mkk operands bf16": dict(X="x2", Vn="x2", k1_products="bf16"),
                "WY: w bf16, u bf16; Vn x2": dict(form="wy", w="bf16", u="bf16", Vn="x2"),
                "WY: w bf16, u x2; Vn x2": dict(form="wy", w="bf16", u="x2", Vn="x2"),
                "WY: w x2, u x2; Vn x2": dict(form="wy", w="x2", u="x2", Vn="x2")}
    if len(sys.argv) > 1:                                    # a selection of the schemes by name prefix
        variants = {n: c for n, c in variants.items() if any(n.startswith(a) for a in sys.argv[1:])}
    cases = list(itertools.product(("kda", "gdn"), ("lb", "sp")))
    cases = [c for c in cases if not (c[0] == "gdn" and c[1] == "lb")]
    print("o relative L2 error against float64, chunk 64, T=1024 H=2 D=128, bench inputs")
    print(f"{'scheme':44s}" + "".join(f"{op + ' ' + gate:>12s}" for op, gate in cases))
    refs = {}
    for case in cases:
        x, opt = inputs(*case)
        refs[case] = (x, opt, recurrent(x, opt)[0])
    for name, change in variants.items():
        scheme = {**base, **change}
        row = []
        for case in cases:
            x, opt, ref = refs[case]
            o = run(x, opt, scheme)
            row.append(((o - ref).norm() / ref.norm()).item())
        print(f"{name:44s}" + "".join(f"{e:12.2e}" for e in row))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
