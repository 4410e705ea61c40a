"""Whether an inference forward is cut into segments, and how long they are: the cost model of docs/segments.md §5.

Uncut, each (sequence, value head) pair walks its T/64 chunks in order on V/64 CTAs: time ≈ chunks × the family's
serial step, however many SMs idle. Cut into S segments (kdagen.ops.segmented), the recurrence runs over all
segments at once, each pass the longer of its serial walk (T/S/64 steps) and its read of every token (the
token-heads at the family's streaming cost): twice where the recurrence has a maps pass (both maps in one launch),
three times where it has not — plus a chain of S steps. The planner takes the segment length
(a power of two, at least 1024 tokens) with the least modelled time, and cuts only where that is under CUT_MARGIN
of the uncut time. The constants are the H200's (benchmarks/NOTES.md, 2026-12-01, session 10); `kdagen plan
--inference --pairs P --tokens T` prints the decision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

CHUNK_TOKENS = 64
# per family: µs per chunk step of one CTA's serial walk at K = 128, ns per token-head of one pass at K = V = 128
STEP_US = {"wgmma64": 1.6, "mma16": 4.0}
STREAM_NS = {"wgmma64": 0.55, "mma16": 1.0}
CHAIN_STEP_US = 1.5                  # one position of the chain kernel (templates/segments/chain.cu)
FIXED_US = 20.0                      # the cut's own launches and allocations, the chain's launch
CUT_MARGIN = 0.8                     # cut only where the model gives under this share of the uncut time
MIN_SEGMENT = 1024
RESIDENT = 2                         # recurrence CTAs per SM


@dataclass(frozen=True)
class Cut:
    """The decision for one call shape: `segments` per sequence (1: not cut) of `tokens` each, the modelled
    recurrence times (µs) uncut and cut, and why."""
    segments: int
    tokens: int
    uncut_us: float
    cut_us: float
    why: str

    def describe(self) -> str:
        if self.segments == 1:
            return f"not cut: {self.why}"
        return (f"cut into {self.segments} segments of {self.tokens} tokens ({self.why}; modelled recurrence "
                f"{self.uncut_us / 1e3:.2f} ms uncut, {self.cut_us / 1e3:.2f} ms cut)")


def _walk_us(family: str, chunks: int, ctas: int, sms: int, K: int) -> float:
    """A recurrence pass whose CTAs each walk `chunks` chunk steps (waves of RESIDENT CTAs per SM)."""
    return chunks * STEP_US[family] * K / 128 * math.ceil(ctas / (RESIDENT * sms))


def _cut_us(family: str, pairs: int, T: int, K: int, V: int, sms: int, S: int, passes: int) -> float:
    ctas = pairs * max(1, V // 64) * S
    stream = pairs * T * STREAM_NS[family] * (K + V) / 256 / 1e3
    one_pass = max(_walk_us(family, T // S // CHUNK_TOKENS, ctas, sms, K), stream)
    return passes * one_pass + S * CHAIN_STEP_US + FIXED_US


def plan_cut(family: str, pairs: int, T: int, K: int, V: int, sms: int, *, maps_pass: bool, varlen: bool = False,
             keep: bool = False, tokens: int | str = "auto") -> Cut:
    """The cut of an inference forward of `pairs` (sequence, value head) pairs of T tokens, head dims K and V, on
    `sms` SMs, with a recurrence that has a maps pass (`maps_pass`: Kernel.entries holds recurrence_maps) or not.
    `tokens`: "auto" (the model decides), "off", or a segment length to use wherever the call can be cut."""
    passes = 2 if maps_pass else 3
    uncut = _walk_us(family, -(-T // CHUNK_TOKENS), pairs * max(1, V // 64), sms, K) if family in STEP_US else 0.0
    if tokens == "off":
        return Cut(1, T, uncut, uncut, "KDAGEN_CUT=off")
    why_not = ("a training call keeps the uncut forward's workspaces" if keep else
               "varlen (the lengths would need a host read)" if varlen else
               f"K ≠ V ({K}, {V}): the map M is a K × K state" if K != V else
               f"family {family} has no cost model" if family not in STEP_US else None)
    if why_not:
        return Cut(1, T, uncut, uncut, why_not)
    if tokens != "auto":
        if tokens % CHUNK_TOKENS or T <= tokens or T % tokens:
            return Cut(1, T, uncut, uncut, f"{T} tokens do not split into segments of {tokens} (a multiple of "
                                           f"{CHUNK_TOKENS} below T dividing it)")
        return Cut(T // tokens, tokens, uncut, _cut_us(family, pairs, T, K, V, sms, T // tokens, passes), "KDAGEN_CUT")
    lengths = [t for t in (MIN_SEGMENT << i for i in range(8)) if t < T and T % t == 0]
    if not lengths:
        return Cut(1, T, uncut, uncut, f"{T} tokens: no segment length of {MIN_SEGMENT}·2^i below T divides it")
    best = min(lengths, key=lambda t: (_cut_us(family, pairs, T, K, V, sms, T // t, passes), -t))
    cut = _cut_us(family, pairs, T, K, V, sms, T // best, passes)
    if cut >= CUT_MARGIN * uncut:
        return Cut(1, T, uncut, cut, f"the best cut ({T // best} segments of {best}) is modelled at "
                                     f"{cut / 1e3:.2f} ms against {uncut / 1e3:.2f} ms uncut on {sms} SMs")
    return Cut(T // best, best, uncut, cut, f"{pairs} (sequence, head) pairs on {sms} SMs")
