"""Kernel families, and the choice between them (docs/plan.md §6).

`choose(problem, directions, name)` returns the family that plans a problem: the one named (argument, else
KDAGEN_FAMILY) when it supports the problem, else the highest-priority family that does. The reasons the
others give are kept, so `kdagen plan` can say why a family was passed over.
"""
from __future__ import annotations

import os

from ..problem import PlanError, Problem
from .base import Family
from .mma16 import FAMILY as MMA16
from .wgmma64 import FAMILY as WGMMA64

FAMILIES: dict[str, Family] = {f.name: f for f in (WGMMA64, MMA16)}
ENV = "KDAGEN_FAMILY"


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


def verdicts(problem: Problem, directions) -> list[tuple[Family, bool, str]]:
    """Every family's (ok, reason) for the problem, highest priority first."""
    ranked = sorted(FAMILIES.values(), key=lambda f: -f.priority)
    return [(f, *f.supports(problem, directions)) for f in ranked]


def choose(problem: Problem, directions=("forward", "backward"), name: str | None = None) -> tuple[Family, list[str]]:
    """(the family that plans `problem`, why each other family was passed over)."""
    name = name or requested()
    found = verdicts(problem, directions)
    if name is not None:
        chosen = family(name)
        ok, why = chosen.supports(problem, directions)
        if not ok:
            raise PlanError(f"family {name!r} was requested but cannot plan this problem: {why}")
    else:
        chosen = next((f for f, ok, _ in found if ok), None)
        if chosen is None:
            raise PlanError("no kernel family supports this problem:\n  " + "\n  ".join(w for _, _, w in found))
    passed = [f"{f.name}: supported, but {'not requested' if name else f'ranked below {chosen.name}'}" if ok else why
              for f, ok, why in found if f is not chosen]
    return chosen, passed
