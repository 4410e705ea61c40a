"""`kdagen plan`: the plan of a configuration as a tuner reads it — the kernel family and why, kernels,
roles (warps, register budgets or setmaxnreg quotas), barriers (kind, arrive counts, transaction bytes,
phases), pipelines, shared-memory buffers (alignment, swizzle), steps, workspaces and what the forward
saves. `--json` prints the plan itself (what generated/<uri>/plan.json holds); `--dot` the kernel graph.
The flags are those of `kdagen emit`, `inspect` and `compile`."""
from __future__ import annotations

import sys

EXAMPLE = """examples:
  kdagen plan --op kda --head-dim 128
  kdagen plan --op kda --use-gate-in-kernel --lower-bound -5 --inference   # the kernels of a no-grad call
  kdagen plan --op kda --inference --pairs 4              # ... with 4 (sequence, head) pairs: a long-chunk family
  kdagen plan --op kda --inference --pairs 4 --tokens 65536   # ... and whether each sequence is cut into segments
  kdagen plan --op kda --pairs 4 --tokens 65536           # ... the same for a training step (forward + backward)
  kdagen plan --op gdn --kernel recurrence                # one kernel's tables
  kdagen plan --op kda --json > plan.json
  kdagen plan --op kda --dot | dot -Tsvg > kernels.svg
  kdagen plan --recurrence examples/sigmoid_gate.py:sigmoid_gate --option lower_bound=-3 --head-dim 64"""


def run(args) -> int:
    from ..ops.arguments import config_from_args
    from ..plan import PlanError, make_plan, problems
    from ..plan.describe import describe, to_dot
    refused = ("--tokens (a positive sequence length) goes with --pairs: the cut into segments of an inference "
               "forward (--inference) or a training step" if args.tokens is not None and (args.pairs is None
                                                                                          or args.tokens < 1) else
               "--tokens prints the cut beside the tables; --json and --dot print the plan alone"
               if args.tokens is not None and (args.json or args.dot) else
               "--sms goes with --tokens (the SMs the cut is planned for)"
               if args.sms is not None and args.tokens is None else f"--sms {args.sms}: a positive SM count" if args.sms is not None and args.sms < 1 else None)
    if refused:
        print(f"kdagen plan: {refused}", file=sys.stderr)
        return 2
    config = config_from_args(args).config()
    plan = make_plan(config.problem(), family=config.family, directions=config.directions,
                     ranking=config.ranking)
    known = [k.name for k in plan.kernels]
    if args.kernel and any(k not in known for k in args.kernel):
        print(f"kdagen plan: unknown kernel(s) {args.kernel}; this plan has {known}", file=sys.stderr)
        return 2
    if args.kernel and (args.json or args.dot):
        print("kdagen plan: --kernel selects tables; --json and --dot print the whole plan", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(plan.to_json())
    elif args.dot:
        sys.stdout.write(to_dot(plan))
    else:
        sys.stdout.write(describe(plan, args.kernel))
        if args.tokens is not None:
            from ..ops.segmented import planned_cut
            from ..plan.cut import H200_SMS
            sms = args.sms or H200_SMS
            cut = planned_cut(plan, args.pairs, args.tokens, sms, varlen=config.problem().varlen,
                              keep=not args.inference)
            call = "inference forward" if args.inference else "training step"
            print(f"\nsegments of a {call} ({args.pairs} pairs of {args.tokens} tokens, {sms} SMs): {cut.describe()}")
    found = problems(plan)
    if found:
        print(str(PlanError("verify: " + "; ".join(found))), file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    from . import configuration_parser
    p = configuration_parser(subparsers, "plan", "print a configuration's plan: family, kernels, roles, barriers, buffers",
                             __doc__, EXAMPLE, run)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="the plan as JSON")
    out.add_argument("--dot", action="store_true", help="the kernel graph as Graphviz text")
    p.add_argument("--kernel", action="append", default=None, help="only this kernel's tables (repeatable)")
    p.add_argument("--tokens", type=int, default=None, metavar="T",
                   help="with --pairs: tokens per sequence; prints whether a call cuts each sequence into segments, "
                        "how long, and the cost model's times: an inference forward with --inference "
                        "(docs/segments.md §5), else a training step (§6)")
    p.add_argument("--sms", type=int, default=None, metavar="N",
                   help="with --tokens: SMs the cut is planned for (default 132, an H200; a call reads its device's "
                        "count). KDAGEN_CUT applies here as in a call")
