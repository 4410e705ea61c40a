"""The wgmma64 family (sm_90a): chunk 64; a token-parallel prepare (16-row sub-blocks, any decay) and a
head-parallel recurrence whose producer warp feeds a ring of shared-memory stages by bulk tensor copies and
whose consumer warp groups run wgmma with the state in registers. Ranked below mma16, except for inference
calls with few (sequence, head) pairs, where its 64-token chain steps (≈ 42 ns per token against mma16's ≈ 63
on the H200) outweigh its costlier prepare, and for training calls at head dim 128 (with at least 16 pairs
at 64), where its backward wins (families.ranking). docs/kernels.md §3.

The backward (docs/kernels.md §4), planned where the recurrence keeps S_c for it: the serial dS chain `dstate`,
the chunk-parallel `chunk_bwd` and `prepare_bwd` (by 16-row blocks, on tensor cores or CUDA cores as the decay's
diagonal form allows), and mma16's `param_reduce` for the head parameters.
"""
from __future__ import annotations

from ...problem import Problem
from ..base import Family, Planned, facts, seq_params
from ..mma16 import backward as mma16_backward
from . import backward, forward


class Wgmma64(Family):
    def check(self, problem: Problem) -> tuple[bool, str]:
        if problem.K != problem.V:
            return False, f"{self.name}: K={problem.K} != V={problem.V} (its recurrence tiles assume K = V)"
        f = facts(problem)
        limit = backward.max_head_params(problem.K, f)
        if len(f.head_params) > limit:
            return False, (f"{self.name}: {len(f.head_params)} head parameters (its prepare_bwd stages at most "
                           f"{limit})")
        return True, f"{self.name}: supported"

    def build(self, problem: Problem) -> Planned:
        f = facts(problem)
        K = problem.K
        # the backward's kernels read S_c, which the recurrence writes only in a CTA of one consumer group
        grads = forward.keeps_states(problem.V)
        # q and k as the inputs hold them in the recurrence where the prepare's products take them so (the decayed
        # tiles then only for the backward)
        qk = forward.qk_form(forward.operand_form(f, forward.diagonal_form(f)))
        ws = forward.forward_workspaces(K, f.KD, grads, qk)
        ws += [forward.states_workspace(K, problem.V),
               *backward.backward_workspaces(K, problem.V, f.head_params)] if grads else []
        common = dict(K=K, V=problem.V, KD=f.KD, varlen=problem.varlen, state_layout=problem.state_layout, ws=ws)
        kernels = [forward.prepare(K=K, varlen=problem.varlen, f=f, ws=ws),
                   forward.recurrence(**common, qk=qk, f=f)]
        if grads:
            kernels += [backward.dstate(**common), backward.chunk_bwd(**common),
                        backward.prepare_bwd(K=K, varlen=problem.varlen, f=f, ws=ws)]
            kernels += [mma16_backward.param_reduce(K=K, head_params=f.head_params, seq=seq_params(problem.varlen),
                                                    chunk=forward.CHUNK)] if f.head_params else []
        lo, hi = f.decay_interval
        diagonal = forward.diagonal_form(f)
        how = {"scalar": "one factor per pair, 2^(γi−γj) ≤ 1 on raw tensor-core products (γ in fp32), any bound",
               "factored": "the diagonal 16-row blocks factored at their start on tensor cores (the bound keeps "
                           "e^(Γ_in−Γj) in range), the blocks between them split at block boundaries",
               "running": "every factor a product of per-token decays ≤ 1 (16-row sub-blocks), any bound"}[diagonal]
        return Planned(kernels=kernels, workspaces=ws, saved=[*forward.PREPARE_OUTPUTS, "ws_states"] if grads else [],
                       exponent_form="factored" if diagonal == "factored" else "relative",
                       notes=[f"decay {f.decay_kind} in [{lo}, {hi}]: {how}"])


FAMILY = Wgmma64(name="wgmma64", chunk=forward.CHUNK, archs=("sm_90a",), head_dims=(64, 128),
                 directions=("forward", "backward"), headers=("common", "sm80", "sm90"), priority=-1,
                 ranks={"few_pairs": 1, "training": 1},
                 summary="chunk 64, bulk tensor copies into an mbarrier ring, wgmma consumer warp groups with "
                         "setmaxnreg quotas; sm_90a, forward and backward")
