"""The mma16 family: chunk 16, mma.sync m16n8k16 with ldmatrix and cp.async; sm_80 and sm_90a alike.

Forward: a token-parallel prepare and a head-parallel recurrence (the state in fp32 mma accumulators);
backward: the states recompute, the serial dS pass with its checkpoints, the reverse recurrence per block of
chunks, the token-parallel prepare_bwd and a fixed-order parameter reduction. docs/kernels.md §1.
"""
from __future__ import annotations

from ...problem import Problem
from ..base import Family, Planned, facts, form_of
from . import backward, forward

CHUNK = 16


class Mma16(Family):
    def build(self, problem: Problem) -> Planned:
        f = facts(problem)
        C, K, V = CHUNK, problem.K, problem.V
        form = form_of(f, C)
        ws = (forward.forward_workspaces(C, K, f.KD) + [forward.state_block_workspace(K, V)]
              + backward.backward_workspaces(C, K, V, f.head_params))
        common = dict(varlen=problem.varlen, state_layout=problem.state_layout, ws=ws)
        kernels = [
            forward.prepare(C=C, K=K, form=form, varlen=problem.varlen, f=f, ws=ws),
            forward.recurrence(C=C, K=K, V=V, KD=f.KD, mode="forward", **common),
            forward.recurrence(C=C, K=K, V=V, KD=f.KD, mode="store_states", **common),
            *(make(C=C, K=K, V=V, io=problem.dtypes.io, state_layout=problem.state_layout, ws=ws)
              for make in (backward.dstate_pass, backward.recurrence_bwd)),
            backward.prepare_bwd(C=C, K=K, f=f, ws=ws),
        ]
        if f.head_params:
            kernels.append(backward.param_reduce(K=K, head_params=f.head_params))
        lo, hi = f.decay_interval
        return Planned(kernels=kernels, workspaces=ws, saved=[*forward.PREPARE_OUTPUTS, "ws_state_blocks"], exponent_form=form,
                       notes=[f"exponent form {form!r}: decay {f.decay_kind} in [{lo}, {hi}] at chunk {C}"])


FAMILY = Mma16(name="mma16", chunk=CHUNK, archs=("sm_90a", "sm_80"), head_dims=(64, 128),
               directions=("forward", "backward"), headers=("common", "sm80"), priority=0,
               summary="chunk 16, mma.sync + ldmatrix + cp.async, a load warp feeding mma warps; sm_80 and sm_90a")
