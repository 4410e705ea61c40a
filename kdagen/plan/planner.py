"""Problem -> Plan: which kernels, in which order, with which resources."""
from __future__ import annotations

from . import bwd, fwd
from .model import Param, Plan
from .problem import Problem, PlanError, exponent_form, qk_inputs, recurrence_facts
from .smem import assign_offsets


def _leaf_dtype(problem: Problem, name: str, node_dtype: str) -> str:
    """q, k, v in the io dtype, g and beta as the problem says, anything else as its DSL declaration."""
    fixed = {"q": problem.dtypes.io, "k": problem.dtypes.io, "v": problem.dtypes.io, "g": problem.dtypes.g,
             "beta": problem.dtypes.beta}
    return fixed.get(name, node_dtype if node_dtype in ("bf16", "f32") else "f32")


def prologue_leaves(problem: Problem) -> list[Param]:
    """The kernel arguments the prologue reads: token inputs other than the value, then head parameters."""
    r = problem.recurrence
    value = r.core_operands()["value"]
    if r.graph.nodes[value]["op"] != "token_input":
        raise PlanError(f"value operand {value!r}: the kernels read v directly, so it must be a token input "
                        "(prologue ops on v are not planned)")
    leaves = [Param(n, "ptr", _leaf_dtype(problem, n, r.graph.nodes[n]["dtype"]))
              for n in r.token_inputs if n != value]
    return leaves + [Param(n, "ptr", "f32") for n in r.head_params]


def make_plan(problem: Problem) -> Plan:
    r = problem.recurrence
    facts = recurrence_facts(r)
    C, K, V = problem.chunk, problem.K, problem.V
    kind = facts["decay_kind"]
    KD = K if kind == "vector" else 1
    form = exponent_form(kind, facts["decay_interval"], C)
    leaves = prologue_leaves(problem)
    head_params = [(n, bool(r.graph.nodes[n]["shape"])) for n in r.head_params]
    arch = problem.arch_spec
    ws = fwd.forward_workspaces(C, K, KD) + bwd.backward_workspaces(C, K, V, head_params)
    common = dict(varlen=problem.varlen)
    kernels = [
        fwd.k1_prepare(C=C, K=K, KD=KD, form=form, decay_kind=kind, leaves=leaves, scalars=list(r.scalars), ws=ws,
                       **common),
        fwd.k2_recurrence(C=C, K=K, V=V, KD=KD, state_layout=problem.state_layout, mode="forward", ws=ws, **common),
        fwd.k2_recurrence(C=C, K=K, V=V, KD=KD, state_layout=problem.state_layout, mode="store_states", ws=ws,
                          **common),
        bwd.k2_bwd(C=C, K=K, V=V, io=problem.dtypes.io, state_layout=problem.state_layout, ws=ws),
        bwd.k1_bwd(C=C, K=K, KD=KD, decay_kind=kind, leaves=leaves, scalars=list(r.scalars),
                   qk_inputs=qk_inputs(r), head_params=head_params,
                   token_grads=[Param(f"grad_{p.name}", "ptr", p.dtype, const=False) for p in leaves
                                if p.name in r.token_inputs]),
    ]
    if head_params:
        kernels.append(bwd.param_reduce(K=K, head_params=head_params))
    for k in kernels:
        assign_offsets(k, arch.static_smem)
    notes = [f"exponent form {form!r}: decay {kind} in [{facts['decay_interval'][0]}, {facts['decay_interval'][1]}]"
             f" at chunk {C}"]
    return Plan(uri=problem.uri(), problem=problem.describe(), chunk=C, decay_kind=kind,
                decay_interval=tuple(facts["decay_interval"]), exponent_form=form, kernels=kernels, workspaces=ws,
                notes=notes)
