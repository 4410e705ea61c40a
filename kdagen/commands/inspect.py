"""`kdagen inspect`: the CUDA a configuration renders to, and what nvcc makes of it — PTX, SASS
(cuobjdump), and ptxas's resource report per kernel (registers, spills, shared memory) against the plan.
The flags are those of `kdagen emit`, `plan` and `compile`."""
from __future__ import annotations

import sys

EXAMPLE = """examples:
  kdagen inspect --op kda --head-dim 128                     # the forward unit's source
  kdagen inspect --op gdn --resources --arch sm_80           # registers, spills, smem per kernel (nvcc)
  kdagen inspect --op kda --ptx --kernel recurrence          # PTX of the unit holding that kernel
  kdagen inspect --op kda --sass                             # needs cuobjdump
  kdagen inspect --recurrence my_gate.py:my_gate --resources # a recurrence of your own"""


def resource_table(plan, report) -> str:
    rows = [f"{'kernel':<16} {'arch':<7} {'regs':>5} {'cap':>4} {'spill st':>8} {'spill ld':>8} {'smem':>7} "
            f"{'planned':>7} {'limit':>7}"]
    from ..plan import ARCHS
    limit = ARCHS[plan.problem["arch"]].smem_per_block
    for k in plan.kernels:
        if k.name in report:
            r = report[k.name]
            smem = r.smem if not k.smem_dynamic else k.smem_bytes
            rows.append(f"{k.name:<16} {r.arch:<7} {r.registers:>5} {k.max_regs:>4} {r.spill_stores:>8} "
                        f"{r.spill_loads:>8} {smem:>7} {k.smem_bytes:>7} {limit:>7}")
    return "\n".join(rows) + "\n"


def run(args) -> int:
    from ..codegen import nvcc
    from ..ops.arguments import config_from_args
    from . import UsageError
    config = config_from_args(args).config()
    plan, _ = config.planned()
    direction = args.direction
    if args.kernel:
        known = {k.name: k.direction for k in plan.kernels}
        if args.kernel not in known:
            raise UsageError(f"unknown kernel {args.kernel!r}; plan {plan.uri} has {list(known)}")
        direction = known[args.kernel]
    if not plan.direction(direction):
        print(f"kdagen inspect: plan {plan.uri} has no {direction} kernels (family {plan.family})", file=sys.stderr)
        return 2
    source = config.source(direction)
    try:
        if args.resources:
            sys.stdout.write(resource_table(plan, nvcc.resources(source, plan.problem["arch"])))
        elif args.ptx:
            sys.stdout.write(nvcc.ptx(source, plan.problem["arch"]))
        elif args.sass:
            sys.stdout.write(nvcc.sass(source, plan.problem["arch"]))
        else:
            sys.stdout.write(source)
    except nvcc.NvccUnavailable as e:
        print(f"kdagen inspect: {e}", file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    from . import configuration_parser
    p = configuration_parser(subparsers, "inspect", "show a configuration's CUDA, PTX, SASS or resource usage",
                             __doc__, EXAMPLE, run)
    p.add_argument("--direction", choices=("forward", "backward"), default="forward", help="which unit (default forward)")
    p.add_argument("--kernel", default=None, help="the unit holding this kernel")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--resources", action="store_true", help="ptxas registers / spills / smem per kernel (nvcc)")
    what.add_argument("--ptx", action="store_true", help="PTX (nvcc)")
    what.add_argument("--sass", action="store_true", help="SASS (nvcc + cuobjdump)")
