"""Sequence parallelism inside one GPU (kdagen/ops/segments.py): the cut, the combine, and the ops run segment by
segment against the float64 reference and against the unsegmented ops — weak decay (the incoming state matters
for every token), grouped value heads, state_v_first, varlen with empty and one-token sequences — on the CPU
emulator."""
from __future__ import annotations

import functools

import pytest
import torch

import kdagen
from kdagen.codegen import emulate
from kdagen.ops import run as ops_run
from kdagen.ops import segments
from kdagen.reference import Options, recurrent

needs_emulation = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_cut_keeps_every_token_once_and_empty_sequences_one_segment():
    seg, counts = segments.cut([0, 0, 1, 200, 264], 64)
    assert seg == [0, 0, 1, 65, 129, 193, 200, 264]
    assert counts == [1, 1, 4, 1]


@pytest.mark.parametrize("setting, want", [
    ("off", None),
    ("auto", None),           # measured slower at every shape since the block-parallel backward: cuts nothing
    ("100", 64),              # explicit: whole chunks of 64
    ("130", 128),
    ("10", 64),
])
def test_segment_length(setting, want):
    assert segments.segment_length(setting) == want


@pytest.mark.parametrize("v_first", [False, True])
def test_combine_is_the_serial_affine_chain(v_first):
    g = torch.Generator().manual_seed(0)
    counts = [3, 1, 2]
    S, N, HV, K = sum(counts), len(counts), 2, 4
    M, B = torch.randn(S, HV, K, K, generator=g, dtype=torch.float64), torch.randn(S, HV, K, K, generator=g,
                                                                                       dtype=torch.float64)
    first = torch.randn(N, HV, K, K, generator=g, dtype=torch.float64)
    got = segments.combine(M, B, first, counts, v_first)
    want, s = [], 0
    for n, c in enumerate(counts):
        cur = first[n]
        for j in range(c):
            want.append(cur)
            cur = (cur @ M[s + j] if v_first else M[s + j] @ cur) + B[s + j]
        s += c
    assert torch.equal(got, torch.stack(want))


def test_the_setting_is_checked(monkeypatch):
    from kdagen.runtime import env
    for value, want in [("", "off"), ("0", "off"), ("auto", "auto"), ("4096", "4096")]:
        monkeypatch.setenv("KDAGEN_SEGMENTS", value)
        assert env.segments() == want
    monkeypatch.setenv("KDAGEN_SEGMENTS", "-3")
    with pytest.raises(ValueError, match="KDAGEN_SEGMENTS"):
        env.segments()


def weak_decay_inputs(op: str, H: int, HV: int, cu: tuple, seed: int = 1):
    """log decay ≈ −1e-3 per token and channel: the state entering a segment never fades."""
    g = torch.Generator().manual_seed(seed)
    T, K = cu[-1], 64
    x = {"q": torch.randn(1, T, H, K, generator=g).bfloat16(), "k": torch.randn(1, T, H, K, generator=g).bfloat16(),
         "v": torch.randn(1, T, HV, K, generator=g).bfloat16(),
         "g": (-1e-3 * torch.rand((1, T, HV, K) if op == "kda" else (1, T, HV), generator=g)).float(),
         "beta": torch.rand(1, T, HV, generator=g).bfloat16(),
         "initial_state": torch.randn(len(cu) - 1, HV, K, K, generator=g)}
    return {n: t.requires_grad_() for n, t in x.items()}


def call(op, x, cu, v_first, tokens):
    fn = kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule
    args = [x[n] for n in ("q", "k", "v", "g", "beta")]
    if tokens is None:
        return fn(*args, initial_state=x["initial_state"], output_final_state=True, state_v_first=v_first,
                  cu_seqlens=torch.tensor(cu), use_qk_l2norm_in_kernel=True)
    return segments.run(fn, *args, tokens=tokens, bounds=list(cu), initial_state=x["initial_state"],
                        output_final_state=True, state_v_first=v_first, per_head={},
                        options=dict(use_qk_l2norm_in_kernel=True))


def gradients(x, o, ht, seed=7):
    g = torch.Generator().manual_seed(seed)
    do, dht = torch.randn(o.shape, generator=g), torch.randn(ht.shape, generator=g)
    return torch.autograd.grad((o.float() * do).sum() + (ht * dht).sum(), list(x.values()))


@needs_emulation
@pytest.mark.parametrize("op, H, HV, v_first, cu", [
    ("kda", 2, 2, False, (0, 80, 160)),
    ("gdn", 1, 2, True, (0, 0, 1, 100)),
])
def test_segments_match_float64_and_the_whole_sequence(monkeypatch, op, H, HV, v_first, cu):
    """Every sequence of two or more segments of 64 tokens (a first and a last: a middle segment is
    tests/test_segmented_training.py's), against float64 and the uncut call, and two cut calls bitwise equal."""
    monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))
    # one family for both calls (the cut one has more pairs, which would rank wgmma64 for training): the errors
    # compared are then those of the same kernels
    monkeypatch.setenv("KDAGEN_FAMILY", "mma16")
    x = weak_decay_inputs(op, H, HV, cu)
    o, ht = call(op, x, cu, v_first, tokens=64)
    o_plain, ht_plain = call(op, x, cu, v_first, tokens=None)
    ref = {n: t.detach().double().requires_grad_() for n, t in x.items()}
    ref_h0 = ref["initial_state"].transpose(-1, -2) if v_first else ref["initial_state"]
    ro, rh = recurrent({**ref, "initial_state": ref_h0, "cu_seqlens": torch.tensor(cu)},
                       Options(op=op, use_qk_l2norm_in_kernel=True))
    rh = rh.transpose(-1, -2) if v_first else rh
    assert rel(o, ro) <= 0.005 and rel(ht, rh) <= 0.005, (rel(o, ro), rel(ht, rh))
    assert rel(o, ro) <= 1.1 * rel(o_plain, ro) and rel(ht, rh) <= 1.1 * rel(ht_plain, rh)
    got, plain, want = gradients(x, o, ht), gradients(x, o_plain, ht_plain), gradients(ref, ro, rh)
    for name, a, b, w in zip(x, got, plain, want):
        bound = 0.008 if name in ("q", "k", "v") else 0.02
        assert rel(a, w) <= bound and rel(a, w) <= 1.25 * rel(b, w) + 1e-4, (name, rel(a, w), rel(b, w))
    again = call(op, x, cu, v_first, tokens=64)
    assert torch.equal(again[0], o) and torch.equal(again[1], ht)


@needs_emulation
def test_the_public_op_cuts_a_fixed_length_batch_when_asked(monkeypatch):
    """chunk_kda with KDAGEN_SEGMENTS=64 on B = 2 sequences of 160 tokens, the in-kernel gate (its A_log and
    dt_bias doubled with the heads) and scale: the same outputs as uncut within bf16 noise, and only then."""
    monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))
    g = torch.Generator().manual_seed(4)
    B, T, H, K = 2, 160, 1, 64
    x = [torch.randn(B, T, H, K, generator=g).bfloat16() for _ in range(3)]
    gate, beta = torch.randn(B, T, H, K, generator=g).bfloat16(), torch.randn(B, T, H, generator=g).bfloat16()
    kw = dict(initial_state=torch.randn(B, H, K, K, generator=g), output_final_state=True, scale=0.1,
              use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
              A_log=torch.tensor([-6.0]), dt_bias=torch.zeros(H * K))       # e^A_log small: a weak decay
    calls = []
    monkeypatch.setattr(segments, "run", functools.partial(lambda real, *a, **k: calls.append(k["tokens"]) or
                                                           real(*a, **k), segments.run))
    monkeypatch.setenv("KDAGEN_SEGMENTS", "64")
    o, ht = kdagen.chunk_kda(*x, gate, beta, **kw)
    monkeypatch.setenv("KDAGEN_SEGMENTS", "off")
    o_plain, ht_plain = kdagen.chunk_kda(*x, gate, beta, **kw)
    assert calls == [64] and o.shape == o_plain.shape and ht.shape == ht_plain.shape
    assert rel(o, o_plain) < 0.005 and rel(ht, ht_plain) < 0.005, (rel(o, o_plain), rel(ht, ht_plain))


@needs_emulation
@pytest.mark.parametrize("setting, cut", [("auto", []), ("64", [64])])
def test_auto_cuts_nothing_and_a_token_count_cuts_a_training_call(monkeypatch, setting, cut):
    monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))
    cut_at = []
    marker = torch.full((1, 256, 1, 64), 7.0)
    monkeypatch.setattr(segments, "run", lambda *a, **k: cut_at.append(k["tokens"]) or (marker, None))
    monkeypatch.setenv("KDAGEN_SEGMENTS", setting)
    g = torch.Generator().manual_seed(5)
    x = [torch.randn(1, 256, 1, 64, generator=g).bfloat16() for _ in range(4)] + [
        torch.rand(1, 256, 1, generator=g).bfloat16()]
    o, _ = kdagen.chunk_gated_delta_rule(x[0], x[1], x[2].requires_grad_(), -torch.rand(1, 256, 1), x[4])
    assert cut_at == cut and o.shape == (1, 256, 1, 64) and torch.equal(o, marker) == bool(cut)
