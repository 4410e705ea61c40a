"""The eager host path's caches and shortcuts (kdagen.ops.forward / backward / launcher / library, the runtime's
module memo), on the CPU with the launches recorded instead of run: a cached path replans whenever what it is
keyed on changes (shapes, sequence count, dtypes, options, device, environment), launches exactly what the plan
evaluated afresh says, and the shortcuts (no chunk layout where no kernel reads it, no zeroing where nothing is
kept, past the Autograd kernel where no gradient is asked for) change no result."""
from __future__ import annotations

import pytest
import torch

from kdagen import runtime
from kdagen.ops import backward as bw, forward as fw, launcher
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.config import INFERENCE, TRAINING
from kdagen.plan.sizes import evaluate, launch_sizes
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs
from kdagen.runtime import loader
from test_runtime_autograd import leaves, reference_kernels, run  # noqa: F401 (reference_kernels: a fixture)

LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
DTYPES = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.bfloat16, "beta": torch.bfloat16}


class Recorder:
    """A module that records every launch: (kernel, grid, block, smem, argument kinds and tensor shapes)."""

    def __init__(self):
        self.launched = []

    def launch(self, name, grid, block, args, smem_bytes=0):
        kinds = [tuple(a.shape) if isinstance(a, torch.Tensor) else a if isinstance(a, int) else type(a).__name__
                 for a in args]
        self.launched.append((name, tuple(grid), tuple(block), smem_bytes, kinds))


def call_of(options: dict, g=torch.bfloat16, **shape):
    """(x, kdagen.ops.run.Call) of a chunk_kda call on CPU tensors, as the forward receives them."""
    x64 = make_inputs(Options(op="kda", **options), K=64, V=64, generator=torch.Generator().manual_seed(0), **shape)
    dtypes = {**DTYPES, "g": g}
    x = {n: t if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).contiguous() for n, t in x64.items()}
    call = make_call("kda", initial_state=x.get("initial_state"), output_final_state=True,
                     cu_seqlens=x.get("cu_seqlens"), A_log=x.get("A_log"), dt_bias=x.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, x, emulate=True)
    return {**tensors, "initial_state": x.get("initial_state"), "cu_seqlens": x.get("cu_seqlens")}, kcall


def expected(config, x: dict, direction: str) -> tuple[list, dict]:
    """(grid of every non-empty launch, shape of every workspace) evaluated from the plan afresh."""
    plan, _ = config.planned()
    v, q, cu = x["v"], x["q"], x.get("cu_seqlens")
    sizes = launch_sizes(B=v.shape[0], T=v.shape[1], H=q.shape[2], HV=v.shape[2], chunk=plan.chunk,
                         num_seqs=None if cu is None else len(cu) - 1)
    grids = [(k.name, tuple(evaluate(d, sizes) for d in k.grid)) for k in plan.direction(direction)]
    return ([g for g in grids if min(g[1]) > 0],
            {w.name: tuple(evaluate(d, sizes) for d in w.shape) for w in plan.produced_in(direction)})


SHAPES = [dict(B=1, T=40, H=2), dict(B=2, T=17, H=2), dict(B=1, T=40, H=1, G=2), dict(cu_seqlens=[0, 5, 30]),
          dict(cu_seqlens=[0, 1, 2, 30]), dict(B=1, T=40, H=2)]


def test_a_cached_forward_and_backward_replan_when_the_shape_changes():
    """Shapes, GVA and the sequence count change from call to call (and back): every call launches the grids and
    allocates the workspaces its own plan evaluation gives."""
    for shape in SHAPES:
        x, call = call_of(LB, **shape)
        module = Recorder()
        o, ht, saved = fw.forward(x, call, keep=True, loader=lambda config, device, direction: module)
        grids, shapes = expected(saved["config"], x, "forward")
        assert [(n, g) for n, g, *_ in module.launched] == grids, shape
        assert {n: tuple(t.shape) for n, t in saved["workspace"].items()} == \
            {n: s for n, s in shapes.items() if n in saved["workspace"]}
        assert o.shape == x["v"].shape and ht.shape == x["initial_state"].shape
        module.launched.clear()
        debug = {}
        grads = bw.backward(saved, torch.ones_like(o), torch.ones_like(ht), debug=debug,
                            loader=lambda config, device, direction: module)
        grids, shapes = expected(saved["config"], x, "backward")
        assert [(n, g) for n, g, *_ in module.launched] == grids, shape
        assert {n: tuple(t.shape) for n, t in debug.items()} == shapes
        assert all(grads[n].shape == x[n].shape for n in call.spec.inputs)


def test_the_launch_arguments_equal_an_uncached_launch():
    """The cached path (forward: Config memo, scheduled plan, sizes evaluated once) passes the same kernel
    arguments, in kind and shape, as `launch` on the plan read afresh."""
    x, call = call_of(LB, cu_seqlens=[0, 9, 30])
    cached = Recorder()
    fw.forward(x, call, keep=True, loader=lambda config, device, direction: cached)
    fw.forward(x, call, keep=True, loader=lambda config, device, direction: cached)     # from the caches
    afresh = Recorder()
    config = fw.call_config(x, call, True)
    fw.launch(*config.planned(), afresh, {n: t for n, t in x.items() if t is not None}, call.scalars)
    assert cached.launched[:len(afresh.launched)] == afresh.launched == cached.launched[len(afresh.launched):]


def test_the_config_memo_is_keyed_on_everything_a_config_is_made_of(monkeypatch):
    monkeypatch.delenv("KDAGEN_ARCH", raising=False)
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    x, call = call_of(LB, B=1, T=20, H=2)
    base = fw.call_config(x, call, True)
    assert fw.call_config(x, call, True) is base
    assert (base.K, base.G, base.varlen, base.g_dtype, base.directions) == (64, 1, False, "bf16", TRAINING)
    assert fw.call_config(x, call, False).directions == INFERENCE
    monkeypatch.setenv("KDAGEN_ARCH", "sm_80")
    assert fw.call_config(x, call, True).arch == "sm_80"
    monkeypatch.delenv("KDAGEN_ARCH")
    monkeypatch.setenv("KDAGEN_FAMILY", "mma16")
    assert fw.call_config(x, call, True).family == "mma16"
    monkeypatch.delenv("KDAGEN_FAMILY")
    assert fw.call_config(x, call, True) is base
    # the device: its arch is read again for a device not seen before
    monkeypatch.setattr(fw, "default_arch", lambda device: "sm_80" if device.type == "meta" else "sm_90a")
    assert fw.call_config({n: None if t is None else t.to("meta") for n, t in x.items()}, call, True).arch == "sm_80"
    assert fw.call_config(x, call, True) is base
    # dtypes, GVA, varlen, the head dim and the options make other Configs
    xg, callg = call_of(LB, g=torch.float32, B=1, T=20, H=2)
    assert fw.call_config(xg, callg, True).g_dtype == "f32"
    xv, callv = call_of(LB, H=1, G=2, cu_seqlens=[0, 20])
    assert (fw.call_config(xv, callv, True).G, fw.call_config(xv, callv, True).varlen) == (2, True)
    xs, calls = call_of({**LB, "state_v_first": True}, B=1, T=20, H=2)
    assert fw.call_config(xs, calls, True).state_layout == "vk"
    xo, callo = call_of(dict(use_gate_in_kernel=True), B=1, T=20, H=2)
    assert fw.call_config(xo, callo, True).spec != base.spec


def test_the_sizes_memo_is_per_shape_and_bounded():
    x, call = call_of(LB, B=1, T=40, H=2)
    schedule = launcher.scheduled(fw.call_config(x, call, True), "forward")
    first = schedule.at(1, 40, 2, 2, 1)
    assert schedule.at(1, 40, 2, 2, 1) is first and schedule.at(1, 41, 2, 2, 1) is not first
    for T in range(2 * schedule.CACHED_SIZES):
        schedule.at(1, T + 1, 2, 2, 1)
    assert len(schedule._sized) <= schedule.CACHED_SIZES


def layout_by_definition(cu, B: int, T: int, C: int) -> tuple[list, list]:
    """(sequence offsets, chunk offsets) as lists: B sequences of T tokens, or the offsets cu."""
    offsets = [b * T for b in range(B + 1)] if cu is None else list(cu)
    counts = [-(-(b - a) // C) for a, b in zip(offsets, offsets[1:])]
    return offsets, [sum(counts[:i]) for i in range(len(counts) + 1)]


@pytest.mark.parametrize("cu, B, T", [(None, 1, 256), (None, 3, 37), (None, 2, 0), (None, 4, 1),
                                      ([0, 0, 1, 17, 33], 1, 33), ([0, 30], 1, 30), ([0, 9, 30, 30, 30], 1, 40)])
def test_chunk_layout(cu, B, T):
    got_cu, got_offsets = launcher.chunk_layout(None if cu is None else torch.tensor(cu), B, T, 16, "cpu")
    want_cu, want_offsets = layout_by_definition(cu, B, T, 16)
    assert (got_cu.dtype, got_offsets.dtype) == (torch.int64, torch.int32)
    assert got_cu.tolist() == want_cu and got_offsets.tolist() == want_offsets


def test_a_direction_makes_the_chunk_layout_only_where_a_kernel_reads_it(monkeypatch):
    made = []
    real = launcher.chunk_layout
    monkeypatch.setattr(launcher, "chunk_layout", lambda *a: made.append(a) or real(*a))
    x, call = call_of(LB, B=2, T=40, H=2)
    config = fw.call_config(x, call, True)
    reads = {d: any(p.name in ("cu_seqlens", "chunk_offsets") for k in config.planned()[0].direction(d)
                    for p in k.params) for d in ("forward", "backward")}
    o, ht, saved = fw.forward(x, call, keep=True, loader=lambda config, device, direction: Recorder())
    assert bool(made) == reads["forward"]
    made.clear()
    bw.backward(saved, torch.ones_like(o), torch.ones_like(ht), loader=lambda config, device, direction: Recorder())
    assert bool(made) == reads["backward"]


@pytest.mark.parametrize("keep", [True, False])
def test_surplus_chunk_rows_are_zeroed_only_when_kept(keep):
    """The chunk dim is an upper bound whose last N rows no kernel writes: zeroed where the forward keeps the
    workspaces for a backward (they are an output of the custom op), left alone in an inference call."""
    x, call = call_of(LB, B=2, T=32, H=2)
    ws = {}
    fw.forward(x, call, keep=keep, poison=True, debug=ws, loader=lambda config, device, direction: Recorder())
    plan = fw.call_config(x, call, keep).planned()[0]
    tails = [n for n in plan.saved if plan.workspace(n).shape[0] == "chunks"]
    assert tails
    for name in tails:
        tail = ws[name][-2:]
        assert (torch.count_nonzero(tail) == 0) if keep else bool(torch.isnan(tail.float()).all()), name


def test_inference_and_training_calls_agree(reference_kernels):  # noqa: F811
    """An inference call goes past the op's Autograd kernel; its outputs equal a training call's."""
    x = leaves(make_inputs(Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(1)))
    with torch.no_grad():
        (o, S), _ = run(x, "kda")
    assert reference_kernels["keep"] is False and o.grad_fn is None and not o.requires_grad
    (o2, S2), _ = run(x, "kda")
    assert reference_kernels["keep"] is True and o2.grad_fn is not None
    assert torch.equal(o, o2.detach()) and torch.equal(S, S2.detach())


def test_double_backward_is_refused(reference_kernels):  # noqa: F811
    x = leaves(make_inputs(Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(2)))
    (o, _), _ = run(x, "kda")
    (dq,) = torch.autograd.grad(o.sum(), [x["q"]], create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dq.sum().backward()


def test_load_module_memo_by_arguments(monkeypatch):
    """A module found by its arguments (arch given, a device by index) is the memo's own, until forget_modules;
    a device meaning 'the current one' is resolved every call."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(loader, "fetch_image", lambda uri, source, arch, kind, options=(): (b"image", "built", None))
    resolved = []
    real = loader.target_kind
    monkeypatch.setattr(loader, "target_kind", lambda arch, device=None: resolved.append(device) or real(arch, device))
    runtime.forget_modules()
    try:
        device = torch.device("cuda", 0)
        m = runtime.load_module("host_path_memo", "src", "sm_90a", device=device)
        assert runtime.load_module("host_path_memo", "src", "sm_90a", device=device) is m
        assert runtime.load_module("host_path_memo", "src", "90a", device=1) is m       # same image, via the memo
        assert runtime.load_module("host_path_memo", "src", "sm_90a") is m
        assert runtime.load_module("host_path_memo", "src", "sm_90a") is m
        assert resolved == [device, 1, None, None]
        assert runtime.load_module("host_path_memo", "src2", "sm_90a", device=device) is not m
        runtime.forget_modules()
        assert runtime.load_module("host_path_memo", "src", "sm_90a", device=device) is not m
    finally:
        runtime.forget_modules()
