"""kdagen.codegen: Plan + recurrence -> CUDA text, and writing it to generated/<uri>/.

- `render(plan, recurrence, directions)` -> {"forward.cu": ..., "backward.cu": ...}: each kernel from
  templates/<kernel.template>, the prologue (`prologue`) and prepare_bwd's prologue and adjoint (`adjoint`)
  emitted from the DSL graphs by `expr.emit`.
- `emit(root, plan, recurrence, directions)` writes files only when their content changes.
- `content_hash(text)`: the short digest recorded with a rendered unit.
- `expr.emit(graph, outputs, given)`: a DSL graph (forward prologue or backward adjoint) as CUDA.
- `nvcc` (inspection: ptxas resources, PTX, SASS) and `emulate` (the rendered kernels run on the CPU,
  for tests) are imported on their own: `from kdagen.codegen import emulate, nvcc`.
"""
from .adjoint import backward_prologue
from .env import environment, template_exists
from .expr import Block, CodegenError, emit as emit_block
from .files import emit, emitted_files, write_if_different
from .prologue import Prologue, forward_prologue
from .render import (DIRECTIONS, HEADERS, content_hash, direction_available, header_files, header_sources,
                     has_entries, kernel_context, render, render_kernel, render_unit, signature, smem_carveout, unit_name)

__all__ = [
    "Block", "CodegenError", "DIRECTIONS", "HEADERS", "Prologue", "backward_prologue", "content_hash",
    "direction_available", "emit", "emit_block", "emitted_files", "environment", "forward_prologue", "header_files",
    "header_sources", "has_entries", "kernel_context", "render", "render_kernel", "render_unit", "signature", "smem_carveout",
    "template_exists", "unit_name", "write_if_different",
]
