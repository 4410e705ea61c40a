"""Runtime on CPU: arch mapping, environment variables, NVRTC compiles, load_module's memo and cache, launch args."""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import struct
import threading
import types

import pytest
import torch

from kdagen import runtime
from kdagen.runtime import arch, env, launch, loader, nvrtc
from markers import needs_nvrtc

from kdagen.reference import Options

TINY = 'extern "C" __global__ void fill(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.f; }'
# setmaxnreg exists only on sm_90a: compiling it proves the 'a' target reached ptxas.
SM90A_ONLY = ('extern "C" __global__ void __launch_bounds__(128) grow(float* y) {\n'
              '  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\\n");\n  y[threadIdx.x] = 1.f;\n}\n')
BF16 = ('#include <cuda_bf16.h>\nextern "C" __global__ void axpy(const __nv_bfloat16* x, float* y, float a, int n) {\n'
        '  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * __bfloat162float(x[i]);\n}\n')



@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KDAGEN_DISABLE_JIT", raising=False)
    runtime.forget_modules()
    yield tmp_path / "cache"
    runtime.forget_modules()


# ---- arch -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cc, expected", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 6), "sm_80"),
                                          ((8, 9), "sm_80"), ((10, 0), "sm_80"), ((12, 0), "sm_80")])
def test_arch_for_capability(cc, expected):
    assert runtime.arch_for_capability(cc) == expected


@pytest.mark.parametrize("cc", [(7, 5), (7, 0), (6, 1)])
def test_old_gpus_get_a_clear_error(cc):
    with pytest.raises(runtime.UnsupportedArchError, match=rf"compute capability {cc[0]}\.{cc[1]}.*8\.0 or newer"):
        runtime.arch_for_capability(cc)


@pytest.mark.parametrize("arch_, cc, kind", [("sm_90a", (9, 0), "cubin"), ("sm_80", (8, 0), "cubin"),
                                              ("sm_80", (8, 9), "cubin"), ("sm_80", (9, 0), "ptx"),
                                              ("sm_80", (10, 0), "ptx"), ("sm_80", (12, 0), "ptx")])
def test_image_kind(arch_, cc, kind):
    assert runtime.image_kind(arch_, cc) == kind


@pytest.mark.parametrize("arch_, cc", [("sm_90a", (8, 0)), ("sm_90a", (10, 0)), ("sm_80", (7, 5))])
def test_image_kind_refuses_code_that_cannot_run(arch_, cc):
    with pytest.raises(runtime.UnsupportedArchError, match=arch_):
        runtime.image_kind(arch_, cc)


@pytest.mark.parametrize("name, expected", [("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("9.0a", "sm_90a"),
                                            ("SM_80", "sm_80"), ("80", "sm_80"), (" 8.0 ", "sm_80")])
def test_normalize_arch(name, expected):
    assert runtime.normalize_arch(name) == expected


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch reports one GPU whose capability the test sets."""
    capability = {"cc": (9, 0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: capability["cc"])
    monkeypatch.delenv("KDAGEN_ARCH", raising=False)
    arch._capability_of.cache_clear()
    yield capability
    arch._capability_of.cache_clear()


@pytest.mark.parametrize("cc, expected", [((9, 0), "sm_90a"), ((8, 6), "sm_80"), ((12, 0), "sm_80")])
def test_detect_arch_reads_the_device(fake_gpu, cc, expected):
    fake_gpu["cc"] = cc
    assert runtime.detect_arch() == expected
    assert runtime.detect_arch("cuda:0") == expected


def test_kdagen_arch_overrides_the_device(fake_gpu, monkeypatch):
    monkeypatch.setenv("KDAGEN_ARCH", "sm_80")
    assert runtime.detect_arch() == "sm_80"
    monkeypatch.setenv("KDAGEN_ARCH", "sm_75")
    with pytest.raises(runtime.UnsupportedArchError, match="KDAGEN_ARCH='sm_75'"):
        runtime.detect_arch()


def test_without_gpu_the_error_points_to_kdagen_arch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("KDAGEN_ARCH", raising=False)
    with pytest.raises(runtime.UnsupportedArchError, match="KDAGEN_ARCH"):
        runtime.detect_arch()
    monkeypatch.setenv("KDAGEN_ARCH", "90a")
    assert runtime.detect_arch() == "sm_90a"


def test_cpu_device_is_rejected():
    with pytest.raises(ValueError, match="not a CUDA device"):
        arch.device_index("cpu")


# ---- environment ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("ON", True), ("0", False),
                                             ("", False), ("no", False)])
def test_flags(monkeypatch, value, expected):
    monkeypatch.setenv("KDAGEN_VERBOSE", value)
    assert env.verbose() is expected


def test_a_mistyped_flag_is_an_error(monkeypatch):
    monkeypatch.setenv("KDAGEN_DISABLE_JIT", "yes please")
    with pytest.raises(ValueError, match="KDAGEN_DISABLE_JIT"):
        env.jit_disabled()


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("KDAGEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert runtime.cache_dir() == tmp_path / ".cache" / "kdagen"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert runtime.cache_dir() == tmp_path / "xdg" / "kdagen"
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path / "mine"))
    assert runtime.cache_dir() == tmp_path / "mine"


def test_precompile_list(monkeypatch):
    monkeypatch.setenv("KDAGEN_PRECOMPILE", " kda:128 ; gdn:64;; ")
    assert env.precompile_list() == ["kda:128", "gdn:64"]


def test_verbose_notes_go_to_stderr(monkeypatch, capsys):
    monkeypatch.setenv("KDAGEN_VERBOSE", "0")
    env.note("quiet")
    monkeypatch.setenv("KDAGEN_VERBOSE", "1")
    env.note("loud")
    err = capsys.readouterr().err
    assert "loud" in err and "quiet" not in err


# ---- CUDA headers -----------------------------------------------------------------------------------------

def test_include_dir_is_the_first_with_cuda_bf16(tmp_path):
    empty, good, later = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d in (empty, good, later):
        d.mkdir()
    (good / "cuda_bf16.h").write_text("")
    (later / "cuda_bf16.h").write_text("")
    assert nvrtc.find_include_dir([empty, good, later]) == good


def test_missing_headers_list_where_they_were_sought(tmp_path):
    with pytest.raises(nvrtc.ToolkitNotFoundError, match=rf"cuda_bf16\.h not found(.|\n)*{tmp_path.name}"):
        nvrtc.find_include_dir([tmp_path])


def test_cuda_path_is_searched_in_both_layouts(monkeypatch, tmp_path):
    cross = tmp_path / "targets" / "x86_64-linux" / "include"
    cross.mkdir(parents=True)
    monkeypatch.setenv("CUDA_PATH", str(tmp_path))
    dirs = nvrtc.candidate_include_dirs()
    assert tmp_path / "include" in dirs and cross in dirs


# ---- NVRTC ------------------------------------------------------------------------------------------------

@needs_nvrtc
def test_compile_sm90a_cubin():
    image = runtime.compile_cubin(SM90A_ONLY, "grow.cu", "sm_90a")
    assert image[:4] == b"\x7fELF"
    sm = (struct.unpack_from("<I", image, 48)[0] >> 8) & 0xFF      # CUDA ELF e_flags: SM in bits 8..15
    assert sm == 90


@needs_nvrtc
def test_sm90a_features_fail_on_plain_sm90_with_the_log():
    with pytest.raises(runtime.CompileError, match=r"(?s)grow\.cu.*setmaxnreg"):
        runtime.compile_cubin(SM90A_ONLY, "grow.cu", "sm_90")


@needs_nvrtc
@pytest.mark.parametrize("arch_", ["sm_90a", "sm_80"])
def test_bf16_header_is_found(arch_):
    assert runtime.compile_cubin(BF16, "axpy.cu", arch_)[:4] == b"\x7fELF"


@pytest.mark.parametrize("version, split", [((13, 0), True), ((12, 1), True), ((12, 0), False), ((11, 8), False)])
def test_cubins_compile_their_kernels_in_parallel_where_nvrtc_can(monkeypatch, version, split):
    class FakeNvrtc:
        @staticmethod
        def getVersion():
            return version
    monkeypatch.setattr(nvrtc, "_nvrtc", lambda: FakeNvrtc)
    monkeypatch.setattr(nvrtc, "cuda_include_dir", lambda: "/cuda/include")
    nvrtc.split_compile.cache_clear()
    try:
        assert ("--split-compile=0" in nvrtc.nvrtc_options("sm_90a", "cubin")) == split
        assert "--split-compile=0" not in nvrtc.nvrtc_options("sm_90a", "ptx")   # PTX: no assembly to split
    finally:
        nvrtc.split_compile.cache_clear()


@needs_nvrtc
def test_two_kernels_in_one_unit_compile_in_parallel_threads():
    image = runtime.compile_cubin(TINY + TINY.replace("fill", "fill_again"), "two.cu", "sm_80")
    split = nvrtc._nvrtc().getVersion() >= nvrtc.SPLIT_COMPILE
    assert b"fill_again" in image and nvrtc.split_compile() == (["--split-compile=0"] if split else [])


@needs_nvrtc
def test_ptx_for_the_driver_to_jit():
    ptx = runtime.compile_source(TINY, "fill.cu", "sm_80", kind="ptx").decode()
    assert ".target sm_80" in ptx and ".entry fill" in ptx


@needs_nvrtc
def test_syntax_errors_carry_the_compiler_log():
    with pytest.raises(runtime.CompileError, match=r"(?s)broken\.cu.*error"):
        runtime.compile_cubin('extern "C" __global__ void k() { nope; }', "broken.cu", "sm_90a")


# ---- load_module: memo, disk cache, KDAGEN_DISABLE_JIT ------------------------------------------------------

@needs_nvrtc
def test_a_training_forward_starts_its_backward_compile(cache_root, monkeypatch):
    """The first forward of a training Config loads its backward in a background thread (kdagen.ops.config.load),
    so the two directions compile side by side; the backward's own load then finds that module. An inference
    Config starts none."""
    from kdagen.ops import config as config_mod
    monkeypatch.setattr(config_mod, "_AHEAD", {})
    training = dataclasses.replace(config_mod.options_config(Options(op="gdn"), 64, 64, "sm_90a", has_A_log=False,
                                                             has_dt_bias=False), family="mma16")
    inference = dataclasses.replace(training, directions=config_mod.INFERENCE)
    config_mod.load(inference, None, "forward")
    assert config_mod._AHEAD == {}
    forward = config_mod.load(training, None, "forward")
    ahead = config_mod._AHEAD[(training, None)].result(timeout=300)
    plan, _ = training.planned()
    assert forward.uri.endswith("_forward") and isinstance(ahead, runtime.KernelModules)   # a module per kernel
    assert {k: m.uri for k, m in ahead.modules.items()} == {k.name: f"{plan.uri}_backward_{k.name}"
                                                            for k in plan.direction("backward")}
    assert config_mod.load(training, None, "backward") is ahead


# a training forward's backward compile started, the process ends once that thread is inside NVRTC (half a second
# after entering the compile: with the thread a daemon, the exit crashed at 0.3-1 s, not at once)
EXIT_WHILE_COMPILING = """
import dataclasses, threading, time
from kdagen.ops import config
from kdagen.reference import Options
from kdagen.runtime import loader
inside, compile_source = threading.Event(), loader.compile_source
def entered(*args, **kwargs):
    inside.set()
    return compile_source(*args, **kwargs)
loader.compile_source = entered
training = dataclasses.replace(config.options_config(Options(op="gdn"), 64, 64, "sm_90a", has_A_log=False,
                                                     has_dt_bias=False), family="mma16")
config.compile_backward_ahead(training, None)
assert inside.wait(300)
time.sleep(0.5)
alive = [t.is_alive() for t in threading.enumerate() if t.name == "kdagen-backward-compile"]
print("leaving", alive, flush=True)
"""


@needs_nvrtc
def test_a_process_ending_during_the_backward_compile_exits_cleanly(tmp_path):
    """A process that ends while its backward compiles ahead (a forward-only script with gradients on) exits with
    status 0: the daemon thread inside NVRTC at the interpreter's finalisation crashed it (segmentation fault)
    until the exit waited for it."""
    import subprocess
    import sys
    env = {**os.environ, "KDAGEN_CACHE_DIR": str(tmp_path)}      # a cold cache: the compile is still running
    done = subprocess.run([sys.executable, "-c", EXIT_WHILE_COMPILING], env=env, capture_output=True, text=True,
                          timeout=600)
    assert "leaving [True]" in done.stdout, done.stdout      # the compile was still running
    assert done.returncode == 0 and "Error in sys.excepthook" not in done.stderr, (done.returncode, done.stderr[-2000:])


# the same, with a compile that never ends and the exit's wait cut to a second
EXIT_WHILE_HUNG = """
import dataclasses, threading
from kdagen.ops import config
from kdagen.reference import Options
from kdagen.runtime import loader
config.AHEAD_EXIT_WAIT_S = 1.0
inside = threading.Event()
def hung(*args, **kwargs):
    inside.set()
    threading.Event().wait()
loader.compile_source = hung
training = dataclasses.replace(config.options_config(Options(op="gdn"), 64, 64, "sm_90a", has_A_log=False,
                                                     has_dt_bias=False), family="mma16")
config.compile_backward_ahead(training, None)
assert inside.wait(300)
print("leaving", flush=True)
"""


@needs_nvrtc
def test_a_hung_backward_compile_does_not_keep_a_process_alive(tmp_path):
    """The exit's wait for a backward compile is bounded (AHEAD_EXIT_WAIT_S): a compile that never returns (a hung
    compiler, a cache lock never released) does not keep the process from ending."""
    import subprocess
    import sys
    env = {**os.environ, "KDAGEN_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", EXIT_WHILE_HUNG], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "leaving" in done.stdout and done.returncode == 0, (done.returncode, done.stderr[-2000:])


@needs_nvrtc
def test_load_module_compiles_once_then_memo_then_disk(cache_root, monkeypatch):
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    compiles = []
    real = loader.compile_source
    monkeypatch.setattr(loader, "compile_source", lambda *a, **k: compiles.append(a[1]) or real(*a, **k))

    m1 = runtime.load_module("tiny_fill", TINY)
    assert (m1.arch, m1.kind, m1.image[:4]) == ("sm_90a", "cubin", b"\x7fELF")
    assert runtime.load_module("tiny_fill", TINY) is m1                  # per-process memo
    runtime.forget_modules()
    m2 = runtime.load_module("tiny_fill", TINY)                          # a new process: the disk cache
    assert m2 is not m1 and m2.image == m1.image
    assert compiles == ["tiny_fill.cu"]
    entries = list(cache_root.glob("sm_90a/tiny_fill/*.cubin"))
    assert len(entries) == 1

    runtime.load_module("tiny_fill", TINY.replace("1.f", "2.f"))         # new source: new key, new compile
    runtime.load_module("tiny_fill", TINY, "sm_80")                      # new arch too
    assert len(compiles) == 3 and len(list(cache_root.glob("*/tiny_fill/*.cubin"))) == 3


@needs_nvrtc
@pytest.mark.filterwarnings("ignore:kdagen cannot write its kernel cache")
def test_lineinfo_keeps_the_source_under_the_name_it_is_compiled_as(cache_root, monkeypatch):
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    plain = runtime.load_module("tiny_fill", TINY)
    monkeypatch.setenv("KDAGEN_LINEINFO", "1")
    runtime.forget_modules()
    names = []
    real = loader.compile_source
    monkeypatch.setattr(loader, "compile_source", lambda *a, **k: names.append(a[1]) or real(*a, **k))
    lined = runtime.load_module("tiny_fill", TINY)
    kept = (cache_root / "source" / "tiny_fill.cu").resolve()
    assert names == [str(kept)] and kept.read_text() == TINY
    assert b".debug_line" in lined.image and b".debug_line" not in plain.image
    assert len(list(cache_root.glob("sm_90a/tiny_fill/*.cubin"))) == 2      # its own cache entry
    # a rendered unit: kept under the name its #line directives give its own lines
    unit = f'#line 1 "templates/x.cu.j2"\n{TINY}\n#line 9 "plan_uri/forward.cu"\n'
    runtime.load_module("tiny_unit", unit)
    assert names[-1] == str((cache_root / "source" / "plan_uri" / "forward.cu").resolve())
    with pytest.raises(ValueError, match="outside"):
        loader.keep_source("bad", '#line 1 "../../escape.cu"\n')
    # a cache root that is a file: the call still gets its module (compiled in memory, under the plain name)
    blocked = cache_root.parent / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(blocked))
    runtime.forget_modules()
    assert runtime.load_module("tiny_fill", TINY).image[:4] == b"\x7fELF" and names[-1] == "tiny_fill.cu"


@needs_nvrtc
def test_disable_jit_uses_the_cache_only(cache_root, monkeypatch):
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("KDAGEN_DISABLE_JIT", "1")
    with pytest.raises(runtime.JitDisabledError, match="tiny_fill"):
        runtime.load_module("tiny_fill", TINY)
    monkeypatch.setenv("KDAGEN_DISABLE_JIT", "0")
    runtime.load_module("tiny_fill", TINY)
    runtime.forget_modules()
    monkeypatch.setenv("KDAGEN_DISABLE_JIT", "1")
    assert runtime.load_module("tiny_fill", TINY).image[:4] == b"\x7fELF"


@pytest.mark.parametrize("uri", ["../escape", "a/b", "", "has space", ".hidden"])
def test_uris_must_be_file_name_safe(uri, monkeypatch):
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="uri"):
        runtime.load_module(uri, TINY)


def test_cache_key_covers_every_input():
    from kdagen.runtime.cache import entry_key
    base = dict(source=TINY, arch="sm_90a", kind="cubin", options=(), versions={"compiler": "nvrtc-13.0"})
    keys = {entry_key(**base),
            entry_key(**{**base, "source": TINY + " "}),
            entry_key(**{**base, "arch": "sm_80"}),
            entry_key(**{**base, "kind": "ptx"}),
            entry_key(**{**base, "options": ("-lineinfo",)}),
            entry_key(**{**base, "versions": {"compiler": "nvrtc-13.1"}})}
    assert len(keys) == 6
    assert entry_key(**base) == entry_key(**base)


# ---- launch arguments (packed by hand for the driver) ------------------------------------------------------

def test_kernel_args_are_packed_with_their_c_types():
    pointers, values = launch.pack_args([7, runtime.i64(2 ** 40), runtime.f32(0.5), None, -3])
    read = [ctypes.cast(pointers[i], ctypes.POINTER(t)).contents.value
            for i, t in enumerate([ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int32])]
    assert read == [7, 2 ** 40, 0.5, None, -3]
    assert [ctypes.sizeof(v) for v in values] == [4, 8, 4, 8, 4]


@pytest.mark.parametrize("arg, error, message", [
    (2 ** 31, OverflowError, "argument 1 .* int32.*i64"),
    (1.5, TypeError, "argument 1 is a Python float.*f32"),
    (True, TypeError, "argument 1 is a bool"),
    ("x", TypeError, "argument 1 has unsupported type str"),
    (torch.zeros(2), ValueError, "argument 1 is a tensor on cpu"),
])
def test_bad_kernel_args_name_their_position(arg, error, message):
    with pytest.raises(error, match=message):
        launch.pack_args([0, arg])


class FakeDriver:
    """cupy.cuda.driver as launches use it, and the function handles Module.function gives: records each launch
    with the bytes each entry of its void*[] points to, read while the launch is in flight (as the driver
    does); `arity` gives each kernel's parameter count (8 bytes each) or each parameter's size."""
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self, context=7):
        self.context, self.launched, self.attributes, self.arity, self.names = context, [], [], {}, {}

    def function(self, name: str):
        ptr = self.names.setdefault(name, 1000 + len(self.names))
        return types.SimpleNamespace(ptr=ptr)

    def ctxGetCurrent(self):
        return self.context

    def funcSetAttribute(self, fn, attribute, value):
        self.attributes.append((fn, attribute, value))

    def launchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        name = next(n for n, ptr in self.names.items() if ptr == fn)
        sizes = self.arity[name]
        sizes = [8] * sizes if isinstance(sizes, int) else sizes
        array = (ctypes.c_void_p * len(sizes)).from_address(params)
        self.launched.append((name, (gx, gy, gz), (bx, by, bz), smem,
                              [ctypes.string_at(array[i], n) for i, n in enumerate(sizes)]))


def install_fake_driver(monkeypatch) -> FakeDriver:
    """Runtime Modules launch through a FakeDriver on device 0, its context current; a device switch does
    nothing."""
    driver = FakeDriver()
    monkeypatch.setattr(launch, "_driver", lambda: driver)
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 99)
    monkeypatch.setattr(launch, "_CONTEXTS", {0: driver.context})
    monkeypatch.setattr(launch, "on_device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(launch.Module, "function", lambda self, name, index: driver.function(name))
    return driver


@pytest.fixture
def fake_driver(monkeypatch):
    """A runtime Module on a FakeDriver (install_fake_driver)."""
    return launch.Module("fake", "sm_90a", b"", "cubin"), install_fake_driver(monkeypatch)


def packed(args) -> list[bytes]:
    """The bytes the driver reads per argument, as FakeDriver reads them (8 each, a tensor map's 128): as pack_args
    packs each value, an address ("ptr", int) as a void*."""
    return [(struct.pack("<Q", a[1]) if isinstance(a, tuple) else bytes(launch.c_value(a, i))).ljust(8, b"\0")
            for i, a in enumerate(args)]


def test_a_prepared_launch_passes_what_pack_args_packs(fake_driver):
    """Fixed arguments packed once, slots written per launch: the driver reads the same bytes pack_args gives
    for those values, launch after launch, on the current stream, without a device switch."""
    module, driver = fake_driver
    params = [7, launch.Slot("ptr"), runtime.i64(2 ** 40), launch.Slot("f32"), None, -3, launch.Slot("tmap"),
              launch.Slot("ptr"), runtime.f32(0.25)]
    driver.arity["k"] = [128 if p == launch.Slot("tmap") else 8 for p in params]
    prepared = module.prepare("k", (3, 2), 128, params, smem_bytes=1024, device_index=0)
    for address, scale, other, fill in ((0x7F00_0000_1000, 0.5, 0, 1), (0x7F00_0000_2000, -1.5, 0xDEAD0, 2)):
        tmap = runtime.TensorMap(bytes(range(fill, fill + 128)))
        prepared((address, scale, tmap.data, other))
        want = packed([7, ("ptr", address), runtime.i64(2 ** 40), runtime.f32(scale), None, -3, tmap, ("ptr", other),
                       runtime.f32(0.25)])
        assert driver.launched[-1] == ("k", (3, 2, 1), (128, 1, 1), 1024, want)
    assert len(driver.launched) == 2 and not driver.attributes


@pytest.mark.parametrize("arg, error, message", [
    (2 ** 31, OverflowError, "argument 1 .* int32.*i64"),
    (1.5, TypeError, "argument 1 is a Python float.*f32"),
    (True, TypeError, "argument 1 is a bool"),
    (torch.zeros(2), TypeError, "argument 1 is a tensor.*Slot"),
])
def test_a_prepared_launchs_fixed_arguments_are_checked_when_it_is_made(fake_driver, arg, error, message):
    module, _ = fake_driver
    with pytest.raises(error, match=message):
        module.prepare("k", 1, 32, [launch.Slot("ptr"), arg], device_index=0)


def test_a_launch_switches_device_only_where_its_context_is_not_current(fake_driver, monkeypatch):
    module, driver = fake_driver
    switched = []

    @contextlib.contextmanager
    def on_device(index):
        switched.append(index)
        yield
    monkeypatch.setattr(launch, "on_device", on_device)
    driver.arity["k"] = 1
    prepared = module.prepare("k", 1, 32, [launch.Slot("ptr")], smem_bytes=64 * 1024, device_index=0)
    assert switched == [0] and driver.attributes == [(1000, 8, 64 * 1024)]    # the opt-in, once, on the device
    prepared((16,))
    assert switched == [0]
    driver.context = 8                          # another context current (another device's, or none)
    prepared((32,))
    assert switched == [0, 0] and [a[-1] for a in driver.launched] == [packed([("ptr", 16)]), packed([("ptr", 32)])]


def test_each_thread_launches_from_its_own_argument_block(fake_driver):
    """The driver reads the block while the GIL is released: a block shared between threads could be rewritten
    under a launch in flight."""
    module, driver = fake_driver
    prepared = module.prepare("k", 1, 32, [launch.Slot("ptr")], device_index=0)
    blocks, together = [prepared._block()], threading.Barrier(2)

    def take():
        blocks.append(prepared._block())
        together.wait()                        # both threads alive, each holding its block
    threads = [threading.Thread(target=take) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({params for _, params, _ in blocks}) == 3


@pytest.mark.parametrize("dims, expected", [(5, (5, 1, 1)), ((2, 3), (2, 3, 1)), ((1, 2, 3), (1, 2, 3))])
def test_dim3(dims, expected):
    assert launch.dim3(dims, "grid") == expected


@pytest.mark.parametrize("dims", [(1, 2, 3, 4), (-1,), (2.0,), ()])
def test_bad_dims(dims):
    with pytest.raises(ValueError, match="grid"):
        launch.dim3(dims, "grid")


def test_args_on_several_devices_are_refused():
    with pytest.raises(ValueError, match="several devices"):
        launch.args_device([torch.zeros(1), torch.zeros(1, device="meta")])


def test_notes_are_log_records_of_the_kdagen_logger(monkeypatch, caplog):
    monkeypatch.setenv("KDAGEN_VERBOSE", "0")
    with caplog.at_level("INFO", logger="kdagen"):
        env.note("compiling x for sm_90a")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == \
        [("kdagen", "INFO", "compiling x for sm_90a")]


def test_kernel_modules_load_one_after_another_where_no_thread_starts(monkeypatch):
    """load_kernel_modules compiles each kernel's program in a thread of its own; where a thread cannot start (the
    interpreter shutting down) it loads that kernel and the rest in the caller's thread, and still returns every
    kernel's module (no unstarted thread joined)."""
    monkeypatch.setattr(loader, "_grouped", {})
    callers = {}

    def fake_load(uri, source, arch, *, device=None):
        callers[uri] = threading.current_thread().name
        return types.SimpleNamespace(uri=uri)
    monkeypatch.setattr(loader, "load_module", fake_load)
    start, started = threading.Thread.start, []

    def start_once(self):
        if started:
            raise RuntimeError("can't create new thread at interpreter shutdown")
        started.append(self)
        start(self)
    monkeypatch.setattr(threading.Thread, "start", start_once)
    units = tuple((f"k{i}", f"uri{i}", "src") for i in range(3))
    modules = loader.load_kernel_modules(units, "sm_90a", device=0)
    assert {k: m.uri for k, m in modules.modules.items()} == {"k0": "uri0", "k1": "uri1", "k2": "uri2"}
    assert callers["uri0"] == "kdagen-compile"
    assert callers["uri1"] == callers["uri2"] == threading.current_thread().name


def test_an_interrupted_join_waits_for_the_compiles_under_way(monkeypatch):
    """Ctrl-C while the caller joins the compile threads: the interrupt goes on only after the threads still
    compiling have ended (or EXIT_WAIT_S has passed), so the interpreter never finalises under a compile."""
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=True)
    worker.start()
    join = threading.Thread.join
    calls = []

    def interrupted_join(self, timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            release.set()                    # the compile ends while the interrupt is handled
            raise KeyboardInterrupt
        join(self, timeout)
    monkeypatch.setattr(threading.Thread, "join", interrupted_join)
    with pytest.raises(KeyboardInterrupt):
        loader._join([worker])
    assert calls[0] is None and 0 < calls[1] <= loader.EXIT_WAIT_S and not worker.is_alive()


def test_a_kernel_program_is_named_after_its_kernel():
    """A backward kernel compiled as a program of its own carries its own unit name in its #line directives (and in
    the source file a profile keeps), not its direction's."""
    from kdagen.codegen import render_unit
    from kdagen.ops import config as config_mod
    cfg = dataclasses.replace(config_mod.options_config(Options(op="gdn"), 64, 64, "sm_90a", has_A_log=False,
                                                        has_dt_bias=False), family="wgmma64")
    plan, recurrence = cfg.planned()
    source = render_unit(plan, recurrence, "backward", kernel="dstate")
    assert f'"{plan.uri}/backward_dstate.cu"' in source and f'"{plan.uri}/backward.cu"' not in source
