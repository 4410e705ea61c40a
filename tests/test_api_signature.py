"""kdagen's public ops have flash-linear-attention 0.6.0's exact signatures (names, order, kinds, defaults).

The FLA signatures are written out here (from fla_core-0.6.0: fla/ops/kda/chunk.py and
fla/ops/gated_delta_rule/chunk.py; docs/math.md §1) so the test runs without FLA; when FLA
is importable the test also compares against the installed functions.
"""
from __future__ import annotations

import inspect

import pytest

import kdagen

P, KW, NO = "POSITIONAL_OR_KEYWORD", "VAR_KEYWORD", inspect.Parameter.empty   # NO: no default

FLA_CHUNK_KDA = [
    ("q", P, NO), ("k", P, NO), ("v", P, NO), ("g", P, NO), ("beta", P, NO),
    ("scale", P, None), ("initial_state", P, None), ("output_final_state", P, False),
    ("use_qk_l2norm_in_kernel", P, False), ("use_gate_in_kernel", P, False),
    ("use_beta_sigmoid_in_kernel", P, False), ("allow_neg_eigval", P, False), ("safe_gate", P, False),
    ("lower_bound", P, None), ("disable_recompute", P, False), ("return_intermediate_states", P, False),
    ("state_v_first", P, False), ("cu_seqlens", P, None), ("cu_seqlens_cpu", P, None), ("cp_context", P, None),
    ("use_graph", P, False), ("max_num_seqs", P, None), ("kwargs", KW, NO),
]

FLA_CHUNK_GATED_DELTA_RULE = [
    ("q", P, NO), ("k", P, NO), ("v", P, NO), ("g", P, NO), ("beta", P, NO),
    ("scale", P, None), ("initial_state", P, None), ("output_final_state", P, False),
    ("use_qk_l2norm_in_kernel", P, False), ("use_beta_sigmoid_in_kernel", P, False),
    ("allow_neg_eigval", P, False), ("state_v_first", P, False), ("cu_seqlens", P, None),
    ("cu_seqlens_cpu", P, None), ("chunk_indices", P, None), ("cp_context", P, None), ("kwargs", KW, NO),
]


def described(fn) -> list[tuple]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("fn, expected", [(kdagen.chunk_kda, FLA_CHUNK_KDA),
                                          (kdagen.chunk_gated_delta_rule, FLA_CHUNK_GATED_DELTA_RULE)],
                         ids=["chunk_kda", "chunk_gated_delta_rule"])
def test_signature_matches_fla_060(fn, expected):
    assert described(fn) == expected


def test_gdn_alias():
    assert kdagen.chunk_gdn is kdagen.chunk_gated_delta_rule


def test_same_as_installed_fla_when_present():
    kda = pytest.importorskip("fla.ops.kda", reason="flash-linear-attention is not installed")
    gdn = pytest.importorskip("fla.ops.gated_delta_rule")
    assert described(kdagen.chunk_kda) == described(kda.chunk_kda)
    assert described(kdagen.chunk_gated_delta_rule) == described(gdn.chunk_gated_delta_rule)


@pytest.mark.parametrize("op, fn", [("kda", kdagen.chunk_kda), ("gdn", kdagen.chunk_gated_delta_rule)])
def test_every_parameter_reaches_resolve(op, fn, monkeypatch):
    """The ops hand `resolve` each of their parameters by name (spelled out, not locals(), which torch 2.11's
    dynamo cannot trace), with the value given."""
    from kdagen.ops import api
    seen = {}

    def capture(name, params):
        seen.update(params)
        raise StopIteration
    monkeypatch.setattr(api, "resolve", capture)
    names = [n for n in inspect.signature(fn).parameters if n not in ("q", "k", "v", "g", "beta", "kwargs")]
    with pytest.raises(StopIteration):
        fn(*"qkvgb", **{n: f"<{n}>" for n in names}, extra=1)
    assert seen == {**{n: f"<{n}>" for n in names}, "kwargs": {"extra": 1}}
