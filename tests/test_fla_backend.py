"""kdagen's flash-linear-attention backend: the verifier's accept/refuse decisions on a table of calls (what FLA
passes, by FLA's argument names), the conversions it makes, and — where FLA is installed — the registration.
On the CPU the verdicts are taken for CPU tensors (device_type="cpu"); with device_type="cuda" a CPU tensor is
refused like any other unsupported input."""
from __future__ import annotations

import pytest
import torch

from kdagen.integrations import fla_adapter

B, T, H, K = 1, 40, 2, 64
bf16, f32 = torch.bfloat16, torch.float32
LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)


def call(op="kda", G=1, dtype=bf16, k_dim=K, **options):
    """(args, kwargs) as FLA's layers pass them: q, k, v, g, beta positionally, the rest by keyword."""
    HV = H * G
    g_shape = (B, T, HV, k_dim) if op == "kda" else (B, T, HV)
    args = (torch.randn(B, T, H, k_dim, dtype=dtype), torch.randn(B, T, H, k_dim, dtype=dtype),
            torch.randn(B, T, HV, k_dim, dtype=dtype), torch.randn(g_shape, dtype=bf16), torch.rand(B, T, HV, dtype=bf16))
    kwargs = dict(output_final_state=True, initial_state=torch.zeros(B, HV, k_dim, k_dim))
    if options.get("use_gate_in_kernel"):
        kwargs.update(A_log=torch.zeros(HV), dt_bias=torch.zeros(HV * k_dim if op == "kda" else HV))
    return args, {**kwargs, **options}


CASES = [
    # (id, op, call, device_type, accepted, reason)
    ("kda-flashkda-setting", "kda", call(**LB), "cpu", True, None),
    ("kda-gva2-softplus", "kda", call(G=2, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True), "cpu", True, None),
    ("gdn-gate", "gdn", call("gdn", use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True), "cpu", True, None),
    ("kda-use-graph", "kda", call(**LB, use_graph=True), "cpu", True, None),
    ("kda-fp32", "kda", call(dtype=f32, **LB), "cpu", False, "q has dtype float32; kdagen's kernels take bfloat16"),
    ("kda-head-dim-96", "kda", call(k_dim=96, **LB), "cpu", False, "head dim K = 96"),
    ("kda-cp", "kda", call(**LB, cp_context=object()), "cpu", False, "cp_context"),
    ("kda-intermediate", "kda", call(**LB, return_intermediate_states=True), "cpu", False,
     "return_intermediate_states"),
    ("kda-neg-eigval", "kda", call(allow_neg_eigval=True), "cpu", False, "allow_neg_eigval=True requires"),
    ("gdn-head-first", "gdn", call("gdn", head_first=False), "cpu", False, "head_first was removed"),
    ("kda-unknown-kwarg", "kda", call(**LB, not_an_option=1), "cpu", False, "unexpected keyword"),
    ("kda-cpu-tensors", "kda", call(**LB), "cuda", False, "q is on cpu; kdagen's kernels run on CUDA devices"),
]


@pytest.mark.parametrize("op, args_kwargs, device_type, accepted, reason", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_verdicts(op, args_kwargs, device_type, accepted, reason):
    args, kwargs = args_kwargs
    ok, why = fla_adapter.verdict(op, args, kwargs, device_type=device_type)
    assert ok is accepted, why
    assert (why is None) if accepted else (why.startswith("kdagen: ") and reason in why)


def test_conversions_keep_the_gradient_path():
    """A non-contiguous q and a bf16 A_log (a model cast to bf16) are taken: q made contiguous, A_log made fp32,
    both differentiably."""
    args, kwargs = call(**LB)
    q = torch.randn(B, H, T, K, dtype=bf16).transpose(1, 2).requires_grad_()
    A_log = torch.zeros(H, dtype=bf16, requires_grad=True)
    args = (q, *args[1:])
    kwargs["A_log"] = A_log
    assert not q.is_contiguous()
    ok, why = fla_adapter.verdict("kda", args, kwargs, device_type="cpu")
    assert ok, why
    named = fla_adapter.adapt("kda", args, kwargs)
    assert named["q"].is_contiguous() and named["A_log"].dtype == f32
    (named["q"].float().sum() + named["A_log"].sum()).backward()
    assert q.grad is not None and A_log.grad is not None and A_log.grad.dtype == bf16


def test_registration_with_fla():
    fla_backends = pytest.importorskip("fla.backends", reason="flash-linear-attention is not installed")
    from kdagen.integrations import fla as integration
    kda, gdn = integration.BACKENDS
    for backend in (kda, gdn):
        assert issubclass(backend, fla_backends.BaseBackend)
        assert backend.backend_type == "kdagen" and backend.env_var == "FLA_KDAGEN" and not backend.default_enable
