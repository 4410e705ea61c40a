"""The eager host path's caches and shortcuts (kdagen.ops.forward / backward / launcher / library, the runtime's
module memo), on the CPU with the launches recorded instead of run: a cached path replans whenever what it is
keyed on changes (shapes, sequence count, dtypes, options, device, environment), launches exactly what the plan
evaluated afresh says, and the shortcuts (no chunk layout where no kernel reads it, no zeroing where nothing is
kept, past the Autograd kernel where no gradient is asked for) change no result."""
from __future__ import annotations

import functools
import math
import types
import warnings

import pytest
import torch

import kdagen
from kdagen import runtime
from kdagen.codegen import emulate
from kdagen.ops import backward as bw, config as ops_config, forward as fw, launcher, library, run as ops_run, validate
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.config import INFERENCE, TRAINING
from kdagen.plan.sizes import evaluate, launch_sizes
from kdagen.reference import Options
from kdagen.reference.inputs import make_inputs
from kdagen.runtime import launch as rt_launch, loader
from test_runtime_autograd import leaves, reference_kernels, run  # noqa: F401 (reference_kernels: a fixture)

LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
GDN = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
DTYPES = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.bfloat16, "beta": torch.bfloat16}


class Recorder:
    """A module that records every launch: (kernel, grid, block, smem, argument kinds and tensor shapes)."""

    def __init__(self):
        self.launched = []

    def launch(self, name, grid, block, args, smem_bytes=0):
        kinds = [tuple(a.shape) if isinstance(a, torch.Tensor) else a if isinstance(a, int) else type(a).__name__
                 for a in args]
        self.launched.append((name, tuple(grid), tuple(block), smem_bytes, kinds))


def call_of(options: dict, g=torch.bfloat16, D=64, op="kda", **shape):
    """(x, kdagen.ops.run.Call) of a chunk_kda (or `op`) call on CPU tensors (head dim D), as the forward receives
    them."""
    x64 = make_inputs(Options(op=op, **options), K=D, V=D, generator=torch.Generator().manual_seed(0), **shape)
    dtypes = {**DTYPES, "g": g}
    x = {n: t if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).contiguous() for n, t in x64.items()}
    call = make_call(op, initial_state=x.get("initial_state"), output_final_state=True,
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
def test_surplus_chunk_rows_are_zeroed_only_when_kept(keep, monkeypatch):
    """The chunk dim is an upper bound whose last N rows no kernel writes: zeroed where the forward keeps the
    workspaces for a backward (they are an output of the custom op), left alone in an inference call. (mma16
    both times: an inference call with few pairs would otherwise plan wgmma64, which saves nothing.)"""
    monkeypatch.setenv("KDAGEN_FAMILY", "mma16")
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


# ---- a signature validated once, the direct call, prepared launches, carved workspaces ------------------------

@pytest.fixture
def recorded_ops(monkeypatch):
    """chunk_kda on CPU tensors (its call marked emulated) with every launch recorded instead of run."""
    module = Recorder()
    monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))
    monkeypatch.setattr(ops_config, "load_emulated", lambda config, device, direction: module)
    return module


def kda(x: dict, **options):
    """chunk_kda on the tensors of call_of, with LB's options."""
    return kdagen.chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"],
                            cu_seqlens=x.get("cu_seqlens"), A_log=x["A_log"], dt_bias=x["dt_bias"],
                            **{"output_final_state": True, **LB, **options})


def test_a_signature_is_validated_once(recorded_ops, monkeypatch):
    """A call of a signature seen before skips validate and the launcher's checks; a new shape, dtype or option
    is a new signature."""
    validated, checked = [], []
    monkeypatch.setattr(ops_run, "_CHECKED", {})           # signatures other tests validated: forgotten
    monkeypatch.setattr(ops_run, "validate", lambda *a, **k: validated.append(1) or validate.validate(*a, **k))
    real = launcher.Schedule.check_inputs
    monkeypatch.setattr(launcher.Schedule, "check_inputs", lambda *a: checked.append(1) or real(*a))
    x, _ = call_of(LB, B=1, T=40, H=2)
    with torch.no_grad():
        for _ in range(3):
            kda(x)
        assert (len(validated), len(checked)) == (1, 1)
        kda({n: None if t is None else t.clone() for n, t in x.items()})      # other tensors, one signature
        assert (len(validated), len(checked)) == (1, 1)
        kda(x, scale=0.5)
        y, _ = call_of(LB, B=1, T=41, H=2)
        kda(y)
    assert (len(validated), len(checked)) == (3, 3)


def misaligned(t: torch.Tensor) -> torch.Tensor:
    """t's values at an address 2 bytes past a 16-byte boundary: the same shape, strides and dtype."""
    flat = torch.empty(t.numel() + 8, dtype=t.dtype)[1:1 + t.numel()]
    return flat.view(t.shape).copy_(t)


BAD = [  # (what changes from the good call, error, message)
    (lambda x: {**x, "q": x["q"].float()}, NotImplementedError, "q has dtype float32"),
    (lambda x: {**x, "k": x["k"][:, :, :1]}, ValueError, "k must have shape"),
    (lambda x: {**x, "k": x["k"].transpose(1, 2).contiguous().transpose(1, 2)}, ValueError, "k is not contiguous"),
    (lambda x: {**x, "q": misaligned(x["q"])}, ValueError, r"x\['q'\] must be contiguous and 16-byte aligned"),
    (lambda x: {**x, "initial_state": misaligned(x["initial_state"])}, ValueError, "initial_state must be .*aligned"),
    (lambda x: {**x, "A_log": x["A_log"][:1]}, ValueError, "A_log must have shape"),
    (lambda x: {**x, "initial_state": x["initial_state"].double()}, NotImplementedError, "initial_state has dtype"),
    (lambda x: {**x, "q": x["q"].to("meta")}, ValueError, "is on meta"),
]
BAD_OPTIONS = [  # (the good calls' options, the bad call's, error, message)
    (dict(scale=1.0), dict(scale=True), TypeError, "scale must be a float"),
    (dict(scale=1.0), dict(scale=math.inf), ValueError, "scale must be finite"),
    (dict(use_qk_l2norm_in_kernel=True), dict(use_qk_l2norm_in_kernel=1), TypeError, "must be a bool"),
    (dict(output_final_state=True), dict(output_final_state=1), TypeError, "output_final_state must be a bool"),
    (dict(chunk_size=64), dict(chunk_size=7), ValueError, "chunk_size must be one of"),
    (dict(lower_bound=-5.0), dict(lower_bound=1.0), ValueError, "lower_bound must be a finite negative number"),
]


@pytest.mark.parametrize("bad, error, message", BAD, ids=[m for _, _, m in BAD])
def test_a_new_bad_signature_after_a_good_one_still_raises(recorded_ops, bad, error, message):
    x, _ = call_of(LB, B=1, T=40, H=2)
    with torch.no_grad():
        kda(x)
        kda(x)
        with pytest.raises(error, match=message):
            kda(bad(x))


@pytest.mark.parametrize("good, bad, error, message", BAD_OPTIONS, ids=[m for *_, m in BAD_OPTIONS])
def test_a_bad_option_after_good_calls_still_raises(recorded_ops, good, bad, error, message):
    x, _ = call_of(LB, B=1, T=40, H=2)
    with torch.no_grad():
        kda(x, **good)
        kda(x, **good)
        with pytest.raises(error, match=message):
            kda(x, **bad)


def test_the_deprecated_option_warns_at_every_call(recorded_ops):
    x, _ = call_of(LB, B=1, T=40, H=2)
    with torch.no_grad():
        for _ in range(2):
            with pytest.warns(DeprecationWarning, match="transpose_state_layout"):
                kda({**x, "initial_state": x["initial_state"].transpose(-1, -2).contiguous()},
                    transpose_state_layout=True)


def test_cu_seqlens_values_are_checked_at_every_call(recorded_ops):
    """Its values are not part of a signature: offsets of the same length that do not fit are refused."""
    x, _ = call_of(LB, cu_seqlens=[0, 9, 30])
    with torch.no_grad():
        kda(x)
        kda({**x, "cu_seqlens": torch.tensor([0, 20, 30])})
        with pytest.raises(ValueError, match="non-decreasing"):
            kda({**x, "cu_seqlens": torch.tensor([0, 31, 30])})
        with pytest.raises(ValueError, match=r"cu_seqlens\[-1\] = 29"):
            kda({**x, "cu_seqlens": torch.tensor([0, 9, 29])})
        with pytest.raises(ValueError, match="cu_seqlens_cpu"):
            kda(x, cu_seqlens_cpu=torch.tensor([0, 9, 29]))


@pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")
def test_the_direct_call_gives_what_the_dispatcher_gives(monkeypatch):
    """Without grad, eager, chunk_kda runs the op's implementation directly (carved workspaces, the Call's memo);
    through the dispatcher (with grad, or where library.eager says no) it gives the same outputs, bitwise. (One
    family throughout: with few pairs an inference call would otherwise plan wgmma64 and a training call mma16.)"""
    monkeypatch.setenv("KDAGEN_FAMILY", "mma16")
    monkeypatch.setattr(ops_run, "run", functools.partial(ops_run.run, emulate=True))
    dispatched = []
    real = library.dispatch
    monkeypatch.setattr(library, "dispatch", lambda *a: dispatched.append(a[0]) or real(*a))
    x, _ = call_of(LB, cu_seqlens=[0, 9, 30])
    with torch.no_grad():
        direct = kda(x)
        assert not dispatched
        monkeypatch.setattr(library, "eager", lambda: False)
        through = kda(x)
        assert dispatched == [library.recurrence_forward]
    leaves = {n: t if n == "cu_seqlens" else t.clone().requires_grad_() for n, t in x.items()}
    trained = kda(leaves)
    for a, b, c in zip(direct, through, trained):
        assert torch.equal(a, b) and torch.equal(a, c.detach())


class Doubled(torch.Tensor):
    pass


class NoOpDispatchMode(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class NoOpFunctionMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def eager_inside(transform):
    seen = []

    def fn(t):
        seen.append(library.eager())
        return t
    transform(fn)(torch.ones(2, 2))
    return seen[0]


@pytest.mark.parametrize("where", ["dispatch mode", "function mode", "fake tensors", "profiler", "vmap",
                                   "functionalize", "jit trace"])
def test_the_dispatcher_runs_where_something_observes_it(where):
    """library.eager is false wherever the dispatcher would do more than run the implementation."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    assert library.eager()
    modes = {"dispatch mode": NoOpDispatchMode, "function mode": NoOpFunctionMode, "fake tensors": FakeTensorMode,
             "profiler": torch.profiler.profile}
    if where in modes:
        with modes[where]():
            assert not library.eager()
    elif where == "jit trace":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)        # torch.jit.trace is deprecated
            assert not eager_inside(lambda fn: lambda t: torch.jit.trace(lambda u: (fn(u) * 2), t))
    else:
        assert not eager_inside(torch.func.vmap if where == "vmap" else torch.func.functionalize)
    assert library.eager()


def test_only_plain_tensors_go_past_the_dispatcher():
    t = torch.zeros(2)
    assert library.plain([t, None])
    assert not library.plain([t, t.as_subclass(Doubled)])
    assert not library.plain([t, torch.zeros(2, device="meta")])


@pytest.mark.parametrize("family, op, keep", [("mma16", "kda", True), ("wgmma64", "kda", True), ("wgmma64", "kda", False),
                                              ("wgmma64", "gdn", True), ("wgmma64", "gdn", False)])
def test_prepared_launches_pass_module_launchs_arguments(family, op, keep, monkeypatch):
    """A Sized's launches on a runtime module (prepared: addresses, sizes fixed, tensor maps encoded per address) give
    the driver the bytes that module.launch would pack for the same tensors, workspaces and scalars: every
    launch_sized of a forward and its backward (or of an inference forward, whose kept-only workspaces get the zero
    map) replayed both ways (the driver's encodings of the maps replaced by the emulator's, which module.launch makes
    of CPU tensors)."""
    from kdagen.runtime import tensormap
    from test_runtime import install_fake_driver, packed
    monkeypatch.setenv("KDAGEN_FAMILY", family)
    driver = install_fake_driver(monkeypatch)
    monkeypatch.setattr(tensormap, "_encode", emulate.encode_layout)
    calls, real = [], launcher.launch_sized
    monkeypatch.setattr(launcher, "launch_sized", lambda *a: calls.append(a) or real(*a))
    for module in (fw, bw):
        monkeypatch.setattr(module, "launch_sized", launcher.launch_sized)
    x, call = call_of(GDN if op == "gdn" else LB, cu_seqlens=[0, 9, 30], H=8, op=op)
    o, ht, saved = fw.forward(x, call, keep=keep, loader=lambda config, device, direction: Recorder())
    if keep:
        bw.backward(saved, torch.ones_like(o), torch.ones_like(ht), loader=lambda config, device, direction: Recorder())
    assert [a[-1] for a in calls] == ["forward", "backward"][:1 + keep]
    if family == "wgmma64" and not keep:
        assert calls[0][0].kept_only                # kept-only workspaces: their zero maps are replayed too
    maps = 0

    def recorded(name, grid, block, args, smem_bytes):
        pointers = [("ptr", 0 if a is None else a.data_ptr()) if a is None or isinstance(a, torch.Tensor) else a
                    for a in args]
        generic.append((name, rt_launch.dim3(grid, "grid"), rt_launch.dim3(block, "block"), smem_bytes,
                        packed(pointers)))
    for sized, _, _, tensors, ws, scalars, direction in calls:
        generic = []
        real(sized, types.SimpleNamespace(launch=recorded), "cpu", tensors, ws, scalars, direction)
        driver.arity.update({name: [128 if kind == "tensor_map" else 8 for kind, *_ in params]
                             for name, *_, params in sized.launches})
        maps += sum(kind == "tensor_map" for *_, params in sized.launches for kind, *_ in params)
        driver.launched.clear()
        assert sized.bindable, direction
        real(sized, rt_launch.Module("m", "sm_90a", b"", "cubin"), torch.device("cpu", 0), tensors, ws, scalars,
             direction)
        assert driver.launched == generic and len(generic) == len(sized.launches), direction
    assert (maps > 0) == (family == "wgmma64")


def test_carved_workspaces_are_aligned_apart_and_kept_ones_separate(monkeypatch):
    monkeypatch.setenv("KDAGEN_FAMILY", "mma16")         # its inference plan has a workspace only a backward reads
    x, call = call_of(LB, B=2, T=40, H=2)
    schedule = launcher.scheduled(fw.call_config(x, call, False), "forward")
    sized = schedule.checked_sized(x, call.scalars, torch.device("cpu"))
    ws = launcher.Workspaces(sized, "cpu", torch.empty, separate=False)
    views, base = ws.tensors(), ws.buffer.data_ptr()
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in views.values())
    # what only a backward reads (the state checkpoints) is neither carved nor allocated for an inference call
    assert sized.kept_only == ("ws_state_blocks",)
    assert {n: (tuple(t.shape), t.dtype) for n, t in views.items()} == {n: (s, d) for n, s, d in sized.workspaces
                                                                         if n not in sized.kept_only}
    assert all((a - base) % 256 == 0 for a, _ in spans) and all(e <= a for (_, e), (a, _) in zip(spans, spans[1:]))
    assert ws.addresses() == {n: t.data_ptr() for n, t in views.items()} and spans[-1][1] <= base + sized.carved[1]
    kept = launcher.Workspaces(sized, "cpu", torch.empty, separate=True)
    assert kept.buffer is None and len({t.data_ptr() for t in kept.tensors().values()}) == len(sized.workspaces)
    assert "ws_state_blocks" in kept.tensors()
    own = launcher.Workspaces(sized, "cpu", lambda shape, dtype, device: torch.zeros(shape, dtype=dtype), False)
    assert own.buffer is None and all(t.count_nonzero() == 0 for t in own.tensors().values())


def test_a_tensor_map_reads_its_tensor_in_the_plans_dtype():
    """A map's element type is the plan's: a tensor of another dtype would be copied as garbage, so the generic path
    refuses it (the prepared path checks the call's dtypes against the same plan once, `Sized.extents`)."""
    layout = ("ws_A", torch.bfloat16, [64, 64], 128, [64, 64], [64])
    with pytest.raises(TypeError, match="tensor map of 'ws_A': the tensor has dtype torch.float32, the plan's map "
                                        "reads torch.bfloat16"):
        launcher.tensor_map(layout, torch.zeros(64, 64))
    assert launcher.tensor_map(layout, torch.zeros(64, 64, dtype=torch.bfloat16)).data


def test_only_pointers_floats_sizes_and_fixed_size_maps_are_prepared():
    """A tensor map is a slot of its own (encoded per address) where the call fixes its tensor's dtype and size, so
    that the layout can be checked against it once."""
    def launches(*params):
        return [("k", (1, 1, 1), (32,), 0, tuple((kind, key, key, layout) for kind, key, layout in params))]
    sizes, extents = {"T": 40, "N": 1}, {"ws_A": (torch.bfloat16, 8192)}
    a_map = ("ws_A", torch.bfloat16, [64, 64], 128, [64, 64], [64])
    assert launcher.bindable(launches(("ptr", "in_q", None), ("f32", "sc_scale", None), ("i32", "T", None),
                                      ("i64", "N", None), ("tensor_map", "ws_A", a_map)), sizes, extents)
    assert not launcher.bindable(launches(("tensor_map", "ws_B", a_map)), sizes, extents)       # no extent
    assert not launcher.bindable(launches(("tensor_map", "ws_A", ("ws_A", torch.float32, *a_map[2:]))), sizes,
                                 extents)                                                       # another dtype
    assert not launcher.bindable(launches(("i32", "chunk", None)), sizes, extents)


@pytest.mark.parametrize("shape, keep, family", [
    (dict(B=2, T=40, H=2), False, "wgmma64"),              # 4 pairs, no grad: the 64-token chain
    (dict(B=4, T=40, H=16), False, "wgmma64"),             # 64 pairs (head dim 64: at most 64)
    (dict(B=1, T=40, H=65), False, "mma16"),               # 65 pairs: the cheaper prepare
    (dict(cu_seqlens=[0, 9, 30], H=32), False, "wgmma64"),  # varlen: N·HV = 64
    (dict(cu_seqlens=[0, 9, 30, 31], H=22), False, "mma16"),  # 66
    (dict(B=2, T=40, H=2), True, "mma16"),                 # a training call on 4 pairs: mma16 (its cut)
    (dict(B=4, T=40, H=4), True, "wgmma64"),               # a training call on 16 pairs: the chunk-64 backward
    (dict(B=4, T=40, H=16, D=128), False, "wgmma64"),      # head dim 128, a per-channel decay: any number of pairs
    (dict(B=5, T=40, H=13, D=128), False, "wgmma64"),      # 65
    (dict(op="gdn", B=4, T=40, H=16, D=128), False, "wgmma64"),   # a per-head decay too: any number of pairs
    (dict(op="gdn", B=5, T=40, H=13, D=128), False, "wgmma64"),   # 65
    (dict(op="gdn", B=1, T=40, H=65), False, "mma16"),            # 65 pairs at head dim 64
])
def test_the_call_class_ranks_the_families(shape, keep, family, monkeypatch):
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    x, call = call_of(GDN if shape.get("op") == "gdn" else LB, **shape)
    config = fw.call_config(x, call, keep)
    assert config.planned()[0].family == family
    assert config.ranking == ("default" if family == "mma16" else "training" if keep else "few_pairs")


@pytest.mark.parametrize("heads, rank", [(2, "default"), (8, "training")])
def test_a_training_call_carries_its_ranking_in_the_op_key(heads, rank, monkeypatch):
    """The class a training call ranks families by travels in the custom op's key, so its fake implementation (which
    may not know the pairs) plans the family the kernels run: 2·2 pairs rank as usual, 2·8 for training."""
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    x, call = call_of(LB, B=2, T=40, H=heads)
    inputs = [x[n] for n in call.spec.inputs]
    assert ops_run.training_ranking(call, inputs) == rank
    scalars = [call.scalars[n] for n in call.spec.scalars]
    for carried in (rank, "default"):         # "default": what a trace that could not count the pairs carries
        key = library.call_key(call.spec, call.state_layout, None, False, 1, carried)
        planned = fw.call_config(x, library._call(key, scalars, True, None), True).planned()[0]
        assert library.entry(key).ranking == carried
        assert planned.family == ("wgmma64" if carried == "training" else "mma16"), (carried, planned.family)


def test_a_symbolic_batch_size_gives_no_pair_count():
    """A symbolic batch size (torch.compile traces its fake implementations with dynamic shapes) gives no pair
    count, so the trace does not specialise the graph on it."""
    from types import SimpleNamespace

    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    B = ShapeEnv().create_unbacked_symint()
    assert fw.call_pairs(SimpleNamespace(shape=(B, 40, 4, 64)), None, 4) is None
    assert fw.call_pairs(torch.empty(2, 40, 4, 64), None, 4) == 8
    assert fw.call_pairs(torch.empty(1, 40, 4, 64), torch.tensor([0, 3, 40]), 4) == 8
