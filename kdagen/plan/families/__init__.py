"""Kernel families, and the choice between them (docs/plan.md §6).

`choose(problem, directions, name, ranking)` returns the family that plans a problem: the one named
(argument, else KDAGEN_FAMILY) when it supports the problem, else the highest-ranked family that does. The
reasons the others give are kept, so `kdagen plan` can say why a family was passed over.

The rank is a family's priority, except in two classes of call (`ranking`), where a family may set its own rank:
"few_pairs", an inference call with at most few_pairs_limit(K, rank kind) (sequence, value head) pairs, or any
number (known or not) where that limit is None — there wgmma64's forward is measured faster (with few pairs its
64-token chain of chunk steps is the reason; at head dim 128 also its prepare, at every number of pairs measured:
benchmarks/NOTES.md, sessions 8, 9, 17 and 21) — and "training", a call with gradients over at least
TRAINING_PAIRS pairs at its head dim, where wgmma64's step is measured faster (sessions 13 and 15).
"""
from __future__ import annotations

import os

from ..problem import PlanError, Problem
from .base import IO_INPUTS, Family, qk_row_scaled
from .mma16 import FAMILY as MMA16
from .wgmma64 import FAMILY as WGMMA64

FAMILIES: dict[str, Family] = {f.name: f for f in (WGMMA64, MMA16)}
ENV = "KDAGEN_FAMILY"
# The most (sequence, value head) pairs an inference call may have to rank for few pairs, by (decay kind, head dim);
# None: any number. From the H200's kernel times (prepare + recurrence, device time; benchmarks/NOTES.md, sessions
# 9 and 17): at K = 128 wgmma64 leads mma16 at 4, 16, 64 and 256 pairs for a per-channel decay (256 pairs: 1.63
# against 1.90 ms, lower-bound gate; 2.22 against 2.67, softplus), so at every count; for a per-head decay (GDN) it
# led up to 64 and trailed at 256 (1.49 against 1.38) until its recurrence took q and k as loaded (session 21, run 2:
# 1.158 against 1.378 ms at 256 pairs), so at every count now where it can ("scalar"; "scalar_split", a per-head
# decay whose query or key is not a bf16 input or its l2norm, keeps the decayed form and the old limit: rank_kind).
# At K = 64 (session 22, run 1: family_timing at 4×4096×16×64 and 8×4096×32×64) wgmma64's kernels lead at 64 pairs
# (softplus 0.335 against 0.411 ms, lb 0.232 against 0.290, GDN 0.222 against 0.265) and trail at 256 (lb 0.760
# against 0.678, GDN 0.701 against 0.589), and since its calls' tensor maps are slots of the prepared launches its
# calls with their host paths lead at 64 too (GDN 0.461 against 0.507 ms, lb 0.474 against 0.538; before, 0.663
# against 0.498): so 64 for the measured kinds. Every other pair keeps session 8's limit of 16 (UNMEASURED_FEW_PAIRS).
FEW_PAIRS = {("vector", 128): None, ("scalar", 128): None, ("scalar_split", 128): 64, ("vector", 64): 64,
             ("scalar", 64): 64}
UNMEASURED_FEW_PAIRS = 16
# The fewest (sequence, value head) pairs a training call needs to rank as "training", by head dim. Measured on the
# H200 (benchmarks/NOTES.md, sessions 13 and 15): wgmma64's step is 1.6–1.8× shorter than mma16's at 16 and 64
# pairs at K = 128, about as long at K = 64 (1.64 against 1.73 ms); at 4 pairs (1×65536×4×128) both cut into
# segments (docs/segments.md §6), wgmma64's 2.56 ms against mma16's 5.12. Fewer than 16 pairs at K = 64 were not
# timed, so that limit stays, as for other head dims.
TRAINING_PAIRS = {64: 16, 128: 1}


def rank_kind(r) -> str:
    """How a recurrence's inference calls rank (FEW_PAIRS): its decay kind ("vector": per channel, "scalar": per
    head), "scalar_split" for a per-head decay whose query or key is not a bf16 input or its l2norm (wgmma64 then
    cannot take q and k as loaded: base.qk_row_scaled)."""
    if r.decay_kind != "scalar":
        return r.decay_kind
    dtype_of = lambda n: "bf16" if n in IO_INPUTS else r.graph.nodes[n]["dtype"]  # noqa: E731 (Problem's io dtype)
    return "scalar" if qk_row_scaled(r, dtype_of) else "scalar_split"


def few_pairs_limit(head_dim: int, kind: str) -> int | None:
    """The few-pairs limit of a rank kind (rank_kind) at a head dim (FEW_PAIRS; None: any number of pairs;
    UNMEASURED_FEW_PAIRS where the pair was not measured)."""
    return FEW_PAIRS.get((kind, head_dim), UNMEASURED_FEW_PAIRS)


def training_pairs_limit(head_dim: int) -> int:
    """The training limit at a head dim (TRAINING_PAIRS; the largest where the head dim was not measured)."""
    return TRAINING_PAIRS.get(head_dim, max(TRAINING_PAIRS.values()))


def ranking(directions, pairs: int | None, head_dim: int, kind: str) -> str:
    """How a call running `directions` over `pairs` (sequence, value head) pairs (None: unknown) of head dim
    `head_dim` and a recurrence of rank kind `kind` (rank_kind) ranks families: "few_pairs" (an inference call with
    at most few_pairs_limit(head_dim, kind)), "training" (a call with gradients over at least
    training_pairs_limit(head_dim)), else "default"."""
    if tuple(directions) == ("forward",):
        limit = few_pairs_limit(head_dim, kind)
        if limit is None:                       # any number of pairs: known or not
            return "few_pairs"
        return "few_pairs" if pairs is not None and pairs <= limit else "default"
    return "training" if pairs is not None and pairs >= training_pairs_limit(head_dim) else "default"


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise PlanError(f"family {name!r}: known families are {sorted(FAMILIES)}")
    return FAMILIES[name]


def requested() -> str | None:
    """The family KDAGEN_FAMILY names (validated), or None."""
    name = os.environ.get(ENV, "").strip()
    if name and name not in FAMILIES:
        raise PlanError(f"{ENV}={name!r}: known families are {sorted(FAMILIES)}")
    return name or None


def verdicts(problem: Problem, directions, ranking: str = "default") -> list[tuple[Family, bool, str]]:
    """Every family's (ok, reason) for the problem, highest rank first."""
    ranked = sorted(FAMILIES.values(), key=lambda f: -f.rank(ranking))
    return [(f, *f.supports(problem, directions)) for f in ranked]


def choose(problem: Problem, directions=("forward", "backward"), name: str | None = None,
           ranking: str = "default") -> tuple[Family, list[str]]:
    """(the family that plans `problem`, why each other family was passed over)."""
    name = name or requested()
    found = verdicts(problem, directions, ranking)
    if name is not None:
        chosen = family(name)
        ok, why = chosen.supports(problem, directions)
        if not ok:
            raise PlanError(f"family {name!r} was requested but cannot plan this problem: {why}")
    else:
        chosen = next((f for f, ok, _ in found if ok), None)
        if chosen is None:
            raise PlanError("no kernel family supports this problem:\n  " + "\n  ".join(w for _, _, w in found))
    below = f"ranked below {chosen.name}" + ranking_note(ranking, problem, " for ")
    passed = [f"{f.name}: supported, but {'not requested' if name else below}" if ok else why
              for f, ok, why in found if f is not chosen]
    return chosen, passed


def ranking_note(ranking: str, problem: Problem, prefix: str = "") -> str:
    """The call class a ranking names for a problem, in words ("" for the default)."""
    limit = few_pairs_limit(problem.K, rank_kind(problem.recurrence))
    few = "any number of" if limit is None else f"≤ {limit}"
    return {"default": "",
            "few_pairs": f"{prefix}an inference call with {few} (sequence, head) pairs",
            "training": f"{prefix}a training call with ≥ {training_pairs_limit(problem.K)} (sequence, head) pairs",
            }[ranking]
