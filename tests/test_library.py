"""The ops as PyTorch custom operators (kdagen.ops.library), on the CPU with the kernels emulated: torch.library's
opcheck on both ops; torch.compile(fullgraph=True) forward and backward equal to eager, bitwise, for a compiled
recurrence (called first under compile, or eagerly first) and for chunk_kda; no host read of cu_seqlens while
tracing; FLA's use_graph padding; torch.export; and `import kdagen` without torch._dynamo."""
from __future__ import annotations

import functools
import subprocess
import sys

import pytest
import torch

import kdagen
from kdagen import dsl, testing
from kdagen.codegen import emulate
from kdagen.ops import compiled as compiled_ops, config as ops_config, library, run as ops_run, validate
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs
from recurrence_cases import CASES, compiled

pytestmark = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")


def test_the_constant_mark_is_the_public_decorators():
    def probe():
        return 0
    torch.compiler.assume_constant_result(probe)
    assert vars(probe) == {"_dynamo_marked_constant": True}
    for fn in (ops_config.fla_spec, compiled_ops.learned_spec):
        assert fn._dynamo_marked_constant is True


def test_import_does_not_load_dynamo():
    code = "import sys, kdagen; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def forward_args(name: str, keep: bool):
    op = compiled(name, emulate=True)
    x, kw, do, dht = testing.random_inputs(op, **CASES[name][1])
    key = library.call_key(op.spec, "vk" if kw["state_v_first"] else "kv", None, True)
    scalars = [float(kw.get(n, 64 ** -0.5)) for n in op.spec.scalars]
    return op, (key, [x[n] for n in op.spec.inputs], kw["initial_state"], kw.get("cu_seqlens"), scalars, True, keep), \
        do, dht


@pytest.mark.parametrize("keep", [True, False])
def test_opcheck_forward(keep):
    _, args, _, _ = forward_args("bounded_gate_varlen_gva2", keep)
    if not keep:                                # an inference call: nothing requires grad
        args = (args[0], [t.detach() for t in args[1]], args[2].detach(), *args[3:])
    torch.library.opcheck(library.recurrence_forward, args)


def test_opcheck_backward():
    _, args, do, dht = forward_args("per_head_gate_vfirst_gva2", True)
    with torch.no_grad():
        _, _, saved = library.recurrence_forward(*args)
    key, inputs, h0, cu, scalars = args[:5]
    detached = [t.detach() for t in inputs]
    torch.library.opcheck(library.recurrence_backward, (key, detached, h0.detach(), cu, scalars, saved, do, dht))


def loss_of(op):
    def step(x, kw, do, dht):
        o, ht = op(**x, **kw)
        return (o.float() * do.float()).sum() + (ht * dht).sum()
    return step


def grads(fn, x, kw, do, dht):
    leaves = [*x.values(), kw["initial_state"]]
    return torch.autograd.grad(fn(x, kw, do, dht), leaves)


def fresh_gate(r):
    """Defined here so that its first call is the compiled one."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    decay = -dsl.softplus(r.token_input("g", "K") + r.head_param("bias", "K"))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(r.token_input("beta")),
                 decay=decay, scale=r.scalar("scale"))


@pytest.mark.parametrize("which", ["first-call-compiled", "bounded_gate_varlen_gva2", "unbounded_gate_learned_scalar"])
def test_compile_fullgraph_matches_eager_bitwise(which, monkeypatch):
    def no_host_reads(*args, **kwargs):
        raise AssertionError("cu_seqlens read on the host while tracing")
    if which == "first-call-compiled":
        op, shape = kdagen.compile(fresh_gate, emulate=True), dict(H=1, G=1, T=24, cu_seqlens=(0, 7, 24))
    else:
        op, shape = compiled(which, emulate=True), CASES[which][1]
    x, kw, do, dht = testing.random_inputs(op, seed=3, **shape)
    with monkeypatch.context() as m:
        m.setattr(validate, "host_seqlens", no_host_reads)
        got = grads(torch.compile(loss_of(op), fullgraph=True, backend="aot_eager"), x, kw, do, dht)
    want = grads(loss_of(op), x, kw, do, dht)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def kda_inputs(T=40, cu=None):
    opt = Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                  use_beta_sigmoid_in_kernel=True)
    shape = dict(T=T) if cu is None else dict(cu_seqlens=cu)
    x = make_inputs(opt, B=1, H=2, K=64, V=64, generator=torch.Generator().manual_seed(0), **shape)
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.bfloat16,
              "beta": torch.bfloat16}
    return {n: t if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).contiguous().requires_grad_()
            for n, t in x.items()}


def kda_loss(x, **extra):
    o, ht = kdagen.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"],
                             output_final_state=True, use_gate_in_kernel=True, lower_bound=-5.0,
                             use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, A_log=x["A_log"],
                             dt_bias=x["dt_bias"], cu_seqlens=x.get("cu_seqlens"), **extra)
    return o, ht


@pytest.fixture
def emulated_fla_ops(monkeypatch):
    """chunk_kda's kernels emulated on the CPU (the public ops otherwise need a CUDA device)."""
    monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))


def test_chunk_kda_compiles_fullgraph(emulated_fla_ops):
    x = kda_inputs()
    leaves = [t for t in x.values() if t.requires_grad]

    def step(x):
        o, ht = kda_loss(x)
        return o.float().square().sum() + ht.square().sum()
    want = torch.autograd.grad(step(x), leaves)
    got = torch.autograd.grad(torch.compile(step, fullgraph=True, backend="aot_eager")(x), leaves)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_use_graph_padding_gives_the_unpadded_results(emulated_fla_ops):
    """FLA's use_graph: cu_seqlens padded with empty tail sequences to max_num_seqs + 1 entries and T padded;
    the real tokens' outputs and the real sequences' states equal an unpadded call's, bitwise."""
    real = kda_inputs(cu=[0, 9, 30])
    padded = {n: t.detach() for n, t in real.items()}
    for n in ("q", "k", "v", "g", "beta"):
        padded[n] = torch.cat([padded[n], torch.zeros_like(padded[n][:, :10])], dim=1)
    padded["cu_seqlens"] = torch.tensor([0, 9, 30, 30, 30])
    padded["initial_state"] = torch.cat([padded["initial_state"], torch.zeros_like(padded["initial_state"])])
    with torch.no_grad():
        o, ht = kda_loss({n: t.detach() for n, t in real.items()})
        o_pad, ht_pad = kda_loss(padded, use_graph=True, max_num_seqs=4)
    assert torch.equal(o_pad[:, :30], o) and torch.equal(ht_pad[:2], ht)


def test_export_holds_the_custom_op():
    op = compiled("bounded_gate_varlen_gva2", emulate=True)
    x, kw, _, _ = testing.random_inputs(op, **CASES["bounded_gate_varlen_gva2"][1])
    x = {n: t.detach() for n, t in x.items()}

    class Layer(torch.nn.Module):
        def forward(self, q, k, v, g, beta, w, h0, cu):
            return op(q, k, v, g, beta, w, initial_state=h0, cu_seqlens=cu, output_final_state=True)

    args = (*[x[n] for n in op.inputs], kw["initial_state"].detach(), kw["cu_seqlens"])
    exported = torch.export.export(Layer(), args)
    assert "kdagen.recurrence_forward" in str(exported.graph)
    o, ht = exported.module()(*args)
    o_ref, ht_ref = Layer()(*args)
    assert torch.equal(o, o_ref) and torch.equal(ht, ht_ref)
