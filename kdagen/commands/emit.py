"""`kdagen emit`: a configuration -> generated/<uri>/{forward.cu, backward.cu, plan.json}. No GPU needed.

Files are written only when their content changes. Directions whose kernel templates do not exist
yet are skipped with a note (ask for one with --direction to get an error instead)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXAMPLE = """examples:
  kdagen emit --op kda --head-dim 128 --arch sm_90a -o out/
  kdagen emit --op gdn --head-dim 64 --gva 2 --varlen -o out/
  kdagen emit --op kda --fla-defaults --gate-in-kernel -o out/    # FLA's defaults plus the softplus gate
  kdagen emit --defaults                                          # refresh generated/ in this checkout"""


def default_root() -> Path | None:
    from ..paths import checkout_root
    root = checkout_root()
    return None if root is None else root / "generated"


def emit_problem(problem, root: Path, directions=None, log=print) -> list[Path]:
    """Plan, verify, render and write one configuration; directions=None: those with templates."""
    from ..codegen import DIRECTIONS, direction_available, emit, template_exists
    from ..plan import make_plan, verify
    plan = verify(make_plan(problem))
    if directions is None:
        directions = [d for d in DIRECTIONS if direction_available(plan, d)]
        for d in sorted(set(DIRECTIONS) - set(directions)):
            missing = sorted({k.template for k in plan.direction(d) if not template_exists(k.template)})
            log(f"note: {plan.uri}: {d} skipped, templates not written yet: {', '.join(missing)}", file=sys.stderr)
    changed = emit(root, plan, problem.recurrence, directions)
    log(f"{plan.uri}: {', '.join(directions)}; {len(changed)} file(s) written under {root / plan.uri}")
    return changed


def run(args) -> int:
    from ..plan import default_problems, problem_args_given, problem_from_args
    root = Path(args.out) if args.out else default_root()
    if root is None:
        print("kdagen emit: give -o DIR (no checkout generated/ to default to)", file=sys.stderr)
        return 2
    directions = None if args.direction == "available" else [args.direction]
    given = problem_args_given(args) if args.defaults else []
    if given:
        print(f"kdagen emit: --defaults writes the default configurations; drop {', '.join(given)}", file=sys.stderr)
        return 2
    problems = default_problems() if args.defaults else [problem_from_args(args)]
    for problem in problems:
        emit_problem(problem, root, directions)
    return 0


def register(subparsers) -> None:
    from ..plan import add_problem_arguments
    p = subparsers.add_parser("emit", help="write a configuration's CUDA and plan.json (no GPU needed)",
                              description=__doc__, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_problem_arguments(p)
    p.add_argument("-o", "--out", default=None, help="output root (default: generated/ of this checkout)")
    p.add_argument("--direction", choices=("available", "forward", "backward"), default="available",
                   help="which unit to write (default: every direction whose templates exist)")
    p.add_argument("--defaults", action="store_true",
                   help="the default configurations (KDA and GDN, K = V = 128, sm_90a and sm_80) instead of one")
    p.set_defaults(func=run)
