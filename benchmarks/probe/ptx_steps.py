"""Where a kernel's instructions go, step by step, without a GPU:
`python benchmarks/probe/ptx_steps.py [--op kda] [--softplus] [--head-dim 128] [--family wgmma64] [--kernel prepare]`.

Renders the unit holding the kernel (forward, or backward for prepare_bwd and the like) of the op's default
problem, compiles it to PTX with `-lineinfo` (the unit's #line
directives name template lines), and counts the kernel's PTX instructions by the template step (`sk.step`
marker) their line falls in; an instruction inlined from a header counts for the template line that called it.
Counts are static, per thread: a step inside a loop that is not unrolled runs its count once per iteration.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kdagen.codegen import render_unit  # noqa: E402
from kdagen.codegen.nvcc import ptx  # noqa: E402
from kdagen.plan import default_problem, make_plan, verify  # noqa: E402
from kdagen.plan.configs import DEFAULT_OPTIONS, Options, problem_from_options  # noqa: E402

LOC = re.compile(r"\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*inlined_at\s+(\d+)\s+(\d+))?")


def step_lines(template: Path) -> list[tuple[int, str]]:
    """(first line, step name) of each `sk.step(kernel, "name")` marker, in order."""
    return [(n, m.group(1)) for n, line in enumerate(template.read_text().splitlines(), 1)
            if (m := re.search(r'sk\.step\(kernel, "(\w+)"\)', line))]


def count(text: str, kernel: str, template: str, steps: list[tuple[int, str]]) -> dict[str, collections.Counter]:
    """Per step, a Counter of PTX opcodes of `kernel`'s body."""
    files = {int(i): name for i, name in re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', text, re.M)}
    ours = {i for i, name in files.items() if name.endswith(template)}
    per_step: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inside, step = False, "preamble"
    for line in text.splitlines():
        if line.startswith(".visible .entry"):
            inside = f" {kernel}(" in line
            continue
        if not inside:
            continue
        if m := LOC.match(line):
            f, n = int(m.group(1)), int(m.group(2))
            if m.group(3) and int(m.group(3)) in ours:
                f, n = int(m.group(3)), int(m.group(4))
            if f in ours:
                step = next((name for first, name in reversed(steps) if n >= first), "preamble")
            continue
        body = line.strip()
        if not body or body.startswith(("//", ".", "$", "{", "}")):
            continue
        opcode = body.split()[1] if body.startswith("@") else body.split()[0]
        per_step[step][opcode.split(".")[0].rstrip(";")] += 1
    return per_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="kda", choices=("kda", "gdn"))
    ap.add_argument("--softplus", action="store_true", help="KDA's gate without a lower bound (softplus)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--family", default="wgmma64")
    ap.add_argument("--kernel", default="prepare")
    a = ap.parse_args()
    if a.softplus:
        options = {**DEFAULT_OPTIONS[a.op], "lower_bound": None}
        problem = problem_from_options(Options(op=a.op, **options), K=a.head_dim, V=a.head_dim, arch="sm_90a")
    else:
        problem = default_problem(a.op, head_dim=a.head_dim)
    plan = verify(make_plan(problem, family=a.family, directions=("forward", "backward")))
    direction = next((d for d in ("forward", "backward") if any(k.name == a.kernel for k in plan.direction(d))), None)
    if direction is None:
        sys.exit(f"ptx_steps: {plan.uri} has no kernel named {a.kernel!r}")
    template = plan.kernel(a.kernel).template
    text = ptx(render_unit(plan, problem.recurrence, direction), "sm_90a", ("-lineinfo",))
    per_step = count(text, a.kernel, template, step_lines(ROOT / "templates" / template))
    total = sum(sum(c.values()) for c in per_step.values())
    print(f"{plan.uri} / {a.kernel} ({plan.kernel(a.kernel).threads} threads): {total} PTX instructions per thread")
    for name, c in sorted(per_step.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(c.values())
        top = ", ".join(f"{op} {k}" for op, k in c.most_common(6))
        print(f"  {name:16s} {n:6d} {100 * n / total:5.1f}%   {top}")


if __name__ == "__main__":
    main()
