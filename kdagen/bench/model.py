"""How much work one call does: FLOPs and compulsory HBM bytes (docs/math.md §9).

Per token·value-head counts, with a multiply-add as 2 FLOPs and dense triangles (no block skipping).
A "C-local" GEMM of a chunk (C×C×K or C×C×V) costs 2·C·K or 2·C·V per token; a state GEMM
(K×V per token) costs 2·K·V. The split of every term is in benchmarks/README.md. Compulsory bytes
are what any kernel must move at least once: the inputs read, the outputs written, and the fp32
states once per (sequence, head). The floor of a call is max(FLOPs / matmul rate, bytes / copy
bandwidth), with both ceilings measured in the same run.
"""
from __future__ import annotations

from dataclasses import dataclass

OPS = ("kda", "gdn")
MODES = ("fwd", "bwd", "fwd+bwd")
FORWARD_FORMS = ("fla", "flashkda", "flashqla")
STATE_BYTES = 4  # states and their gradients are fp32


@dataclass(frozen=True)
class Sizes:
    """Bytes per element of each tensor (bf16 = 2, fp32 = 4); gradients share their input's dtype."""
    qk: int = 2
    v: int = 2
    g: int = 2
    beta: int = 2
    o: int = 2


def _check(op: str, mode: str | None = None) -> None:
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def forward_flops(K: int, V: int, C: int, form: str = "fla") -> float:
    """Forward FLOPs per token·head; the same for KDA and GDN.

    fla:      WS, QgS, KdᵀVn (6KV); Mkk, Mqk, W (2CK each), U, Mqk·Vn (2CV each); forward substitution ⅔C².
    flashkda: no W (Vn = A·Diag(β)(V − KE·S)): 4CK + 4CV, the inverse by a Neumann series, 12C².
    flashqla: no W, exact inverse: 4CK + 4CV + ⅔C².
    """
    if form not in FORWARD_FORMS:
        raise ValueError(f"form must be one of {FORWARD_FORMS}, got {form!r}")
    local = 2 * C * (3 * K + 2 * V) if form == "fla" else 2 * C * (2 * K + 2 * V)
    inverse = 12 * C * C if form == "flashkda" else 2 * C * C / 3
    return 6 * K * V + local + inverse


def backward_flops(K: int, V: int, C: int, op: str = "kda", recompute: bool = True) -> float:
    """Backward FLOPs per token·head, FLA's schedule.

    State GEMMs: recompute of h (4KV), dh recurrence (6KV), dq/dk/dW (6KV).
    C-local: recompute W, U (2CK + 2CV); dMqk and Mqkᵀ·dO (4CV); the WY chain (4CK + 4CV); the intra
    dq/dk from dMqk and dMkk (8CK). GDN's backward adds 2CK + 2CV (Mqk recomputed, dO·Vnᵀ formed again).
    The A-chain dM = −Aᵀ·tril(G)·Aᵀ: two C×C×C GEMMs, 4C².
    """
    _check(op)
    if op == "gdn" and not recompute:
        raise ValueError("recompute=False is a chunk_kda option (disable_recompute); GDN always recomputes")
    state = 16 * K * V if recompute else 12 * K * V
    local = 2 * C * (7 * K + 5 * V) if recompute else 2 * C * (6 * K + 4 * V)
    if op == "gdn":
        local += 2 * C * (K + V)
    return state + local + 4 * C * C


def _input_bytes(op: str, K: int, V: int, G: int, s: Sizes) -> float:
    """q, k (shared by G value heads), v, g (K values for KDA, one for GDN), β."""
    g_values = K if op == "kda" else 1
    return 2 * K * s.qk / G + V * s.v + g_values * s.g + s.beta


def forward_bytes(op: str, K: int, V: int, G: int = 1, sizes: Sizes = Sizes()) -> float:
    """Forward bytes per token·head: the inputs read and o written."""
    _check(op)
    return _input_bytes(op, K, V, G, sizes) + V * sizes.o


def backward_bytes(op: str, K: int, V: int, G: int = 1, sizes: Sizes = Sizes()) -> float:
    """Backward bytes per token·head: the inputs and dO read, their gradients written (same dtypes)."""
    _check(op)
    return 2 * _input_bytes(op, K, V, G, sizes) + V * sizes.o


def state_bytes(K: int, V: int, mode: str) -> float:
    """Per (sequence, value head): h0 read and ht written forward; h0, dht read and dh0 written backward."""
    _check("kda", mode)
    passes = {"fwd": 2, "bwd": 3, "fwd+bwd": 5}[mode]
    return passes * K * V * STATE_BYTES


def per_token_head(op: str, mode: str, K: int, V: int, C: int = 64, G: int = 1, sizes: Sizes = Sizes(),
                   form: str = "fla", recompute: bool = True) -> dict:
    """FLOPs and bytes per token·head of one call in `mode` (fwd+bwd is the sum)."""
    _check(op, mode)
    flops = {"fwd": forward_flops(K, V, C, form), "bwd": backward_flops(K, V, C, op, recompute)}
    nbytes = {"fwd": forward_bytes(op, K, V, G, sizes), "bwd": backward_bytes(op, K, V, G, sizes)}
    parts = ("fwd", "bwd") if mode == "fwd+bwd" else (mode,)
    return {"flops": sum(flops[p] for p in parts), "bytes": sum(nbytes[p] for p in parts)}


def call_work(op: str, mode: str, *, tokens: int, sequences: int, HV: int, K: int, V: int, C: int = 64,
              G: int = 1, sizes: Sizes = Sizes(), form: str = "fla", recompute: bool = True) -> dict:
    """Total FLOPs and compulsory bytes of one call over `tokens` tokens (all sequences) and HV value heads."""
    unit = per_token_head(op, mode, K, V, C, G, sizes, form, recompute)
    token_heads = tokens * HV
    return {
        "token_heads": token_heads,
        "flops": unit["flops"] * token_heads,
        "bytes": unit["bytes"] * token_heads + state_bytes(K, V, mode) * sequences * HV,
    }


def floor_seconds(flops: float, nbytes: float, matmul_flops_per_s: float, copy_bytes_per_s: float) -> float:
    """The time no kernel can beat on this machine: the slower of the compute and the memory bound."""
    return max(flops / matmul_flops_per_s, nbytes / copy_bytes_per_s)
