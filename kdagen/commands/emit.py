"""`kdagen emit`: a configuration -> generated/<uri>/{forward.cu, backward.cu, plan.json}. No GPU needed.

A configuration is named by the same flags as `kdagen plan`, `inspect` and `compile` (FLA's option names
and defaults). Files are written only when their content changes. Directions whose kernel templates do not
exist are skipped with a note (ask for one with --direction to get an error instead)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXAMPLE = """examples:
  kdagen emit --op kda --head-dim 128 --use-gate-in-kernel --lower-bound -5 --arch sm_90a -o out/
  kdagen emit --op gdn --head-dim 64 --gva 2 --varlen -o out/
  kdagen emit --op kda --inference -o out/        # the kernels of calls without gradients
  kdagen emit --recurrence my_gate.py:my_gate --head-dim 64 -o out/   # a recurrence of your own
  kdagen emit --defaults                          # refresh generated/ in this checkout"""


def default_root() -> Path | None:
    from ..paths import checkout_root
    root = checkout_root()
    return None if root is None else root / "generated"


def emit_plan(plan, recurrence, root: Path, directions=None, log=print) -> list[Path]:
    """Render and write one verified plan; directions=None: those of the plan whose templates exist."""
    from ..codegen import direction_available, emit, template_exists
    if directions is None:
        directions = [d for d in plan.directions() if direction_available(plan, d)]
        for d in sorted(set(plan.directions()) - set(directions)):
            missing = sorted({k.template for k in plan.direction(d) if not template_exists(k.template)})
            log(f"note: {plan.uri}: {d} skipped, templates not written yet: {', '.join(missing)}", file=sys.stderr)
    changed = emit(root, plan, recurrence, directions)
    log(f"{plan.uri}: {', '.join(directions)}; {len(changed)} file(s) written under {root / plan.uri}")
    return changed


def given_configuration(args) -> list[str]:
    """The configuration flags args sets away from their defaults."""
    from ..ops.arguments import add_config_arguments
    probe = argparse.ArgumentParser()
    add_config_arguments(probe)
    return sorted(k for k, v in vars(probe.parse_args([])).items() if getattr(args, k) != v)


def run(args) -> int:
    from ..plan import default_plans
    root = Path(args.out) if args.out else default_root()
    if root is None:
        print("kdagen emit: give -o DIR (no checkout generated/ to default to)", file=sys.stderr)
        return 2
    directions = None if args.direction == "available" else [args.direction]
    if args.defaults:
        given = given_configuration(args)
        if given:
            print(f"kdagen emit: --defaults writes the default configurations; drop {', '.join(given)}",
                  file=sys.stderr)
            return 2
        for plan, recurrence in default_plans():
            emit_plan(plan, recurrence, root, directions)
        return 0
    from ..ops.arguments import config_from_args
    emit_plan(*config_from_args(args).config().planned(), root, directions)
    return 0


def register(subparsers) -> None:
    from . import configuration_parser
    p = configuration_parser(subparsers, "emit", "write a configuration's CUDA and plan.json (no GPU needed)",
                             __doc__, EXAMPLE, run)
    p.add_argument("-o", "--out", default=None, help="output root (default: generated/ of this checkout)")
    p.add_argument("--direction", choices=("available", "forward", "backward"), default="available",
                   help="which unit to write (default: every direction whose templates exist)")
    p.add_argument("--defaults", action="store_true",
                   help="the default configurations (generated/: KDA and GDN, K = V = 128, each arch and family)")
