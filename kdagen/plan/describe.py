"""Readable views of a plan: the table `kdagen plan` prints and the Graphviz kernel graph (--dot)."""
from __future__ import annotations

from .model import Kernel, Plan


def _table(rows: list[list], header: list[str]) -> list[str]:
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [fmt(cells[0]), fmt(["-" * w for w in widths]), *[fmt(r) for r in cells[1:]]]


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def kernel_table(k: Kernel) -> list[str]:
    lines = [f"kernel {k.name}  ({k.direction}, template {k.template})",
             f"  grid {_shape(k.grid)} x {k.threads} threads, launch bounds ({k.threads}, {k.min_ctas_per_sm}) "
             f"-> <= {k.max_regs} regs/thread; shared memory {k.smem_bytes} B "
             f"({'dynamic' if k.smem_dynamic else 'static'})" + (f"; spills allowed {k.spill_allowance} B"
                                                                  if k.spill_allowance else ""),
             f"  {k.note}"]
    if k.entries:
        lines.append(f"  further entry points (same parameters, a constant switched): {', '.join(k.entries)}")
    lines += ["", "  roles"]
    lines += ["    " + x for x in _table(
        [[r.name, f"{r.warps[0]}..{r.warps[1] - 1}", r.threads, r.regs if r.regs is not None else "-",
          "setmaxnreg" if r.setmaxnreg else "cap", ", ".join(r.work)] for r in k.roles],
        ["role", "warps", "threads", "regs", "budget", "work"])]
    if k.barriers:
        lines += ["", "  barriers"]
        lines += ["    " + x for x in _table(
            [[b.name, b.kind + (f" id {b.id}" if b.id is not None else "") + (f" ×{b.copies}" if b.copies > 1 else ""),
              b.stages, b.count, b.tx_bytes or "-", " + ".join(f"{r}/{u}" for r, u in b.arrivals), ", ".join(b.waiters),
              b.phases_per_iter, b.offset if b.kind == "mbarrier" else "-"] for b in k.barriers],
            ["barrier", "kind", "stages", "arrive count", "tx bytes", "arrivals", "waiters", "phases/iter", "offset"])]
    if k.pipelines:
        lines += ["", "  pipelines"]
        lines += ["    " + x for x in _table(
            [[p.name, p.stages, p.producer, ", ".join(p.consumers), f"{p.ready}/{p.free}", p.copy, ", ".join(p.buffers)]
             for p in k.pipelines], ["pipeline", "stages", "producer", "consumers", "ready/free", "copy", "buffers"])]
    if k.buffers:
        lines += ["", "  shared memory"]
        lines += ["    " + x for x in _table(
            [[b.name, _shape(b.shape), b.dtype, b.row_elems, b.stages, b.scope + (f" x{b.copies}" if b.copies > 1 else ""),
              b.alias or "-", b.swizzle or "-", b.align, b.offset, b.bytes] for b in k.buffers],
            ["buffer", "shape", "dtype", "ld", "stages", "scope", "alias", "swizzle", "align", "offset", "bytes"])]
    maps = [p for p in k.params if p.tensor_map is not None]
    if maps:
        lines += ["", "  tensor maps (encoded on the host, passed by value)"]
        lines += ["    " + x for x in _table(
            [[p.name, p.tensor_map.tensor, p.tensor_map.dtype, _shape(p.tensor_map.dims), _shape(p.tensor_map.strides),
              _shape(p.tensor_map.box), p.tensor_map.swizzle, p.tensor_map.buffer] for p in maps],
            ["parameter", "tensor", "dtype", "dims", "strides", "box", "swizzle", "buffer"])]
    lines += ["", "  steps (program order)"]
    lines += ["    " + x for x in _table(
        [[s.name, s.role, s.mapping, "loop" if s.loop else "", ", ".join(s.waits) or "-", ", ".join(s.arrives) or "-",
          ", ".join(s.reads) or "-", ", ".join(s.writes) or "-"] for s in k.steps],
        ["step", "role", "mapping", "", "waits", "arrives", "reads", "writes"])]
    return lines


def describe(plan: Plan, kernels=None) -> str:
    """The plan as tables: problem, kernels (roles, barriers, pipelines, buffers, steps), workspaces."""
    p = plan.problem
    rec = p["recurrence"]
    lines = [f"plan {plan.uri}",
             f"  recurrence {p['name']}: decay {plan.decay_kind} in [{plan.decay_interval[0]}, {plan.decay_interval[1]}]"
             f" -> exponent form {plan.exponent_form!r} at chunk {plan.chunk} (graph {rec['graph_sha']})",
             f"  family {plan.family} (chunk {plan.chunk}, headers {', '.join(plan.headers)})",
             f"  K={p['K']} V={p['V']} GVA {p['gva_ratio']} varlen {p['varlen']} state {p['state_layout']} "
             f"dtypes {p['dtypes']} arch {p['arch']}", *[f"  note: {n}" for n in plan.notes], ""]
    for k in plan.kernels:
        if kernels is None or k.name in kernels:
            lines += kernel_table(k) + [""]
    C = plan.chunk
    lines += [f"saved by the forward for the backward: {', '.join(plan.saved) or 'nothing'}", "", "workspaces"]
    lines += ["  " + x for x in _table(
        [[w.name, _shape(w.shape), w.dtype, w.producer, ", ".join(w.consumers), f"{w.bytes_per_chunk_head / C:g}", w.note]
         for w in plan.workspaces],
        ["workspace", "shape", "dtype", "producer", "consumers", "B/token·head", "holds"])]
    return "\n".join(lines) + "\n"


def to_dot(plan: Plan) -> str:
    """Kernels as boxes in launch order, workspaces as edges from producer to consumer."""
    lines = [f'digraph "{plan.uri}" {{', "  rankdir=LR;", "  node [shape=box, fontname=monospace];"]
    for i, k in enumerate(plan.kernels):
        lines.append(f'  "{k.name}" [label="{i}: {k.name}\\n{k.direction}, grid {k.grid}\\n{k.threads} threads, '
                     f'{k.smem_bytes} B smem"];')
    for w in plan.workspaces:
        for c in w.consumers:
            lines.append(f'  "{w.producer}" -> "{c}" [label="{w.name}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
