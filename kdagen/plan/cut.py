"""Whether a call is cut into segments, and how long they are: the cost models of docs/segments.md §5 (an inference
forward) and §6 (a training step).

Uncut, each (sequence, value head) pair walks its T/64 chunks in order on V/64 CTAs: time ≈ chunks × the family's
serial step (in waves of the CTAs the SMs hold at once), however many SMs idle. Cut into S segments
(kdagen.ops.segmented), the recurrence runs over all segments at once, each pass the longer of its serial walk
(T/S/64 steps) and its read of every token (the token-heads at the family's streaming cost): the maps pass (both
maps in one launch, twice the CTAs, a cheaper step and fewer bytes) and the ordinary pass where the recurrence has a
maps pass, three ordinary passes where it has not — plus a chain of S steps. The planner takes the segment length
(1024·2^i tokens, below T and dividing it) with the least modelled time, and cuts only where that is under
CUT_MARGIN of the uncut time. The constants are the H200's wgmma64 (benchmarks/NOTES.md, 2026-12-01, session 10);
a family without measured constants is never cut by the model (KDAGEN_CUT=<tokens> still cuts it). `kdagen plan
--inference --pairs P --tokens T` prints the decision.

A training step cut into S segments (forward and backward on the view [B·S, T/S]) runs the forward's recurrence for
the two maps (one maps pass, or two ordinary passes) and then the ordinary pass, and the dS chain twice (its C pass
from dht = 0 for each segment's C, then with each segment's dht), all segments at once, plus two chains; every
other kernel of the step is token- or block-parallel and costs the same cut or not. Each of those passes takes the
longer of its serial walk and its CTA-steps spread over the SMs (`TRAIN_STEPS`). `kdagen plan --pairs P --tokens T` (without --inference) prints that decision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .model import Kernel

CHUNK_TOKENS = 64
H200_SMS = 132                       # the SM count a plan is made for when no device says otherwise
SMEM_PER_SM = {"sm_90a": 228 * 1024, "sm_80": 164 * 1024}
# measured per family: µs per chunk step of one CTA's serial walk at K = 128 (ordinary pass, maps pass), ns per
# token-head of one ordinary pass at K = V = 128 (the maps pass reads MAPS_BYTES of it: no q_decayed, Mqk, o)
STEP_US = {"wgmma64": 1.6}
MAPS_STEP_US = {"wgmma64": 1.3}      # fitted to the cut shapes' graph times (session 10, runs 5 and 6)
STREAM_NS = {"wgmma64": 0.55}
MAPS_BYTES = 0.75
CHAIN_STEP_US = 4.4                  # one position of the chain kernel (templates/segments/chain.cu; session 11, runs 6-7)
FIXED_US = 20.0                      # the cut's own launches and allocations, the chain's launch
CUT_MARGIN = 0.85                    # cut only where the model gives under this share of the uncut time
MIN_SEGMENT = 1024
CHAIN_DIMS = (32, 64, 96, 128)       # the state sizes D = K = V the chain kernel is compiled for
# training, per family: (µs per chunk step of one CTA's walk, µs of one SM per CTA-step once CTAs share the SMs) at
# K = 128, chunks of TRAIN_CHUNK tokens, for the forward's recurrence keeping its states, its maps pass where it has
# one (else the maps are two more ordinary passes), the dS chain (dstate) and its C pass (starts, else as dstate).
# mma16: fitted to backward_timing.py on the view shapes 1×65536×4, 32×2048×4, 16×4096×4, 1×32768×16, 8×4096×16,
# 4×8192×16 (×128) (NOTES, session 11, run 1); wgmma64: the walks from the uncut kernels at 4 and 16 pairs, the SM
# costs from the cut ones at 1×65536×4 (16 segments) and 1×32768×16 (4) (×128; NOTES, session 15, runs 1 and 3).
TRAIN_CHUNK = {"mma16": 16, "wgmma64": 64}
# (its keys are also the families whose training step can be cut: their backward has the C pass)
TRAIN_STEPS = {"mma16": {"recurrence": (1.06, 0.90), "dstate": (1.5, 0.61)},
               "wgmma64": {"recurrence": (1.85, 2.45), "maps": (1.3, 1.22), "dstate": (1.96, 3.05),
                           "starts": (1.8, 1.78)}}
# each pass's CTAs per (sequence, head): (which of the plan's slices, times): the maps pass doubles the recurrence's
PASS_CTAS = {"recurrence": (0, 1), "maps": (0, 2), "dstate": (1, 1), "starts": (1, 1)}


@dataclass(frozen=True)
class Cut:
    """The decision for one call shape: `segments` per sequence (1: not cut) of `tokens` each, the modelled times
    (µs) of the passes a cut changes, uncut and cut (0 where the family has no model), and why."""
    segments: int
    tokens: int
    uncut_us: float
    cut_us: float
    why: str

    def describe(self) -> str:
        if self.segments == 1:
            return f"not cut: {self.why}"
        modelled = (f"; modelled serial passes {self.uncut_us / 1e3:.2f} ms uncut, {self.cut_us / 1e3:.2f} ms cut"
                    if self.uncut_us else "")
        return f"cut into {self.segments} segments of {self.tokens} tokens ({self.why}{modelled})"


def resident_ctas(kernel: Kernel, arch: str) -> int:
    """CTAs of a kernel one SM holds at once: by shared memory (1 KB reserved per CTA) and by threads."""
    by_smem = SMEM_PER_SM.get(arch, SMEM_PER_SM["sm_80"]) // (kernel.smem_bytes + 1024)
    return max(1, min(by_smem, 2048 // kernel.threads))


@dataclass(frozen=True)
class _Model:
    """The cost model of one family on one device."""
    family: str
    K: int
    V: int
    sms: int
    resident: int

    def walk(self, chunks: int, ctas: int, step: float) -> float:
        """A pass whose CTAs each walk `chunks` chunk steps, in waves of what the SMs hold."""
        return chunks * step * self.K / 128 * math.ceil(ctas / (self.resident * self.sms))

    def uncut(self, pairs: int, T: int) -> float:
        return self.walk(-(-T // CHUNK_TOKENS), pairs * max(1, self.V // 64), STEP_US[self.family])

    def cut(self, pairs: int, T: int, S: int, maps_pass: bool) -> float:
        ctas = pairs * max(1, self.V // 64) * S
        chunks = T // S // CHUNK_TOKENS
        stream = pairs * T * STREAM_NS[self.family] * (self.K + self.V) / 256 / 1e3
        ordinary = max(self.walk(chunks, ctas, STEP_US[self.family]), stream)
        maps = (max(self.walk(chunks, 2 * ctas, MAPS_STEP_US[self.family]), MAPS_BYTES * stream) if maps_pass
                else 2 * ordinary)
        return maps + ordinary + S * CHAIN_STEP_US + FIXED_US


@dataclass(frozen=True)
class _TrainingModel:
    """The cost model of a training step's serial passes, one family on one device."""
    family: str
    K: int
    sms: int
    slices: tuple[int, int]          # CTAs per (sequence, head) of the recurrence and of the dS chain's kernel
    maps_pass: bool                  # the plan's recurrence has one (else B and M are two ordinary passes)

    def one(self, name: str, pairs: int, T: int, S: int) -> float:
        """One pass (a TRAIN_STEPS entry) over every segment of S per sequence, all walked at once: the longer of
        its walk and its CTA-steps spread over the SMs (the maps pass has twice the recurrence's CTAs)."""
        chunks = -(-T // S // TRAIN_CHUNK[self.family])
        walk, sm = TRAIN_STEPS[self.family][name]
        which, times = PASS_CTAS[name]
        z = self.slices[which] * times
        return max(chunks * walk, pairs * z * S * chunks * sm / self.sms) * self.K / 128

    def uncut(self, pairs: int, T: int) -> float:
        return self.one("recurrence", pairs, T, 1) + self.one("dstate", pairs, T, 1)

    def cut(self, pairs: int, T: int, S: int) -> float:
        steps = TRAIN_STEPS[self.family]
        pass_of = lambda name: self.one(name, pairs, T, S)          # noqa: E731
        maps = self.maps_pass and "maps" in steps
        forward = pass_of("maps") + pass_of("recurrence") if maps else 3 * pass_of("recurrence")
        backward = pass_of("starts" if "starts" in steps else "dstate") + pass_of("dstate")
        return forward + backward + 2 * (S * CHAIN_STEP_US + FIXED_US)


def plan_cut(family: str, pairs: int, T: int, K: int, V: int, sms: int, *, maps_pass: bool, resident: int,
             varlen: bool = False, keep: bool = False, tokens: int | str = "auto",
             slices: tuple[int, int] = (1, 1)) -> Cut:
    """The cut of a call of `pairs` (sequence, value head) pairs of T tokens, head dims K and V, on `sms` SMs: an
    inference forward (the recurrence's CTAs: `resident` per SM, resident_ctas; `maps_pass`: Kernel.entries holds
    recurrence_maps) or, with `keep`, a training step (`slices`: CTAs per pair of the recurrence and of the dS
    chain's kernel). `tokens`: "auto" (the model decides), "off", or a segment length to use wherever the call can be
    cut."""
    why_not = ("KDAGEN_CUT=off" if tokens == "off" else
               "varlen (the lengths would need a host read)" if varlen else
               f"K ≠ V ({K}, {V}): the map M is a K × K state" if K != V else
               f"K = V = {K}: the chain kernel takes D in {CHAIN_DIMS}" if K not in CHAIN_DIMS else None)
    if why_not:                    # (before the model: an ineligible call's hot path meets this first)
        return Cut(1, T, 0.0, 0.0, why_not)
    if keep and family not in TRAIN_STEPS:
        return Cut(1, T, 0.0, 0.0, f"family {family}: its training step is not cut (its backward has no C pass)")
    if keep:
        model = _TrainingModel(family, K, sms, slices, maps_pass)
        modelled = (lambda S: model.cut(pairs, T, S)) if model else None
    else:
        model = _Model(family, K, V, sms, resident) if family in STEP_US else None
        modelled = (lambda S: model.cut(pairs, T, S, maps_pass)) if model else None
    uncut = model.uncut(pairs, T) if model else 0.0
    if tokens != "auto":
        if tokens % CHUNK_TOKENS or T <= tokens or T % tokens:
            return Cut(1, T, uncut, uncut, f"{T} tokens do not split into segments of KDAGEN_CUT={tokens} (a multiple "
                                           f"of {CHUNK_TOKENS} below T dividing it)")
        return Cut(T // tokens, tokens, uncut, modelled(T // tokens) if model else 0.0, f"KDAGEN_CUT={tokens}")
    if model is None:
        return Cut(1, T, 0.0, 0.0, f"family {family} has no measured cost model of a "
                                   f"{'training step' if keep else 'forward'} (KDAGEN_CUT=<tokens> cuts it)")
    lengths = [t for t in (MIN_SEGMENT << i for i in range(8)) if t < T and T % t == 0]
    if not lengths:
        return Cut(1, T, uncut, uncut, f"{T} tokens: no segment length of {MIN_SEGMENT}·2^i below T divides it")
    best = min(lengths, key=lambda t: (modelled(T // t), -t))
    cut = modelled(T // best)
    if cut >= CUT_MARGIN * uncut:
        return Cut(1, T, uncut, cut, f"the best cut ({T // best} segments of {best}) is modelled at "
                                     f"{cut / 1e3:.2f} ms against {uncut / 1e3:.2f} ms uncut on {sms} SMs")
    return Cut(T // best, best, uncut, cut, f"{pairs} (sequence, head) pairs on {sms} SMs")
