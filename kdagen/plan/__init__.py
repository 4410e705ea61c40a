"""kdagen.plan: Problem -> Plan (kernels, roles, barriers, shared memory, workspaces) and verify(plan).

    from kdagen.plan import default_problem, make_plan, verify
    plan = verify(make_plan(default_problem("kda", arch="sm_90a")))
    print(plan.to_json())

The vocabulary is in `model` (Role, Barrier, Pipeline, Buffer, Step, Param, Workspace, Kernel, Plan);
kernel families (each plans its kernels) in `families`; launch-size symbols in `sizes`.
"""
from .configs import (DEFAULT_ARCHS, DEFAULT_OPTIONS, default_plans, default_problem, default_problems, options_tag,
                      problem_from_options)
from .model import Barrier, Buffer, Kernel, Param, Pipeline, Plan, Role, Step, Workspace
from .planner import make_plan
from .problem import ARCHS, ArchSpec, Dtypes, PlanError, Problem, exponent_form, recurrence_facts
from .sizes import evaluate, launch_sizes
from .verify import problems, verify

__all__ = [
    "ARCHS", "ArchSpec", "Barrier", "Buffer", "DEFAULT_ARCHS", "DEFAULT_OPTIONS", "Dtypes", "Kernel", "Param",
    "Pipeline", "Plan", "PlanError", "Problem", "Role", "Step", "Workspace", "default_plans", "default_problem",
    "default_problems",
    "evaluate", "exponent_form", "launch_sizes", "make_plan", "options_tag", "problem_from_options", "problems",
    "recurrence_facts", "verify",
]
