"""Recurrence: the builder a recurrence is written with, and the checked forward graph it holds."""
from __future__ import annotations

import math
import re

import networkx as nx

from . import core
from .errors import DSLError, RuleError
from .graph import GraphBuilder
from .ops import LEAF_OPS, OPS
from .serialize import graph_to_dot, graph_to_json
from .shapes import DTYPES, row_shape

# Names the interpreter reads from the call, and prefixes of backward-graph node ids.
RESERVED_NAMES = ("initial_state", "cu_seqlens")
_RESERVED_ID = re.compile(r"^(d_|grad_)|^(%s)_\d+$" % "|".join([*OPS, "const", core.CORE_OP]))


class Recurrence(GraphBuilder):
    """A recurrence written in the DSL: leaves, prologue ops, and one chunked core.

    Build it with token_input / head_param / scalar / const, DSL ops on the Values they return, and
    one delta_rule(...) call; check() validates the whole graph and marks saved nodes.
    """

    allow_backward_ops = False

    def __init__(self, name: str = "recurrence", learned_scalars=(), per_token=()):
        super().__init__(name)
        self.core: str | None = None
        self._checked_as = None                      # the graph as check() last passed it (_snapshot)
        self._learned_scalars = frozenset(learned_scalars)
        self._per_token = frozenset(per_token)
        self._leaves: dict[str, list[str]] = {}      # leaf op -> names, until the graph changes

    def _changed(self):
        self._checked_as = None
        self._leaves = {}

    def _snapshot(self) -> tuple:
        """The graph as plain data. check() keeps the one it passed, so that an edit made to `r.graph` directly,
        past the builder, is noticed and checked again instead of failing later inside networkx."""
        nodes = tuple((n, tuple(sorted(a.items()))) for n, a in self.graph.nodes(data=True))
        edges = tuple((u, v, tuple(sorted(a.items()))) for u, v, a in self.graph.edges(data=True))
        return self.core, nodes, edges

    # ---- leaves ---------------------------------------------------------------------------
    def _leaf(self, op: str, name: str, dim, what: str, bounds, dtype: str):
        if not isinstance(name, str) or not name.isidentifier():
            raise DSLError(str(name), f"{what} name must be an identifier, got {name!r}")
        if not name.isascii():
            raise DSLError(name, f"{what} name must be an ASCII identifier, got {name!r}: the kernels carry it "
                                 "into CUDA, whose compiler (NVRTC) takes only ASCII names")
        if name in RESERVED_NAMES or _RESERVED_ID.match(name):
            raise DSLError(name, f"{what} name {name!r} is reserved (call arguments {RESERVED_NAMES}, "
                                 "op ids <op>_<n>, backward ids d_*, grad_*)")
        if name in self.graph:
            raise DSLError(name, f"{what} {name!r} is declared twice")
        if op != "scalar":
            _check_row_pointer(self.graph, name)
        if dtype not in DTYPES:
            raise DSLError(name, f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        try:
            shape = row_shape(dim, what)
        except RuleError as e:
            raise DSLError(name, str(e)) from None
        return self._add_node(name, op=op, name=name, shape=shape, kind=op_kind(op), dtype=dtype,
                              bounds=_check_bounds(name, bounds))

    def token_input(self, name: str, dim: str | None = None, *, bounds=None, dtype: str = "f32"):
        """A tensor [B,T,heads(,dim)] given per call; `bounds` (lo, hi) is a promise of its range."""
        return self._leaf("token_input", name, dim, "a token input", bounds, dtype)

    def head_param(self, name: str, dim: str | None = None, *, bounds=None, dtype: str = "f32"):
        """A per-head parameter [HV(,dim)], broadcast over tokens; its gradient is summed over tokens. (Built with
        it among `per_token`, a token input instead: its gradient per token, what testing reads.)"""
        if name in self._per_token:
            return self.token_input(name, dim, bounds=bounds, dtype=dtype)
        return self._leaf("head_param", name, dim, "a per-head parameter", bounds, dtype)

    def scalar(self, name: str, *, bounds=None):
        """A number given per call (e.g. the attention scale); no gradient — unless the recurrence was built with
        it among `learned_scalars`: then it is a per-head parameter of shape () that the caller fills with one
        value, and whose per-head gradients it sums."""
        if name in self._learned_scalars or name in self._per_token:
            return self.head_param(name, None, bounds=bounds)
        return self._leaf("scalar", name, None, "a scalar", bounds, "f32")

    # ---- the core -------------------------------------------------------------------------
    def delta_rule(self, *, query, key, value, beta, decay, scale) -> None:
        """S ← Diag(e^decay)S + β k (v − (Diag(e^decay)S)ᵀk)ᵀ, o = scale·Sᵀq (chunked; docs/math.md §2, §4).

        decay is the per-step natural-log decay: ("K",) per channel (KDA) or () per head (GDN).
        """
        node_id = self._fresh(core.CORE_OP)
        if self.core is not None:
            raise DSLError(node_id, f"two cores: {self.core!r} is already this recurrence's core; "
                                    "a recurrence has exactly one")
        given = dict(query=query, key=key, value=value, beta=beta, decay=decay, scale=scale)
        values = [self.lift(given[role], node_id, role) for role in core.ROLES]
        derived = self._core_rule(node_id, [v.id for v in values])
        self._add_node(node_id, [v.id for v in values], op=core.CORE_OP, dtype="f32", **derived)
        for pos, role in enumerate(core.ROLES):
            self.graph.edges[values[pos].id, node_id].setdefault("role", role)
        self.core = node_id

    def _core_rule(self, node_id, args) -> dict:
        try:
            return core.operand_rule({role: dict(self.graph.nodes[a], id=a) for role, a in zip(core.ROLES, args)})
        except RuleError as e:
            raise DSLError(node_id, f"{core.CORE_OP}: {e}") from None

    def core_operands(self) -> dict:
        """role -> node id, for query, key, value, beta, decay, scale."""
        self._need_core()
        return dict(zip(core.ROLES, self.graph.nodes[self.core]["args"]))

    @property
    def decay_kind(self) -> str:
        """"vector" (per channel, KDA) or "scalar" (per head, GDN)."""
        return core.decay_kind(self.graph.nodes[self.core_operands()["decay"]]["shape"])

    def decay_interval(self, dims: dict | None = None) -> tuple[float, float]:
        from .bounds import interval
        return interval(self, self.core_operands()["decay"], dims)

    def _names(self, op: str) -> list[str]:
        """The leaves of an op in declaration order (read by every Spec and plan made from it: kept until the
        graph changes)."""
        if op not in self._leaves:
            self._leaves[op] = [n for n, a in self.graph.nodes(data=True) if a["op"] == op]
        return list(self._leaves[op])

    @property
    def token_inputs(self) -> list[str]:
        return self._names("token_input")

    @property
    def head_params(self) -> list[str]:
        return self._names("head_param")

    @property
    def scalars(self) -> list[str]:
        return self._names("scalar")

    # ---- checking -------------------------------------------------------------------------
    def _need_core(self):
        if self.core is None:
            raise DSLError(None, f"recurrence {self.name!r} has no core: call delta_rule(...) once")

    def check(self) -> "Recurrence":
        """Validate the whole graph (core, cycles, shapes, dead nodes) and mark saved nodes; again whenever the
        graph has changed since."""
        if self._checked_as is not None and self._checked_as == self._snapshot():
            return self
        self._changed()
        self._need_core()
        if self.core not in self.graph:
            raise DSLError(self.core, "the core is no longer in the graph (removed from r.graph after building)")
        try:
            cycle = nx.find_cycle(self.graph)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
            raise DSLError(cycle[0][0], f"cycle: {path}")
        for node_id in nx.lexicographical_topological_sort(self.graph):
            self._recheck(node_id)
        live = nx.ancestors(self.graph, self.core)
        for node_id, a in self.graph.nodes(data=True):
            if node_id != self.core and node_id not in live:
                what = {"token_input": "unused input", "head_param": "unused parameter",
                        "scalar": "unused scalar"}.get(a["op"], f"unused value ({a['op']} is never "
                                                                "consumed on the way to the core)")
                raise DSLError(node_id, f"{what}: it does not reach the core {self.core!r}")
        from .autodiff import mark_saved
        mark_saved(self)
        self._checked_as = self._snapshot()
        return self

    def _recheck(self, node_id: str):
        """Re-derive one node's type from its operands: catches graphs edited after building."""
        a = self.graph.nodes[node_id]
        missing = [key for key in ("op", "args", "shape", "kind") if key not in a]
        if missing:
            raise DSLError(node_id, f"has no {', '.join(missing)}: a node added to r.graph directly, not by the "
                                    "builder")
        if set(self.graph.predecessors(node_id)) != set(a["args"]):
            raise DSLError(node_id, f"edges {sorted(self.graph.predecessors(node_id))} disagree with "
                                    f"its operands {list(a['args'])}")
        if a["op"] == "const":
            derived = {"kind": "const", "shape": ()}
        elif a["op"] in LEAF_OPS:
            derived = {"kind": op_kind(a["op"]), "name": node_id}
        elif a["op"] == core.CORE_OP:
            derived = self._core_rule(node_id, a["args"])
        elif a["op"] in OPS:
            derived = self.infer(node_id, a["op"], a["args"], a)
        else:
            raise DSLError(node_id, f"unknown op {a['op']!r}")
        for key, val in derived.items():
            if a.get(key) != val:
                raise DSLError(node_id, f"{key} is {a.get(key)!r} but its operands give {val!r}")

    # ---- inspection -----------------------------------------------------------------------
    def to_json(self) -> str:
        self.check()
        return graph_to_json(self.graph, name=self.name, core=self.core, core_operands=self.core_operands(),
                             decay_kind=self.decay_kind)

    def to_dot(self) -> str:
        self.check()
        return graph_to_dot(self.graph, self.name)


def op_kind(op: str) -> str:
    return {"token_input": "token", "head_param": "head", "scalar": "scalar"}[op]


def _check_row_pointer(graph, name: str) -> None:
    """Refuse inputs `x` and `x_row` side by side: a kernel reads input x through a pointer named in_x_row
    (kdagen.codegen.expr), which is input x_row's own parameter — a redeclaration in one kernel, a shadowed pointer
    (a silently wrong read) in another."""
    for base, row in ((name, f"{name}_row"), (name.removesuffix("_row"), name)):
        other = row if base == name else base
        if other != name and graph.nodes.get(other, {}).get("op") in ("token_input", "head_param"):
            raise DSLError(name, f"inputs {base!r} and {row!r} cannot both be declared: the kernels read {base!r} "
                                 f"through a pointer named in_{row}, the name of {row!r}'s own parameter; rename one")


def _check_bounds(name: str, bounds):
    if bounds is None:
        return None
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise DSLError(name, f"bounds must be a pair (lo, hi), got {bounds!r}") from None
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise DSLError(name, f"bounds must satisfy lo ≤ hi, got {bounds!r}")
    return (lo, hi)


def build(fn, name: str | None = None, learned_scalars=(), per_token=(), **options) -> Recurrence:
    """Run fn(r, **options) on a fresh Recurrence and return it checked. `learned_scalars` names scalars to
    declare as per-head parameters (see Recurrence.scalar); `per_token` names head parameters or scalars to declare
    as token inputs, whose gradients then come per token (kdagen.testing measures cancellation with them)."""
    r = Recurrence(name or fn.__name__, learned_scalars, per_token)
    fn(r, **options)
    unknown = sorted(r._learned_scalars - set(r.head_params) - set(r.token_inputs)) + \
        sorted(r._per_token - set(r.token_inputs))
    if unknown:
        raise DSLError(None, f"{unknown}: recurrence {r.name!r} declares no such scalar or head parameter")
    return r.check()


def topo_prologue(r: Recurrence) -> list[str]:
    """The forward op nodes from the leaves to the core operands, in a stable topological order."""
    r.check()
    return [n for n in nx.lexicographical_topological_sort(r.graph)
            if r.graph.nodes[n]["op"] in OPS]
