"""What every kernel family shares: the `Family` contract and the plan pieces each family builds from.

A family is one way of turning a problem into kernels: its chunk size, instruction set, roles and
templates (docs/plan.md §6). It says whether it serves a problem (`supports` -> (ok, reason), like
flash-linear-attention's backend verifiers) and, if so, plans its kernels (`build`).

Names the kernels take from the recurrence are scoped so no user choice can collide with a name a
kernel declares: token inputs and head parameters arrive as `in_<name>`, their gradients as
`grad_in_<name>`, scalars as `sc_<name>` (`input_param`, `grad_param`, `scalar_param`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Barrier, Buffer, Kernel, Param, Role, Step, Workspace
from ..problem import PlanError, Problem, exponent_form, qk_inputs, recurrence_facts


def input_param(name: str) -> str:
    """The kernel parameter (and emitted pointer prefix) of a token input or head parameter."""
    return f"in_{name}"


def grad_param(name: str) -> str:
    return f"grad_{input_param(name)}"


def scalar_param(name: str) -> str:
    return f"sc_{name}"


@dataclass(frozen=True)
class Facts:
    """What a family reads off a problem's recurrence, computed once."""
    decay_kind: str                          # "vector" | "scalar"
    decay_interval: tuple[float, float]
    KD: int                                  # decay width: K per channel, 1 per head
    leaves: list[Param]                      # prologue inputs other than the value, then head parameters
    scalars: list[str]
    head_params: list[tuple[str, bool]]      # (name, has a K row)
    qk_inputs: list[str]
    token_inputs: list[str]
    row_dtypes: list[str]                    # the dtypes of the token inputs (not the value) with a row of K
    qk_row_scaled: bool                      # query and key each a bf16 row input or its l2norm (row_scaled)
    qk_rows: tuple[str, str]                 # the token inputs under query and key (l2norm_split's x), in that order


IO_INPUTS = ("q", "k", "v")          # token inputs by these names are read in the io dtype (bf16)
PASSED_DTYPE_INPUTS = ("g", "beta")  # these in the dtype the call passes (Problem.dtypes.g / .beta: bf16 or f32)


def _leaf_dtype(problem: Problem, name: str, node_dtype: str) -> str:
    """q, k, v in the io dtype, g and beta as the problem says, anything else as its DSL declaration (one the
    kernels read: Problem checked it)."""
    fixed = {**dict.fromkeys(IO_INPUTS, problem.dtypes.io), "g": problem.dtypes.g, "beta": problem.dtypes.beta}
    return fixed.get(name, node_dtype)


def l2norm_split(graph, node: str) -> tuple[str, float | None]:
    """(x, ε) for node = l2norm(x), else (node, None): the values and, where there is one, the ε of the number per
    row, (Σx² + ε)^−1/2, that scales them."""
    a = graph.nodes[node]
    return (a["args"][0], a["eps"]) if a["op"] == "l2norm" else (node, None)


def row_scaled(r, node: str, dtype_of) -> bool:
    """Whether core operand `node` is a bf16 row input x or l2norm(x): bf16 values times one number per row, so
    a tensor-core product can take x exactly as loaded and scale its result by the rows' numbers afterwards."""
    x, _ = l2norm_split(r.graph, node)
    a = r.graph.nodes[x]
    return a["op"] == "token_input" and bool(a["shape"]) and dtype_of(x) == "bf16"


def qk_row_scaled(r, dtype_of) -> bool:
    """Whether the query and key are each a bf16 row input or its l2norm (row_scaled): what lets wgmma64 take q and k
    as loaded, in its prepare's products and in its recurrence."""
    ops = r.core_operands()
    return all(row_scaled(r, ops[role], dtype_of) for role in ("query", "key"))


def facts(problem: Problem) -> Facts:
    r = problem.recurrence
    value = r.core_operands()["value"]
    if r.graph.nodes[value]["op"] != "token_input":
        raise PlanError(f"value operand {value!r}: the kernels read v directly, so it must be a token input "
                        "(prologue ops on v are not planned)")
    info = recurrence_facts(r)
    lo, hi = info["decay_interval"]
    if hi > 0:
        raise PlanError(f"decay {r.core_operands()['decay']!r}: its proven interval [{lo:g}, {hi:g}] admits positive "
                        "values, which the chunked kernels cannot represent (a state that grows); make it provably "
                        "<= 0: declare the input's bounds (token_input(..., bounds=(lo, 0))) or write the gate as "
                        "a non-positive map, e.g. -softplus(x) or lb * sigmoid(x) with lb < 0 (docs/recurrences.md)")
    tokens = [n for n in r.token_inputs if n != value]
    leaves = [Param(input_param(n), "ptr", _leaf_dtype(problem, n, r.graph.nodes[n]["dtype"])) for n in tokens]
    row_dtypes = [p.dtype for n, p in zip(tokens, leaves) if r.graph.nodes[n]["shape"]]
    leaves += [Param(input_param(n), "ptr", "f32") for n in r.head_params]
    kind = info["decay_kind"]
    ops, dtype_of = r.core_operands(), lambda n: _leaf_dtype(problem, n, r.graph.nodes[n]["dtype"])
    return Facts(decay_kind=kind, decay_interval=tuple(info["decay_interval"]), KD=problem.K if kind == "vector" else 1,
                 leaves=leaves, scalars=list(r.scalars),
                 head_params=[(n, bool(r.graph.nodes[n]["shape"])) for n in r.head_params],
                 qk_inputs=qk_inputs(r), token_inputs=list(r.token_inputs), row_dtypes=row_dtypes,
                 qk_row_scaled=qk_row_scaled(r, dtype_of),
                 qk_rows=tuple(l2norm_split(r.graph, ops[role])[0] for role in ("query", "key")))


def seq_params(varlen: bool) -> list[Param]:
    """How kernels find sequences: cu_seqlens and per-sequence chunk offsets (varlen), else B rows of T."""
    seq = [Param("cu_seqlens", "ptr", "i64"), Param("chunk_offsets", "ptr", "i32")] if varlen else []
    return seq + [Param("T", "i32"), Param("N", "i32")]


def prepare_bwd_io(f: Facts, grads, ws: list[Workspace]) -> tuple[list[Param], list[str], list[str]]:
    """A prepare_bwd's parameters in either family, but how it finds sequences: the prologue's leaves and scalars,
    the chunk gradients `grads` (in their workspaces' dtypes, `ws`), the token inputs' gradients and the head
    parameters' per-chunk partials. Also the q/k inputs and their gradients' names: the q/k adjoint writes those,
    the value heads' adjoint the rest."""
    token_grads = [Param(grad_param(n), "ptr", p.dtype, const=False) for p in f.leaves
                   for n in f.token_inputs if p.name == input_param(n)]
    qk = [input_param(n) for n in f.qk_inputs]
    qk_grads = [p.name for p in token_grads if p.name[len("grad_"):] in qk]
    params = f.leaves + [Param(scalar_param(s), "f32") for s in f.scalars]
    params += workspace_params(grads, True, ws)
    params += token_grads + [Param(f"ws_part_{n}", "ptr", "f32", const=False) for n, _ in f.head_params]
    return params, qk, qk_grads


def workspace_params(names, const: bool, ws: list[Workspace]) -> list[Param]:
    dtypes = {w.name: w.dtype for w in ws}
    return [Param(n, "ptr", dtypes[n], const=const) for n in names]


def token_parallel(*, template: str, f: Facts, varlen: bool, ws: list[Workspace], outputs: list[str],
                   warps: int, min_ctas_per_sm: int, regs: int, buffers: list[Buffer], steps: list[Step],
                   options, barrier_phases: int) -> Kernel:
    """A family's "prepare": one CTA per (chunk, value head), one role over every warp, phases separated by
    __syncthreads; it reads the prologue's leaves and scalars and writes the chunk's workspace `outputs`."""
    threads = warps * 32
    params = f.leaves + [Param(scalar_param(s), "f32") for s in f.scalars] + seq_params(varlen)
    params += workspace_params(outputs, False, ws)
    return Kernel(
        name="prepare", kind="prepare", template=template, direction="forward",
        grid=["chunks", "HV"], threads=threads, min_ctas_per_sm=min_ctas_per_sm,
        roles=[Role("all", (0, warps), work=[s.name for s in steps], regs=regs)], buffers=buffers,
        barriers=[Barrier("sync", "cta", threads, [("all", "thread")], ["all"], phases_per_iter=barrier_phases)],
        pipelines=[], steps=steps, params=params, options=options,
        note="token-parallel: one CTA per (chunk, value head); surplus CTAs of the chunk upper bound exit")


@dataclass
class Planned:
    """A family's plan of one problem, before the planner lays out shared memory and names it."""
    kernels: list[Kernel]
    workspaces: list[Workspace]
    saved: list[str]
    exponent_form: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Family:
    """A kernel family: what it serves (archs, head dims, directions) and how it plans."""
    name: str
    chunk: int
    archs: tuple[str, ...]
    head_dims: tuple[int, ...]
    directions: tuple[str, ...]
    headers: tuple[str, ...]
    priority: int                            # its rank (`rank`): the highest-ranked family that serves is chosen
    summary: str
    ranks: dict = field(default_factory=dict)   # its rank in a class of call (families.ranking), where not priority

    def rank(self, ranking: str = "default") -> int:
        return self.ranks.get(ranking, self.priority)

    def supports(self, problem: Problem, directions=("forward", "backward")) -> tuple[bool, str]:
        """(ok, reason): whether this family can plan `problem` for every direction in `directions`."""
        missing = [d for d in directions if d not in self.directions]
        checks = [
            (problem.arch in self.archs, f"arch {problem.arch} (it emits {', '.join(self.archs)})"),
            (problem.K in self.head_dims and problem.V in self.head_dims,
             f"K={problem.K}, V={problem.V} (it has kernels for head dims {self.head_dims})"),
            (not missing, f"it serves {' and '.join(self.directions)} calls, not {' or '.join(missing)}"),
        ]
        for ok, why in checks:
            if not ok:
                return False, f"{self.name}: {why}"
        return self.check(problem)

    def check(self, problem: Problem) -> tuple[bool, str]:
        """Family-specific conditions beyond arch, head dims and directions."""
        return True, f"{self.name}: supported"

    def build(self, problem: Problem) -> Planned:
        raise NotImplementedError


def form_of(f: Facts, chunk: int) -> str:
    return exponent_form(f.decay_kind, f.decay_interval, chunk)
