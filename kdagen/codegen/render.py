"""Plan + recurrence -> CUDA text: one translation unit per direction, one template per kernel kind.

Each kernel renders from templates/<kernel.template> with `kernel_context`; the unit template puts a
header naming the configuration, the templates/common helpers and the kernels together. The
rendered text is self-contained (only <cuda_bf16.h> from the toolkit), so NVRTC compiles it as is.
"""
from __future__ import annotations

import hashlib

from .. import __version__
from ..paths import templates_dir
from ..plan.model import CTYPES, Kernel, Plan, param_ctype
from . import lines
from .adjoint import backward_prologue
from .env import environment, template_exists
from .expr import CodegenError
from .prologue import forward_prologue

# The helper headers in inclusion order, as (group, file): "common" for every kernel, "sm80" (mma.sync, ldmatrix,
# cp.async) and "sm90" (wgmma, bulk tensor copies, setmaxnreg) where a plan's kernels use them (Plan.headers).
HEADERS = (("common", "types.cuh"), ("common", "ptx.cuh"), ("sm80", "ptx.cuh"), ("sm90", "ptx.cuh"),
           ("common", "math.cuh"), ("common", "barriers.cuh"), ("common", "reductions.cuh"), ("common", "sequences.cuh"),
           ("sm80", "mma.cuh"), ("sm80", "ldmatrix.cuh"), ("sm80", "copies.cuh"), ("sm90", "wgmma.cuh"),
           ("sm90", "tma.cuh"))
DIRECTIONS = ("forward", "backward")


def unit_name(direction: str, entries: bool = False, kernel: str | None = None) -> str:
    """A direction's unit (each kernel's main entry point), or its entries unit (the kernels' further entry points,
    `Kernel.entries`: compiled only when a call launches one); with `kernel`, that kernel's program alone (the
    name its #line directives and a kept source file carry)."""
    return f"{direction}{'_entries' if entries else ''}{f'_{kernel}' if kernel else ''}.cu"


def header_files(groups) -> list[str]:
    """The header paths (relative to templates/) of these groups, in inclusion order."""
    return [f"{g}/{name}" for g, name in HEADERS if g in groups]


def header_sources(groups) -> list[tuple[str, str]]:
    """(path, text) of the headers of these groups, inserted verbatim: plain CUDA (inline PTX uses `{%`)."""
    return [(path, (templates_dir() / path).read_text()) for path in header_files(groups)]


def probe_unit(groups, kernels_text: str) -> str:
    """Hand-written kernels (a test's probes) as one CUDA unit for NVRTC or nvcc: the groups' headers pasted before
    them, as templates/unit.cu.j2 pastes a plan's."""
    headers = "\n".join(f"// ===== templates/{path} =====\n{text}" for path, text in header_sources(groups))
    return f"#include <cuda_bf16.h>\n{headers}\n{kernels_text}"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def signature(kernel: Kernel) -> str:
    """The C parameter list, in the plan's order (ops pass arguments in the same order)."""
    out = []
    for p in kernel.params:
        if p.kind == "ptr":
            out.append(f"{param_ctype(p)} __restrict__ {p.name}")
        elif p.kind == "tensor_map":
            out.append(f"const __grid_constant__ {param_ctype(p)} {p.name}")
        else:
            out.append(f"{param_ctype(p)} {p.name}")
    return ",\n    ".join(out)


def smem_carveout(kernel: Kernel) -> str:
    """Typed pointers into one shared byte array at the plan's offsets (plus ld_/stride_ constants)."""
    if kernel.smem_bytes == 0:
        return "// no shared memory"
    if kernel.smem_dynamic:
        lines = [f"// shared memory: {kernel.smem_bytes} B, dynamic (above the static limit)",
                 "KDG_DYNAMIC_SMEM(smem_raw);"]
    else:
        align = max([16, *(b.align for b in kernel.buffers)])  # the plan's offsets are relative to the array
        lines = [f"// shared memory: {kernel.smem_bytes} B, static",
                 f"__shared__ __align__({align}) unsigned char smem_raw[{kernel.smem_bytes}];"]
    for b in kernel.barriers:
        if b.kind == "mbarrier":
            lines.append(f"kdg::u64* const bar_{b.name} = reinterpret_cast<kdg::u64*>(smem_raw + {b.offset});"
                         f"  // mbarrier {b.name}[{b.stages}], arrive count {b.count}")
    for b in kernel.buffers:
        ct = CTYPES[b.dtype]
        shape = " x ".join(str(d) for d in b.shape)
        extra = f", {b.stages} stages" if b.stages > 1 else ""
        extra += f", per warp ×{b.copies}" if b.scope == "warp" else ""
        lines.append(f"{ct}* const s_{b.name} = reinterpret_cast<{ct}*>(smem_raw + {b.offset});"
                     f"  // {b.name} [{shape}] {b.dtype}, ld {b.row_elems}{extra}"
                     + (f", alias {b.alias}" if b.alias else ""))
        if len(b.shape) > 1:
            lines.append(f"[[maybe_unused]] constexpr int ld_{b.name} = {b.row_elems};")
        if b.stages > 1 or b.copies > 1:
            lines.append(f"constexpr int stride_{b.name} = {b.elems};  // elements per stage / warp copy")
    return "\n".join(lines)


def kernel_context(plan: Plan, kernel: Kernel, recurrence, entries: bool | str = False) -> dict:
    """Everything a kernel template reads; StrictUndefined turns a missing name into an error. `entries`: render
    the kernel's further entry points (Kernel.entries) instead of its main one, or "all": both (one host unit for
    the CPU emulator)."""
    p = plan.problem
    K, V, C = p["K"], p["V"], plan.chunk
    ctx = dict(
        plan=plan, kernel=kernel, problem=p, opt=kernel.options, entries=entries,
        C=C, K=K, V=V, G=p["gva_ratio"], KD=K if plan.decay_kind == "vector" else 1,
        form=plan.exponent_form, decay_kind=plan.decay_kind, varlen=p["varlen"], state_layout=p["state_layout"],
        ctype={prm.name: CTYPES[prm.dtype] for prm in kernel.params if prm.kind == "ptr"},
        signature=signature(kernel), smem=smem_carveout(kernel),
        launch_bounds=f"__launch_bounds__({kernel.threads}, {kernel.min_ctas_per_sm})",
    )
    if kernel.kind == "prepare":
        ctx["prologue"] = forward_prologue(recurrence, {prm.name: prm.dtype for prm in kernel.params},
                                           row_scaled=getattr(kernel.options, "operands", None) == "raw")
    elif kernel.kind == "prepare_bwd":
        ctx["k1"] = backward_prologue(recurrence, ctx["ctype"])
    return ctx


def _marked_kernel(plan: Plan, kernel: Kernel, recurrence, entries: bool | str = False) -> str:
    if not template_exists(kernel.template):
        raise CodegenError(f"kernel {kernel.name!r}: template templates/{kernel.template} does not exist")
    return environment().get_template(kernel.template).render(**kernel_context(plan, kernel, recurrence, entries))


def render_kernel(plan: Plan, kernel: Kernel, recurrence, entries: bool | str = False) -> str:
    """One kernel's CUDA (its further entry points with `entries`), with `#line` directives to its templates (the
    rest attributed to "<uri>/<kernel>")."""
    return lines.resolve(_marked_kernel(plan, kernel, recurrence, entries), f"{plan.uri}/{kernel.name}")


def _unit_kernels(plan: Plan, direction: str, entries: bool, kernel: str | None) -> list[Kernel]:
    """The kernels a unit holds: the direction's (with `entries`, those with further entry points), or `kernel`."""
    return [k for k in plan.direction(direction) if (k.entries or not entries) and kernel in (None, k.name)]


def header(plan: Plan, direction: str, entries: bool = False, kernel: str | None = None) -> str:
    p = plan.problem
    rec = p["recurrence"]
    kernels = _unit_kernels(plan, direction, entries, kernel)
    names = (lambda k: ", ".join(k.entries) + " (their launches set the grid)") if entries else (lambda k: k.name)
    lines = [
        f"kdagen {__version__} generated CUDA: {plan.uri} ({direction}{', further entry points' if entries else ''})",
        f"configuration: recurrence {p['name']} (graph {rec['graph_sha']}, decay {rec['decay_kind']} in "
        f"[{rec['decay_interval'][0]}, {rec['decay_interval'][1]}]), K={p['K']} V={p['V']}, "
        f"io {p['dtypes']['io']}, g {p['dtypes']['g']}, beta {p['dtypes']['beta']}, state {p['dtypes']['state']}, "
        f"GVA {p['gva_ratio']}, varlen {p['varlen']}, state layout {p['state_layout']}, {p['arch']}",
        f"family {plan.family}, chunk {plan.chunk}, exponent form {plan.exponent_form}",
        "kernels: " + ", ".join(f"{names(k)} (grid {k.grid}, {k.threads} threads, {k.smem_bytes} B smem)"
                                for k in kernels),
        "Do not edit: rendered from templates/ by kdagen.codegen; `kdagen plan` shows the plan.",
    ]
    return "".join(f"// {line}\n" for line in lines)


def direction_available(plan: Plan, direction: str) -> bool:
    """True when every kernel of that direction has its template."""
    kernels = plan.direction(direction)
    return bool(kernels) and all(template_exists(k.template) for k in kernels)


def has_entries(plan: Plan, direction: str) -> bool:
    """Whether a kernel of the direction has further entry points (so the direction has an entries unit)."""
    return any(k.entries for k in plan.direction(direction))


def render_unit(plan: Plan, recurrence, direction: str, entries: bool = False, kernel: str | None = None) -> str:
    """One self-contained translation unit with every kernel of `direction`, or (`entries`) the further entry
    points of those that have some; with `kernel`, that kernel of the direction alone (a unit compiled beside its
    siblings: kdagen.ops.config.PER_KERNEL)."""
    if direction not in DIRECTIONS:
        raise CodegenError(f"direction {direction!r}: one of {DIRECTIONS}")
    chosen = _unit_kernels(plan, direction, entries, kernel)
    if not chosen:
        raise CodegenError(f"{plan.uri}: no {direction} kernel " + (f"named {kernel!r}" if kernel else
                                                                     "has further entry points"))
    kernels = [_marked_kernel(plan, k, recurrence, entries) for k in chosen]
    common = [(path, lines.mark_text(text, f"templates/{path}")) for path, text in header_sources(plan.headers)]
    text = environment().get_template("unit.cu.j2").render(header=header(plan, direction, entries, kernel),
                                                           common=common, kernels=kernels)
    return lines.resolve(text, f"{plan.uri}/{unit_name(direction, entries, kernel)}")


def render(plan: Plan, recurrence, directions=DIRECTIONS) -> dict:
    """{file name: text} for the requested directions (one direction may be given as its name): each direction's
    unit, and its entries unit where it has one."""
    if isinstance(directions, str):
        directions = [directions]
    return {unit_name(d, entries): render_unit(plan, recurrence, d, entries) for d in directions
            for entries in (False, True) if not entries or has_entries(plan, d)}

