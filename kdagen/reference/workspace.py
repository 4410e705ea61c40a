"""A float64 oracle of what a prepare kernel writes (the forward workspace of the chunked form), per
(sequence, chunk), and the comparison of a kernel's workspace with it: for tests and for debugging a
kernel on a GPU. docs/math.md §4.2 defines the terms."""
from __future__ import annotations

import torch

from .chunked import chunk_terms
from .options import chunk_spans, expand_heads, prologue, scale_of, sequence_spans

TERMS = {"ws_q_decayed": "qd", "ws_k_decayed": "kd", "ws_k_to_end": "kr", "ws_decay_total": "gte", "ws_A": "A",
         "ws_Mqk": "Mqk", "ws_beta": "beta"}
ROW_TERMS = ("ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_beta", "ws_A", "ws_Mqk")
SQUARE_TERMS = ("ws_A", "ws_Mqk")


def reference_workspace(x: dict, opt, chunk: int) -> list[dict]:
    """One dict per (sequence, chunk): the workspace index `chunk`, the valid length `L` and each term by
    workspace name, per value head (q/k decayed and k to end [HV,L,K]; decay total [HV,K] or [HV]; A, Mqk
    [HV,L,L]; beta [HV,L]). x holds float64 inputs like kdagen.reference's."""
    p = prologue(x, opt)
    B, T, HV = x["v"].shape[:3]
    K = x["q"].shape[-1]
    scale = scale_of(opt, K)
    q, k = expand_heads(p["q"], HV), expand_heads(p["k"], HV)
    a = p["a"] if p["a"].dim() == 4 else p["a"][..., None].expand(*p["a"].shape, K)
    out, first = [], 0
    for b, bos, eos in sequence_spans(B, T, x.get("cu_seqlens")):
        spans = chunk_spans(bos, eos, chunk)
        for c, (s, e) in enumerate(spans):
            cut = lambda t: t[b, s:e].transpose(0, 1)  # noqa: E731
            t = chunk_terms(cut(q), cut(k), cut(x["v"]), cut(a), cut(p["beta"]), scale)
            total = t["Gl"].exp()
            out.append({"chunk": first + c, "L": e - s, "span": (b, s, e), "ws_q_decayed": scale * cut(q) * t["E"],
                        "ws_k_decayed": cut(k) * t["E"], "ws_k_to_end": cut(k) * t["R"],
                        "ws_decay_total": total if p["a"].dim() == 4 else total[:, 0], "ws_A": t["A"],
                        "ws_Mqk": t["Mqk"], "ws_beta": cut(p["beta"])})
        first += len(spans)                  # chunk_offsets (varlen) or n·⌈T/C⌉ (fixed length)
    return out


# what a recurrence reading q and k as loaded (qk "raw") has for a decayed tile: a row of ws_row_factors, and the input
RAW_TERMS = {"ws_q_decayed": ("q", 0), "ws_k_decayed": ("k", 1), "ws_k_to_end": ("k", 2)}


def raw_term(factors: torch.Tensor, x: dict, span: tuple, name: str) -> torch.Tensor:
    """A decayed tile [HV, C, K] as the raw recurrence sees it: its number per token (one chunk's ws_row_factors
    [HV, 3, C]) times q or k as loaded, token by token; past the chunk's end the number itself (it must be 0)."""
    key, row = RAW_TERMS[name]
    b, s, e = span
    f = factors.double().cpu()[:, row]
    rows = expand_heads(x[key], x["v"].shape[2])[b, s:e].transpose(0, 1).double().cpu()
    out = f[:, :, None].expand(-1, -1, rows.shape[-1]).clone()
    out[:, :e - s] *= rows
    return out


def workspace_errors(workspace: dict, x64: dict, opt, chunk: int) -> dict:
    """Relative L2 error of each workspace term (by plan name) against reference_workspace, and the largest
    magnitude found in rows past a chunk's end (they must be zero) as "tail_max". Where the workspace has numbers
    per token for the recurrence (ws_row_factors), the decayed tiles they make with q and k (raw_term) are
    compared too, as "<tile> by ws_row_factors" (and alone where the tiles were not kept)."""
    got, want, tail = {}, {}, [0.0]
    factors = workspace.get("ws_row_factors")
    terms = [(name, name) for name in TERMS if name in workspace or name not in RAW_TERMS]
    terms += [(f"{name} by ws_row_factors", name) for name in RAW_TERMS] if factors is not None else []
    for ref in reference_workspace(x64, opt, chunk):
        c, L = ref["chunk"], ref["L"]
        for key, name in terms:
            mine = (workspace[name][c].double().cpu() if key == name
                    else raw_term(factors[c], x64, ref["span"], name))
            if name == "ws_decay_total":      # a family may pad the per-head (or per-channel) totals
                mine = mine[..., 0] if ref[name].dim() < mine.dim() else mine[..., :ref[name].shape[-1]]
            if name in ROW_TERMS:
                tail.append(mine[:, L:].abs().max().item() if L < mine.shape[1] else 0.0)
                mine = mine[:, :L, :L] if name in SQUARE_TERMS else mine[:, :L]
            got.setdefault(key, []).append(mine.reshape(-1))
            want.setdefault(key, []).append(ref[name].reshape(-1))
    errors = {}
    for name in got:
        g, w = torch.cat(got[name]), torch.cat(want[name])
        errors[name] = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    errors["tail_max"] = max(tail)
    return errors
