"""Problem -> Plan: the chosen family's kernels, their shared-memory layout, and the plan's identity."""
from __future__ import annotations

from .families import choose, ranking_note, requested
from .model import Plan
from .problem import Problem
from .smem import assign_offsets

DIRECTIONS = ("forward", "backward")


def make_plan(problem: Problem, *, family: str | None = None, directions=DIRECTIONS, ranking: str = "default") -> Plan:
    """The plan of `problem` by `family` (default: KDAGEN_FAMILY, else the best family that supports every
    direction in `directions`, ranked for the call class `ranking`: families.ranking)."""
    chosen, passed_over = choose(problem, tuple(directions), family, ranking)
    planned = chosen.build(problem)
    for k in planned.kernels:
        assign_offsets(k, problem.arch_spec.static_smem)
    d = problem.describe()
    notes = [f"family {chosen.name}: {chosen.summary}", *[f"not chosen: {why}" for why in passed_over],
             *planned.notes]
    if ranking != "default" and (family or requested()) is None:     # a class's rank chose (no family was named)
        why = {"few_pairs": "the chunk-64 forward is measured shorter there",
               "training": "the chunk-64 backward's step is measured shorter there"}[ranking]
        notes.insert(1, f"ranked for {ranking_note(ranking, problem)}: {why}")
    return Plan(uri=problem.uri(chosen.name), problem=d, family=chosen.name, chunk=chosen.chunk,
                decay_kind=d["recurrence"]["decay_kind"], decay_interval=tuple(d["recurrence"]["decay_interval"]),
                exponent_form=planned.exponent_form, kernels=planned.kernels, workspaces=planned.workspaces,
                saved=planned.saved, headers=list(chosen.headers), notes=notes)
