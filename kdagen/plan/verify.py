"""verify(plan): the invariants a plan must satisfy before any template reads it.

Each check returns messages that name the kernel and the part (role, buffer, barrier, step,
workspace); `verify` raises PlanError with all of them, `problems` returns them.
"""
from __future__ import annotations

import networkx as nx

from .cut import resident_ctas
from .model import DTYPE_BYTES, SWIZZLES, WARP, Kernel, Plan
from .problem import ARCHS, PlanError
from .smem import ALIGN, MBARRIER_BYTES

SETMAXNREG_RANGE = (24, 256)
WARPGROUP = 4                 # warps
PIPELINE_COPIES = ("cp.async", "tma")
TMA_BOX_MAX = 256             # elements per box dimension
TMA_RANKS = (1, 5)


def _roles(k: Kernel, arch) -> list[str]:
    out, where = [], f"kernel {k.name}"
    if k.threads % WARP or not 0 < k.threads <= arch.max_threads:
        out.append(f"{where}: threads={k.threads} must be a multiple of {WARP} in (0, {arch.max_threads}]")
    covered = []
    for r in k.roles:
        lo, hi = r.warps
        if not 0 <= lo < hi:
            out.append(f"{where}: role {r.name!r} has an empty or negative warp range {r.warps}")
        covered.extend(range(lo, hi))
    if sorted(covered) != list(range(k.threads // WARP)):
        dup = sorted({w for w in covered if covered.count(w) > 1})
        miss = sorted(set(range(k.threads // WARP)) - set(covered))
        out.append(f"{where}: roles must cover warps 0..{k.threads // WARP - 1} exactly once "
                   f"(overlapping: {dup}, uncovered: {miss}, beyond: {sorted(set(covered) - set(range(k.threads // WARP)))})")
    if len({r.name for r in k.roles}) != len(k.roles):
        out.append(f"{where}: role names are not unique")
    return out


def _registers(k: Kernel, arch) -> list[str]:
    out, where = [], f"kernel {k.name}"
    total = 0
    quota = [r for r in k.roles if r.setmaxnreg]
    if quota:
        if len(quota) != len(k.roles):
            out.append(f"{where}: roles {[r.name for r in k.roles if not r.setmaxnreg]} have no setmaxnreg quota while "
                       f"{[r.name for r in quota]} do: every warp group of the kernel must set one")
        if k.min_ctas_per_sm != 1:
            out.append(f"{where}: setmaxnreg needs a register cap at entry, __launch_bounds__({k.threads}, 1); the plan "
                       f"asks for {k.min_ctas_per_sm} CTAs/SM")
    for r in k.roles:
        if r.regs is None:
            continue
        total += r.regs * r.threads
        if r.setmaxnreg:
            lo, hi = SETMAXNREG_RANGE
            if not arch.setmaxnreg:
                out.append(f"{where}: role {r.name!r} uses setmaxnreg, which {arch.name} does not have")
            if r.regs % 8 or not lo <= r.regs <= hi:
                out.append(f"{where}: role {r.name!r} setmaxnreg {r.regs} must be a multiple of 8 in [{lo}, {hi}]")
            if r.warps[0] % 4 or r.warps[1] % 4:
                out.append(f"{where}: role {r.name!r} uses setmaxnreg but warps {r.warps} are not whole warp groups")
        elif r.regs > k.max_regs:
            out.append(f"{where}: role {r.name!r} plans {r.regs} registers/thread above the launch-bound cap "
                       f"{k.max_regs} ({k.threads} threads × {k.min_ctas_per_sm} CTAs/SM)")
    if total * k.min_ctas_per_sm > arch.regs_per_sm:
        out.append(f"{where}: register file overflow: Σ roles (regs × threads) = {total} × {k.min_ctas_per_sm} "
                   f"CTAs/SM > {arch.regs_per_sm}")
    return out


def _smem(k: Kernel, arch) -> list[str]:
    out, where = [], f"kernel {k.name}"
    if k.smem_bytes > arch.smem_per_block:
        out.append(f"{where}: shared memory {k.smem_bytes} B exceeds the {arch.name} limit {arch.smem_per_block} B")
    resident = resident_ctas(k, arch.name)
    if resident < k.min_ctas_per_sm:
        out.append(f"{where}: {k.min_ctas_per_sm} CTAs/SM asked for by its launch bounds, but an SM holds "
                   f"{resident} ({k.smem_bytes} B of shared memory each and 1 KB reserved; {k.threads} threads each)")
    if not k.smem_dynamic and k.smem_bytes > arch.static_smem:
        out.append(f"{where}: {k.smem_bytes} B of static shared memory exceeds {arch.static_smem} B "
                   "(mark it smem_dynamic)")
    spans = [(f"barrier {b.name!r}", b.offset, MBARRIER_BYTES * b.stages, None, 8)
             for b in k.barriers if b.kind == "mbarrier"]
    spans += [(f"buffer {b.name!r}", b.offset, b.bytes, b.alias, max(b.align, ALIGN)) for b in k.buffers]
    for name, off, size, _, align in spans:
        if off < 0 or off % align or off + size > k.smem_bytes:
            out.append(f"{where}: {name} at offset {off} (+{size} B) is misaligned or outside the "
                       f"{k.smem_bytes} B of shared memory")
    for i, (n1, o1, s1, a1, _) in enumerate(spans):
        for n2, o2, s2, a2, _ in spans[i + 1:]:
            if o1 < o2 + s2 and o2 < o1 + s1 and not (a1 is not None and a1 == a2):
                out.append(f"{where}: {n1} and {n2} overlap in shared memory without sharing an alias group")
    return out


def _swizzles(k: Kernel) -> list[str]:
    """A swizzled buffer is what bulk tensor copies write and wgmma descriptors read: each row exactly one
    swizzle span, every stage starting on the pattern's period (8 rows), the buffer aligned to it."""
    out, where = [], f"kernel {k.name}"
    for b in k.buffers:
        if b.align < ALIGN or b.align & (b.align - 1):
            out.append(f"{where}: buffer {b.name!r} align {b.align} is not a power of two >= {ALIGN}")
        if b.swizzle not in SWIZZLES:
            out.append(f"{where}: buffer {b.name!r} swizzle {b.swizzle} is not one of {SWIZZLES} bytes")
            continue
        if not b.swizzle:
            continue
        row_bytes = b.row_elems * DTYPE_BYTES[b.dtype]
        period = 8 * b.swizzle
        if row_bytes != b.swizzle:
            out.append(f"{where}: buffer {b.name!r} rows are {row_bytes} B, its {b.swizzle}-byte swizzle needs rows of "
                       f"exactly one span")
        if b.align < period:
            out.append(f"{where}: buffer {b.name!r} with a {b.swizzle}-byte swizzle must be aligned to {period} B, "
                       f"is aligned to {b.align}")
        if b.stage_bytes % period:
            out.append(f"{where}: buffer {b.name!r} stages of {b.stage_bytes} B break the {period}-byte swizzle period")
    return out


def _tensor_maps(k: Kernel, arch, workspaces: dict) -> list[str]:
    """Tensor-map parameters: a box the copy engine accepts, landing in a buffer of the same type and swizzle."""
    out, where = [], f"kernel {k.name}"
    bufs = {b.name: b for b in k.buffers}
    for p in k.params:
        m = p.tensor_map
        if (p.kind == "tensor_map") != (m is not None):
            out.append(f"{where}: parameter {p.name!r} of kind {p.kind!r} "
                       + ("lacks its tensor-map spec" if m is None else "carries a tensor-map spec"))
            continue
        if m is None:
            continue
        pw = f"{where}: tensor map {p.name!r}"
        if not arch.tma:
            out.append(f"{pw}: {arch.name} has no bulk tensor copies")
        rank = len(m.box)
        if not TMA_RANKS[0] <= rank <= TMA_RANKS[1] or len(m.dims) != rank or len(m.strides) != rank - 1:
            out.append(f"{pw}: rank {rank} box with {len(m.dims)} dims and {len(m.strides)} strides "
                       f"(ranks {TMA_RANKS[0]}..{TMA_RANKS[1]}, one stride per dim after the first)")
        if any(not 1 <= b <= TMA_BOX_MAX for b in m.box):
            out.append(f"{pw}: box {m.box} has a dimension outside 1..{TMA_BOX_MAX}")
        size = DTYPE_BYTES[m.dtype]
        inner = m.box[0] * size if m.box else 0
        if inner % 16:
            out.append(f"{pw}: inner box of {inner} B is not a multiple of 16 B")
        if m.swizzle not in SWIZZLES:
            out.append(f"{pw}: swizzle {m.swizzle} is not one of {SWIZZLES} bytes")
        elif m.swizzle and inner != m.swizzle:
            out.append(f"{pw}: inner box of {inner} B must equal its {m.swizzle}-byte swizzle span")
        for s in m.strides:
            if isinstance(s, int) and (s * size) % 16:
                out.append(f"{pw}: stride of {s} elements ({s * size} B) is not a multiple of 16 B")
        if m.tensor.startswith("ws_") and m.tensor not in workspaces:
            out.append(f"{pw}: tensor {m.tensor!r} is not a workspace of the plan")
        elif m.tensor in workspaces and workspaces[m.tensor].dtype != m.dtype:
            out.append(f"{pw}: dtype {m.dtype} but workspace {m.tensor!r} holds {workspaces[m.tensor].dtype}")
        b = bufs.get(m.buffer)
        if b is None:
            out.append(f"{pw}: lands in unknown buffer {m.buffer!r}")
            continue
        box_bytes = size
        for d in m.box:
            box_bytes *= d
        if b.dtype != m.dtype or b.swizzle != m.swizzle:
            out.append(f"{pw}: {m.dtype} boxes with a {m.swizzle}-byte swizzle land in buffer {b.name!r} of "
                       f"{b.dtype} with a {b.swizzle}-byte swizzle")
        elif b.stage_bytes % box_bytes:
            out.append(f"{pw}: boxes of {box_bytes} B do not tile a {b.stage_bytes}-byte stage of buffer {b.name!r}")
    return out


def _barriers(k: Kernel) -> list[str]:
    out, where = [], f"kernel {k.name}"
    roles = {r.name: r for r in k.roles}
    ids = {}
    for b in k.barriers:
        expected = 0
        for role, unit in b.arrivals:
            if role not in roles:
                out.append(f"{where}: barrier {b.name!r} expects arrivals from unknown role {role!r}")
                continue
            r = roles[role]
            expected += {"thread": r.threads, "warp": r.threads // WARP, "elected": 1,
                         "group": 4 * WARP}.get(unit, -10 ** 9)
            if unit not in ("thread", "warp", "elected", "group"):
                out.append(f"{where}: barrier {b.name!r} arrival unit {unit!r} is not thread/warp/elected/group")
        if b.copies < 1 or (b.copies > 1 and b.kind != "named") or expected % b.copies:
            out.append(f"{where}: barrier {b.name!r} has {b.copies} copies; only a named barrier has copies, one per "
                       f"warp group of its arriving role")
        elif b.count != expected // b.copies:
            out.append(f"{where}: barrier {b.name!r} arrive count {b.count} != {expected // b.copies}, the threads of "
                       f"its arriving roles {[r for r, _ in b.arrivals]}" + (f" per copy of {b.copies}" if b.copies > 1 else ""))
        for w in b.waiters:
            if w not in roles:
                out.append(f"{where}: barrier {b.name!r} waited on by unknown role {w!r}")
        out += _waits_meet_arrivals(k, b)
        out += _phases_counted(k, b)
        if b.kind == "cta" and b.count != k.threads:
            out.append(f"{where}: barrier {b.name!r} is a CTA barrier but counts {b.count} of {k.threads} threads")
        if b.kind == "named":
            taken = [] if b.id is None else list(range(b.id, b.id + b.copies))
            if b.id is None or not 1 <= b.id or taken[-1] > 15:
                out.append(f"{where}: named barrier {b.name!r} needs ids in 1..15 (0 is __syncthreads), got {taken or b.id}")
            for i in taken:
                if i in ids:
                    out.append(f"{where}: named barriers {ids[i]!r} and {b.name!r} share id {i}")
                ids[i] = b.name
            if b.count % WARP:
                out.append(f"{where}: named barrier {b.name!r} counts {b.count} threads, not whole warps")
        if b.kind not in ("mbarrier", "named", "cta"):
            out.append(f"{where}: barrier {b.name!r} has unknown kind {b.kind!r}")
        if b.tx_bytes < 0 or (b.tx_bytes and b.kind != "mbarrier"):
            out.append(f"{where}: barrier {b.name!r} counts {b.tx_bytes} transaction bytes; only an mbarrier counts "
                       "bytes, and never a negative number")
    return out


def _waits_meet_arrivals(k: Kernel, b) -> list[str]:
    """The steps' side of a barrier: only its declared waiters wait on it, and an mbarrier that a step waits on
    has a step of each declared arriving role arriving on it (a named barrier's bar.sync arrives as it waits; a
    CTA barrier is every thread's)."""
    out, where = [], f"kernel {k.name}"
    for s in k.steps:
        if b.name in s.waits and s.role not in b.waiters:
            out.append(f"{where}: step {s.name!r} ({s.role}) waits on barrier {b.name!r}, whose waiters are {b.waiters}")
    if b.kind == "mbarrier" and any(b.name in s.waits for s in k.steps):
        arriving = {s.role for s in k.steps if b.name in s.arrives}
        missing = [r for r, _ in b.arrivals if r not in arriving]
        if missing:
            out.append(f"{where}: barrier {b.name!r} is waited on but no step of role(s) {missing} arrives on it: "
                       "the wait would never complete")
    return out


def _phases_counted(k: Kernel, b) -> list[str]:
    """A barrier completes `phases_per_iter` phases per loop iteration (per kernel run where no loop step uses
    it): every waiting role waits that many times, and on an mbarrier every arriving role arrives that many
    times (a bar.sync or __syncthreads arrives as it waits). A step lists a barrier once per wait inside it."""
    out, where = [], f"kernel {k.name}"
    loop = [s for s in k.steps if s.loop and (b.name in s.waits or b.name in s.arrives)]
    steps = loop or k.steps
    scope = "per loop iteration" if loop else "per run"
    sides = [("waits on", r, sum(s.waits.count(b.name) for s in steps if s.role == r)) for r in b.waiters]
    if b.kind == "mbarrier":
        sides += [("arrives on", r, sum(s.arrives.count(b.name) for s in steps if s.role == r))
                  for r in dict.fromkeys(r for r, _ in b.arrivals)]
    for verb, role, n in sides:
        if n != b.phases_per_iter:
            out.append(f"{where}: role {role!r} {verb} barrier {b.name!r} {n} times {scope}, but it completes "
                       f"{b.phases_per_iter} phases")
    return out


def _pipelines(k: Kernel) -> list[str]:
    out, where = [], f"kernel {k.name}"
    roles = {r.name for r in k.roles}
    bars = {b.name: b for b in k.barriers}
    bufs = {b.name: b for b in k.buffers}
    for p in k.pipelines:
        if p.stages < 1:
            out.append(f"{where}: pipeline {p.name!r} has {p.stages} stages")
        if p.copy not in PIPELINE_COPIES:
            out.append(f"{where}: pipeline {p.name!r} copy kind {p.copy!r} is not one of {PIPELINE_COPIES}")
        ready = bars.get(p.ready)
        if ready is not None and p.copy == "tma":
            expected = sum(bufs[n].stage_bytes for n in p.buffers if n in bufs)
            if ready.tx_bytes != expected:
                out.append(f"{where}: pipeline {p.name!r} fills {expected} B per stage by bulk copies, but its ready "
                           f"barrier {p.ready!r} expects {ready.tx_bytes} transaction bytes")
        elif ready is not None and ready.tx_bytes:
            out.append(f"{where}: pipeline {p.name!r} copies with {p.copy}, which counts no bytes, yet barrier "
                       f"{p.ready!r} expects {ready.tx_bytes} transaction bytes")
        for r in [p.producer, *p.consumers]:
            if r not in roles:
                out.append(f"{where}: pipeline {p.name!r} names unknown role {r!r}")
        for bar, side in ((p.ready, [p.producer]), (p.free, p.consumers)):
            b = bars.get(bar)
            if b is None:
                out.append(f"{where}: pipeline {p.name!r} names unknown barrier {bar!r}")
                continue
            if b.kind != "mbarrier" or b.stages != p.stages:
                out.append(f"{where}: pipeline {p.name!r} barrier {bar!r} must be an mbarrier with one entry per "
                           f"stage ({p.stages}), is {b.kind} × {b.stages}")
            if sorted(r for r, _ in b.arrivals) != sorted(side):
                out.append(f"{where}: pipeline {p.name!r} barrier {bar!r} must be arrived on by {side}, "
                           f"not {[r for r, _ in b.arrivals]}")
        for name in p.buffers:
            if name not in bufs:
                out.append(f"{where}: pipeline {p.name!r} names unknown buffer {name!r}")
            elif bufs[name].stages != p.stages:
                out.append(f"{where}: pipeline {p.name!r} buffer {name!r} has {bufs[name].stages} stages, "
                           f"the pipeline {p.stages}")
    return out


def _steps(k: Kernel) -> list[str]:
    """Every buffer written before it is read, with a barrier between writer and reader when they
    are different roles or cover the data with different thread mappings; aliases never live at once."""
    out, where = [], f"kernel {k.name}"
    roles = {r.name for r in k.roles}
    bars = {b.name: b for b in k.barriers}
    bufs = {b.name: b for b in k.buffers}
    for s in k.steps:
        if s.role not in roles:
            out.append(f"{where}: step {s.name!r} runs on unknown role {s.role!r}")
        for name in s.reads + s.writes:
            if name not in bufs:
                out.append(f"{where}: step {s.name!r} touches unknown buffer {name!r}")
        for name in s.waits + s.arrives:
            if name not in bars:
                out.append(f"{where}: step {s.name!r} names unknown barrier {name!r}")
    for i, s in enumerate(k.steps):
        for name in s.reads:
            prior = [j for j in range(i) if name in k.steps[j].writes]
            if not prior:
                if name not in s.writes:      # a step may read what it wrote itself (e.g. a staging tile)
                    out.append(f"{where}: buffer {name!r} is read by step {s.name!r} before any step writes it")
                continue
            j = prior[-1]
            w = k.steps[j]
            if name not in bufs or bufs[name].scope == "warp" or (w.role, w.mapping) == (s.role, s.mapping):
                continue
            if not _synced(k, k.steps[j + 1:i + 1], s.role, w.role):
                out.append(f"{where}: buffer {name!r} written by step {w.name!r} ({w.role}/{w.mapping}) and read by "
                           f"step {s.name!r} ({s.role}/{s.mapping}) with no barrier between them")
    read = {n for s in k.steps for n in s.reads}
    written = {n for s in k.steps for n in s.writes}
    for b in k.buffers:
        if b.name not in read | written:
            out.append(f"{where}: buffer {b.name!r} is never used by any step")
        elif b.name not in read:
            out.append(f"{where}: buffer {b.name!r} is written but never read")
    return out


def _synced(k: Kernel, between: list, waiter: str, arriver: str) -> bool:
    """Whether a step of role `waiter` among `between` waits on a barrier that role `arriver` arrives on."""
    bars = {b.name: b for b in k.barriers}
    return any(t.role == waiter and b in bars and arriver in [r for r, _ in bars[b].arrivals]
               for t in between for b in t.waits)


def _aliases(k: Kernel) -> list[str]:
    """Buffers of one alias group live in disjoint step ranges, and the later takes the place of the earlier only
    after a barrier: a step of the later's first user's role, after the earlier's last use, waits on a barrier that
    role of the last use arrives on; where both are used inside the loop, likewise from the later's last use in an
    iteration to the earlier's first use in the next."""
    out, where = [], f"kernel {k.name}"
    loop = [i for i, s in enumerate(k.steps) if s.loop]

    def uses(name: str) -> list[int]:
        return [i for i, s in enumerate(k.steps) if name in s.reads + s.writes]
    groups: dict[str, list[str]] = {}
    for b in k.buffers:
        if b.alias and uses(b.name):
            groups.setdefault(b.alias, []).append(b.name)
    for g, names in groups.items():
        for i, n1 in enumerate(names):
            for n2 in names[i + 1:]:
                u1, u2 = uses(n1), uses(n2)
                if u1[0] <= u2[-1] and u2[0] <= u1[-1]:
                    out.append(f"{where}: buffers {n1!r} and {n2!r} share alias group {g!r} but are live at once "
                               f"(steps {u1[0]}..{u1[-1]} and {u2[0]}..{u2[-1]})")
                    continue
                (first, u1), (later, u2) = sorted(((n1, u1), (n2, u2)), key=lambda m: m[1][0])
                if not _synced(k, k.steps[u1[-1] + 1:u2[0] + 1], k.steps[u2[0]].role, k.steps[u1[-1]].role):
                    out.append(f"{where}: buffer {later!r} takes the place of {first!r} (alias group {g!r}) with no "
                               f"barrier between {first!r}'s last use and its first")
                l1, l2 = [j for j in u1 if j in loop], [j for j in u2 if j in loop]
                if l1 and l2 and not _synced(k, k.steps[l2[-1] + 1:loop[-1] + 1] + k.steps[loop[0]:l1[0] + 1],
                                             k.steps[l1[0]].role, k.steps[l2[-1]].role):
                    out.append(f"{where}: buffer {first!r} takes the place of {later!r} (alias group {g!r}) in the "
                               f"next loop iteration with no barrier between")
    return out


def _params(k: Kernel) -> list[str]:
    names = [p.name for p in k.params]
    dup = sorted({n for n in names if names.count(n) > 1})
    return [f"kernel {k.name}: duplicate parameters {dup}"] if dup else []


def _graph(plan: Plan) -> list[str]:
    """Kernel DAG from workspaces: acyclic, each workspace produced by an earlier kernel than its readers."""
    out = []
    order = {k.name: i for i, k in enumerate(plan.kernels)}
    if len(order) != len(plan.kernels):
        out.append("plan: kernel names are not unique")
    g = nx.DiGraph()
    g.add_nodes_from(order)
    written = {}
    for k in plan.kernels:
        for s in k.steps:
            for n in s.global_writes:
                if n.startswith("ws_"):
                    written.setdefault(n, set()).add(k.name)
    ws_names = {w.name for w in plan.workspaces}
    for w in plan.workspaces:
        if w.producer not in order:
            out.append(f"plan: workspace {w.name!r} is produced by unknown kernel {w.producer!r}")
            continue
        if w.producer not in written.get(w.name, set()):
            out.append(f"plan: workspace {w.name!r} names producer {w.producer!r}, whose steps never write it")
        for c in w.consumers:
            if c not in order:
                out.append(f"plan: workspace {w.name!r} is consumed by unknown kernel {c!r}")
                continue
            g.add_edge(w.producer, c, workspace=w.name)
            if order[c] <= order[w.producer]:
                out.append(f"plan: workspace {w.name!r} is consumed by {c!r} (launch {order[c]}) before its producer "
                           f"{w.producer!r} (launch {order[w.producer]}) runs")
    for k in plan.kernels:
        for s in k.steps:
            for n in s.global_reads:
                if n.startswith("ws_") and n not in ws_names:
                    out.append(f"kernel {k.name}: step {s.name!r} reads workspace {n!r}, which the plan does not declare")
                elif n.startswith("ws_") and k.name not in plan.workspace(n).consumers:
                    out.append(f"kernel {k.name}: step {s.name!r} reads workspace {n!r} but is not among its consumers")
            for n in s.global_writes:
                if n.startswith("ws_") and n not in ws_names:
                    out.append(f"kernel {k.name}: step {s.name!r} writes workspace {n!r}, which the plan does not declare")
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        out.append("plan: kernel dependency cycle " + " -> ".join([u for u, _ in cycle] + [cycle[0][0]]))
    return out


def problems(plan: Plan) -> list[str]:
    """Every violated invariant, as messages naming the part."""
    arch_name = plan.problem.get("arch")
    if arch_name not in ARCHS:
        return [f"plan: unknown arch {arch_name!r}"]
    arch = ARCHS[arch_name]
    out = []
    workspaces = {w.name: w for w in plan.workspaces}
    for k in plan.kernels:
        for check in (_roles, _registers, _smem):
            out += check(k, arch)
        for check in (_swizzles, _barriers, _pipelines, _steps, _aliases, _params):
            out += check(k)
        out += _tensor_maps(k, arch, workspaces)
        # a kernel reads a workspace's pointer as its parameter's C type: another dtype would read garbage
        out += [f"kernel {k.name}: parameter {p.name!r} is {p.dtype} but the workspace holds {workspaces[p.name].dtype}"
                for p in k.params if p.kind == "ptr" and p.name in workspaces and p.dtype != workspaces[p.name].dtype]
    for name in plan.saved:
        if name not in workspaces:
            out.append(f"plan: saved workspace {name!r} is not declared")
        elif workspaces[name].producer not in {k.name for k in plan.direction("forward")}:
            out.append(f"plan: saved workspace {name!r} is not produced by a forward kernel")
    return out + _graph(plan)


def verify(plan: Plan) -> Plan:
    """The plan itself when every invariant holds; PlanError listing every violation otherwise."""
    found = problems(plan)
    if found:
        raise PlanError(f"plan {plan.uri} fails verification:\n  " + "\n  ".join(found))
    return plan
