"""Input and option checks of chunk_kda / chunk_gated_delta_rule, on CPU.

Each case breaks one thing in an otherwise valid call and expects an error of the right type that
names the argument. The valid call itself gets as far as the device check (these are CPU tensors),
which shows that every other check passed.
"""
from __future__ import annotations

import pytest
import torch

import kdagen
from kdagen.ops.api import make_call, reference_options
from kdagen.reference import Options

B, T, H, HV, K = 1, 20, 2, 4, 64
bf16, f32 = torch.bfloat16, torch.float32


def valid(op: str, **opts) -> dict:
    """Keyword arguments of a valid call (GVA 2, h0, the in-kernel gate), on CPU."""
    g_shape = (B, T, HV, K) if op == "kda" else (B, T, HV)
    return dict(q=torch.randn(B, T, H, K, dtype=bf16), k=torch.randn(B, T, H, K, dtype=bf16),
                v=torch.randn(B, T, HV, K, dtype=bf16), g=torch.randn(g_shape, dtype=bf16),
                beta=torch.rand(B, T, HV, dtype=bf16), initial_state=torch.zeros(B, HV, K, K, dtype=f32),
                use_gate_in_kernel=True, A_log=torch.zeros(HV, dtype=f32),
                dt_bias=torch.zeros(HV * K if op == "kda" else HV, dtype=f32), output_final_state=True, **opts)


def run(op: str, kwargs: dict):
    fn = kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule
    return fn(**kwargs)


def varlen(op: str, cu, **changes) -> dict:
    kw = valid(op)
    total = int(cu[-1]) if len(cu) else T
    for name in ("q", "k", "v", "g", "beta"):
        kw[name] = kw[name][:, :1].expand(1, total, *kw[name].shape[2:]).contiguous()
    n = max(len(cu) - 1, 1)
    kw.update(cu_seqlens=torch.tensor(cu, dtype=torch.int64), initial_state=torch.zeros(n, HV, K, K))
    return {**kw, **changes}


def batched(op: str, b: int) -> dict:
    kw = valid(op)
    for name in ("q", "k", "v", "g", "beta", "initial_state"):
        kw[name] = kw[name].expand(b, *kw[name].shape[1:]).contiguous()
    return kw


def changed(op: str, **changes) -> dict:
    return {**valid(op), **changes}


def meta(x):
    return torch.empty_like(x, device="meta")


CASES = [
    # (id, op, kwargs, error, message)
    ("q-not-tensor", "kda", changed("kda", q=[[1.0]]), TypeError, "q must be a torch.Tensor"),
    ("q-3d", "kda", changed("kda", q=torch.zeros(B, T, K, dtype=bf16)), ValueError, r"q must be 4-D \[B, T, H, K\]"),
    ("q-fp32", "kda", changed("kda", q=torch.zeros(B, T, H, K)), NotImplementedError, "q has dtype float32.*bfloat16"),
    ("q-fp16-gdn", "gdn", changed("gdn", q=torch.zeros(B, T, H, K, dtype=torch.float16)), NotImplementedError,
     "q has dtype float16"),
    ("k-shape", "kda", changed("kda", k=torch.zeros(B, T, H + 1, K, dtype=bf16)), ValueError, "k must have shape"),
    ("k-dtype", "kda", changed("kda", k=torch.zeros(B, T, H, K, dtype=torch.float16)), NotImplementedError,
     "k has dtype float16"),
    ("v-time", "kda", changed("kda", v=torch.zeros(B, T + 1, HV, K, dtype=bf16)), ValueError, r"v must be \[B, T, HV, V\]"),
    ("v-dtype", "gdn", changed("gdn", v=torch.zeros(B, T, HV, K)), NotImplementedError, "v has dtype float32"),
    ("gva-ratio", "kda", changed("kda", v=torch.zeros(B, T, 3, K, dtype=bf16)), ValueError,
     "HV = 3 heads.*multiple of the q/k inputs' H = 2"),
    ("no-value-heads", "gdn", changed("gdn", v=torch.zeros(B, T, 0, K, dtype=bf16)), ValueError,
     "HV = 0 heads.*positive multiple"),
    ("head-dim", "kda", changed("kda", q=torch.zeros(B, T, H, 96, dtype=bf16), k=torch.zeros(B, T, H, 96, dtype=bf16)),
     NotImplementedError, r"head dim K = 96 .*no kernel"),
    ("v-head-dim", "gdn", changed("gdn", v=torch.zeros(B, T, HV, 128, dtype=bf16)), NotImplementedError,
     "value head dim V = 128"),
    ("kda-g-per-head", "kda", changed("kda", g=torch.zeros(B, T, HV, dtype=bf16)), ValueError,
     r"g must have shape \[B, T, HV, K\]"),
    ("gdn-g-per-channel", "gdn", changed("gdn", g=torch.zeros(B, T, HV, K, dtype=bf16)), ValueError,
     r"g must have shape \[B, T, HV\]"),
    ("g-dtype", "kda", changed("kda", g=torch.zeros(B, T, HV, K, dtype=torch.float16)), NotImplementedError,
     "g has dtype float16"),
    ("beta-heads", "kda", changed("kda", beta=torch.zeros(B, T, H, dtype=bf16)), ValueError,
     r"beta must have shape \[B, T, HV\] = \[1, 20, 4\]"),
    ("beta-int", "gdn", changed("gdn", beta=torch.zeros(B, T, HV, dtype=torch.int32)), ValueError,
     "beta has dtype int32"),
    ("A_log-shape", "kda", changed("kda", A_log=torch.zeros(H)), ValueError, r"A_log must have shape \[HV\]"),
    ("A_log-dtype", "gdn", changed("gdn", A_log=torch.zeros(HV, dtype=bf16)), NotImplementedError,
     "A_log has dtype bfloat16.*float32"),
    ("dt_bias-kda-shape", "kda", changed("kda", dt_bias=torch.zeros(HV)), ValueError, r"dt_bias must have shape \[HV \* K\]"),
    ("dt_bias-gdn-shape", "gdn", changed("gdn", dt_bias=torch.zeros(HV * K)), ValueError, r"dt_bias must have shape \[HV\]"),
    ("h0-dtype", "kda", changed("kda", initial_state=torch.zeros(B, HV, K, K, dtype=bf16)), NotImplementedError,
     "initial_state has dtype bfloat16.*float32"),
    ("h0-shape", "gdn", changed("gdn", initial_state=torch.zeros(B, H, K, K)), ValueError,
     r"initial_state must have shape \[N, HV, K, V\] = \[1, 4, 64, 64\]"),
    ("h0-state-v-first-shape", "kda", changed("kda", state_v_first=True, initial_state=torch.zeros(2, HV, K, K)),
     ValueError, r"initial_state must have shape \[N, HV, V, K\] \(state_v_first\)"),
    ("q-non-contiguous", "kda", changed("kda", q=torch.zeros(B, H, T, K, dtype=bf16).transpose(1, 2)), ValueError,
     "q is not contiguous"),
    ("beta-non-contiguous", "gdn", changed("gdn", beta=torch.zeros(B, HV, T, dtype=bf16).transpose(1, 2)), ValueError,
     "beta is not contiguous"),
    ("h0-non-contiguous", "kda", changed("kda", initial_state=torch.zeros(B, HV, K, K).transpose(-1, -2)), ValueError,
     "initial_state is not contiguous"),
    ("cu-int32", "kda", varlen("kda", [0, 5, 9], cu_seqlens=torch.tensor([0, 5, 9], dtype=torch.int32)), ValueError,
     "cu_seqlens must be int64"),
    ("cu-2d", "gdn", varlen("gdn", [0, 9], cu_seqlens=torch.tensor([[0, 9]])), ValueError, r"cu_seqlens must be 1-D"),
    ("cu-start", "kda", varlen("kda", [0, 5, 9], cu_seqlens=torch.tensor([1, 5, 9])), ValueError,
     "cu_seqlens must start at 0, got 1"),
    ("cu-decreasing", "gdn", varlen("gdn", [0, 6, 9], cu_seqlens=torch.tensor([0, 6, 4, 9]),
                                    initial_state=torch.zeros(3, HV, K, K)), ValueError,
     r"cu_seqlens must be non-decreasing, but cu_seqlens\[2\] = 4 < cu_seqlens\[1\] = 6"),
    ("cu-last", "kda", varlen("kda", [0, 5, 9], cu_seqlens=torch.tensor([0, 5, 8])), ValueError,
     r"cu_seqlens\[-1\] = 8 must equal the number of tokens T = 9"),
    ("cu-batch", "kda", {**batched("kda", 2), "cu_seqlens": torch.tensor([0, 20])}, ValueError,
     "with cu_seqlens the batch size must be 1"),
    ("cu-h0-count", "gdn", varlen("gdn", [0, 5, 9], initial_state=torch.zeros(3, HV, K, K)), ValueError,
     r"initial_state must have shape \[N, HV, K, V\] = \[2, 4, 64, 64\]"),
    ("cu-cpu-shape", "kda", varlen("kda", [0, 5, 9], cu_seqlens_cpu=torch.tensor([0, 9])), ValueError,
     "cu_seqlens_cpu has shape"),
    ("cu-cpu-values", "kda", varlen("kda", [0, 5, 9], cu_seqlens_cpu=torch.tensor([0, 5, 7])), ValueError,
     r"cu_seqlens_cpu\[-1\] = 7"),
    ("cu-cpu-alone", "gdn", changed("gdn", cu_seqlens_cpu=torch.tensor([0, 20])), ValueError,
     "cu_seqlens_cpu was given without cu_seqlens"),
    ("scale-type", "kda", changed("kda", scale="0.1"), TypeError, "scale must be a float"),
    ("scale-nan", "gdn", changed("gdn", scale=float("nan")), ValueError, "scale must be finite"),
    ("cpu-device", "kda", valid("kda"), ValueError, "q is on cpu; kdagen's kernels run on CUDA"),
    ("mixed-device", "gdn", {**valid("gdn"), "q": meta(valid("gdn")["q"])}, ValueError,
     "k is on cpu but q is on meta"),
]


@pytest.mark.parametrize("op, kwargs, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_input_errors_name_the_argument(op, kwargs, error, message):
    with pytest.raises(error, match=message):
        run(op, kwargs)


def test_varlen_with_empty_and_length_one_sequences_is_valid():
    for op in ("kda", "gdn"):
        with pytest.raises(ValueError, match="q is on cpu"):
            run(op, varlen(op, [0, 0, 1, 1, 9]))
        with pytest.raises(ValueError, match="q is on cpu"):
            run(op, varlen(op, [0, 0, 1, 1, 9], cu_seqlens_cpu=torch.tensor([0, 0, 1, 1, 9])))


OPTION_CASES = [
    ("unknown-kwarg", "kda", dict(foo=1), TypeError, r"unexpected keyword argument\(s\) \['foo'\]"),
    ("gdn-has-no-lower-bound", "gdn", dict(lower_bound=-5.0), TypeError, "lower_bound"),
    ("kda-has-no-head-first", "kda", dict(head_first=False), TypeError, "head_first"),
    ("gdn-head-first", "gdn", dict(head_first=False), ValueError, "head_first was removed"),
    ("both-state-layouts", "kda", dict(state_v_first=True, transpose_state_layout=True), ValueError,
     "state_v_first or the deprecated transpose_state_layout"),
    ("kda-chunk-16", "kda", dict(chunk_size=16), ValueError, r"chunk_size must be one of \(32, 64\)"),
    ("gdn-chunk-128", "gdn", dict(chunk_size=128), ValueError, r"chunk_size must be one of \(16, 32, 64\)"),
    ("neg-eigval-without-sigmoid", "gdn", dict(allow_neg_eigval=True), ValueError,
     "allow_neg_eigval=True requires use_beta_sigmoid_in_kernel"),
    ("kda-gate-without-A_log", "kda", dict(A_log=None), ValueError, "A_log must be given"),
    ("gdn-gate-without-A_log", "gdn", dict(A_log=None), ValueError, "A_log must be given"),
    ("A_log-without-gate", "kda", dict(use_gate_in_kernel=False), ValueError,
     "A_log is only used with use_gate_in_kernel=True"),
    ("dt_bias-without-gate", "gdn", dict(use_gate_in_kernel=False, A_log=None), ValueError,
     "dt_bias is only used with use_gate_in_kernel"),
    ("safe-gate-no-bound", "kda", dict(safe_gate=True), ValueError, r"safe_gate=True .* needs lower_bound in \[-5.0, 0.0\)"),
    ("safe-gate-bound-too-low", "kda", dict(safe_gate=True, lower_bound=-6.0), ValueError, "got -6.0"),
    ("lower-bound-unused", "kda", dict(use_gate_in_kernel=False, A_log=None, dt_bias=None, lower_bound=-5.0),
     ValueError, "lower_bound only acts with"),
    ("output-final-state-type", "kda", dict(output_final_state=None), TypeError, "output_final_state must be a bool"),
    ("cp", "kda", dict(cp_context=object()), ValueError, "cp_context has no process group"),
    ("cp-gdn", "gdn", dict(cp_context=object()), ValueError, "cp_context has no process group"),
    ("intermediate-states", "kda", dict(return_intermediate_states=True), NotImplementedError,
     "return_intermediate_states"),
    ("max-num-seqs-without-graph", "kda", dict(max_num_seqs=4), ValueError, "max_num_seqs is only used with use_graph"),
    ("max-num-seqs-without-cu", "kda", dict(use_graph=True, max_num_seqs=4), ValueError,
     "without cu_seqlens it would be ignored"),
    ("max-num-seqs-count", "kda", dict(use_graph=True, max_num_seqs=4, cu_seqlens=torch.tensor([0, 20])), ValueError,
     r"max_num_seqs \+ 1 = 5 entries"),
    ("max-num-seqs-type", "kda", dict(use_graph=True, max_num_seqs=0, cu_seqlens=torch.tensor([0, 20])), ValueError,
     "max_num_seqs must be a positive int"),
]


@pytest.mark.parametrize("op, changes, error, message", [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES])
def test_option_errors_name_the_option(op, changes, error, message):
    kw = valid(op)
    if op == "gdn" and "use_gate_in_kernel" not in changes:
        changes = {"use_gate_in_kernel": True, **changes}
    kw.update(changes)
    kw = {k: v for k, v in kw.items() if v is not None or k not in ("A_log", "dt_bias")}
    with pytest.raises(error, match=message):
        run(op, kw)


HINTS = [("kda", dict(chunk_size=32)), ("kda", dict(disable_recompute=True)), ("kda", dict(use_graph=True)),
         ("kda", dict(safe_gate=True, lower_bound=-5.0)), ("gdn", dict(chunk_size=16)),
         ("gdn", dict(chunk_indices=torch.zeros(2, 2, dtype=torch.int64)))]


@pytest.mark.parametrize("op, hint", HINTS, ids=[f"{op}-{next(iter(h))}" for op, h in HINTS])
def test_hints_with_the_same_math_are_accepted(op, hint):
    with pytest.raises(ValueError, match="q is on cpu"):
        run(op, {**valid(op), **hint})


def test_deprecated_layout_alias_warns_and_maps(recwarn):
    opt = reference_options("kda", transpose_state_layout=True)
    assert opt.state_v_first is True
    assert any(issubclass(w.category, DeprecationWarning) for w in recwarn)


@pytest.mark.parametrize("op, options, expected", [
    ("kda", {}, Options(op="kda")),
    ("kda", dict(use_gate_in_kernel=True, A_log=1, lower_bound=-5.0, safe_gate=True, scale=0.5,
                 use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                 state_v_first=True, chunk_size=32),
     Options(op="kda", scale=0.5, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
             use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, lower_bound=-5.0, state_v_first=True)),
    ("kda", dict(use_gate_in_kernel=True, lower_bound=-3.0), Options(op="kda", use_gate_in_kernel=True, lower_bound=-3.0)),
    ("kda", dict(safe_gate=True, lower_bound=-5.0), Options(op="kda")),          # precomputed g: a promise, same math
    ("gdn", dict(use_gate_in_kernel=True, A_log=1), Options(op="gdn", use_gate_in_kernel=True)),
    ("gdn", dict(use_qk_l2norm_in_kernel=True, state_v_first=True),
     Options(op="gdn", use_qk_l2norm_in_kernel=True, state_v_first=True)),
])
def test_reference_options_mapping(op, options, expected):
    assert reference_options(op, **options) == expected


def test_safe_gate_on_precomputed_gates_keeps_the_promised_bound():
    call = make_call("kda", safe_gate=True, lower_bound=-4.0, output_final_state=True)
    assert call.gate_bound == -4.0 and call.opt.lower_bound is None and call.output_final_state is True
    assert make_call("kda", use_gate_in_kernel=True, safe_gate=True, lower_bound=-4.0).gate_bound is None


def test_cu_seqlens_is_read_once_per_tensor_until_modified(monkeypatch):
    from kdagen.ops import validate as v
    reads = []
    real = v.check_seqlens
    monkeypatch.setattr(v, "check_seqlens", lambda *a: reads.append(a[0]) or real(*a))
    cache = v.HostSeqlens(size=2)
    cu = torch.tensor([0, 5, 9])
    assert cache("cu_seqlens", cu, 9) == [0, 5, 9] and cache("cu_seqlens", cu, 9) == [0, 5, 9]
    assert len(reads) == 1                                   # the second call skipped the device read
    cu[1] = 12                                               # in place: the version moves, the values are read again
    with pytest.raises(ValueError, match=r"cu_seqlens\[2\] = 9 < cu_seqlens\[1\] = 12"):
        cache("cu_seqlens", cu, 9)
    with pytest.raises(ValueError, match="must equal the number of tokens T = 10"):
        cache("cu_seqlens", torch.tensor([0, 5, 9]), 10)
    others = [torch.tensor([0, n]) for n in (3, 4, 5)]       # the oldest entry leaves past `size`
    for t in others:
        cache("cu_seqlens", t, int(t[-1]))
    assert len(cache.entries) == 2 and id(others[0]) not in cache.entries
    with pytest.raises(ValueError, match="must be int64"):  # the format is checked on every call
        cache("cu_seqlens", others[-1].int(), 5)
    reads.clear()
    t = others[-1]
    import weakref
    cache.entries[id(t)] = (weakref.ref(torch.tensor([0])), t.data_ptr(), t._version, [0, 5])  # another tensor's id
    cache("cu_seqlens", t, 5)
    assert len(reads) == 1                                   # an entry whose tensor is gone is not trusted
    with torch.inference_mode():                             # no version counter: read every time, no error
        cu = torch.tensor([0, 4, 9])
        assert cache("cu_seqlens", cu, 9) == [0, 4, 9] and cache("cu_seqlens", cu, 9) == [0, 4, 9]
    assert len(reads) == 3
