"""kdagen.dsl: write a chunked linear-attention recurrence once, in Python; get its backward graph,
its bounds and a float64 interpreter for both directions.

    from kdagen import dsl

    def kda(r: dsl.Recurrence, lower_bound=-5.0):
        q, k = r.token_input("q", "K"), r.token_input("k", "K")
        v = r.token_input("v", "V")
        g, beta = r.token_input("g", "K"), r.token_input("beta")
        A_log, dt_bias = r.head_param("A_log"), r.head_param("dt_bias", "K")
        a = lower_bound * dsl.sigmoid(dsl.exp(A_log) * (g + dt_bias))   # per-channel log decay
        r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v,
                     beta=dsl.sigmoid(beta), decay=a, scale=r.scalar("scale"))

    r = dsl.build(kda)                       # a checked Recurrence

Contract (what the planner and codegen read):

Forward graph `r.graph` (networkx.DiGraph); `r.check()` validates it and marks saved nodes.
- Node ids: inputs, parameters and scalars keep their names ("q", "A_log", "scale"); ops and
  consts are "<op>_<n>" ("mul_4", "const_3"); the core is r.core ("delta_rule_<n>").
- Node attributes: `op` (str), `shape` (() or one row dim, ("K",) / ("V",): per token and head; T is
  implicit), `kind` ("token" | "head" | "scalar" | "const": what the value varies over; a per-head
  value broadcasts over tokens, () broadcasts along the row), `dtype` ("f32" default), `args` (the
  ordered operand ids), `name` (inputs, parameters, scalars), `value` (consts), `bounds` (declared
  (lo, hi) of a leaf, or None), `saved` (bool, after check), and per op: `eps` (l2norm),
  `threshold` (softplus), `dim` (rowsum, expand).
- Edge attribute `arg`: operand position (the first one when an operand repeats; `args` is exact);
  edges into the core also carry `role`.
- Ops (kdagen.dsl.ops.OPS; each with shape, adjoint, interval rules and an evaluation): add, sub, mul,
  div, neg, exp, log, sigmoid, softplus, square, rsqrt (elementwise); l2norm, rowsum, expand (per
  row); sum_tokens (backward graphs only).
- `r.core_operands()` -> {query, key, value, beta, decay, scale: node id}; `r.decay_kind` "vector"
  (per channel, KDA) or "scalar" (per head, GDN); `r.token_inputs`, `r.head_params`, `r.scalars`.
- `topo_prologue(r)`: the forward op nodes in a stable topological order.
- Saved marks: an op node is saved when the backward reads it and it is O(T·D) (a per-token row);
  the rest is recomputed. Layout: query/key inputs live on H heads, everything else on HV = G·H.

Backward graph `autodiff.backward(r, saved=None)` -> Backward(.graph, .seeds, .outputs, .saved, .core):
- leaves: the forward leaves (same ids); seeds "d_query", "d_key", "d_value", "d_beta", "d_decay"
  (op "seed": the core's adjoint, dq/dk already summed over the value heads of a q/k head, d_decay
  after the chunk-local reverse cumsum); saved forward op nodes (op "saved", `source_op`); forward
  nodes it needs but that are not saved are recomputed under their forward ids.
- outputs "grad_<name>" (op "grad") for every token input and head parameter; per-head parameter
  gradients are "sum_tokens" of per-token terms; "rowsum" reduces a row to a per-token scalar.

Bounds: `bounds.interval(r, node, dims=None)` -> (lo, hi) with ±inf; `r.decay_interval()`.
Interpreter: `interpret.forward(r, x, scale=, chunk_size=, initial_state=, cu_seqlens=)` -> (o, ht);
`interpret.backward(r, x, do, dht, ...)` -> grads by input name and "initial_state".
Inspection: `r.to_json()` (stable, sorted), `r.to_dot()` (Graphviz text); the same on Backward.
"""
from . import autodiff, bounds, interpret, ops
from .errors import DSLError
from .expr import Value, add, div, exp, expand, l2norm, log, mul, neg, rowsum, rsqrt, sigmoid, softplus, square, sub
from .recurrence import Recurrence, build, topo_prologue

__all__ = [
    "DSLError", "Recurrence", "Value", "add", "autodiff", "bounds", "build", "div", "exp", "expand",
    "interpret", "l2norm", "log", "mul", "neg", "ops", "rowsum", "rsqrt", "sigmoid", "softplus", "square",
    "sub", "topo_prologue",
]
