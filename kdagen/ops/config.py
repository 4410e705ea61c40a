"""What a call's kernels compute (`Spec`: a DSL recurrence) and are specialised on (`Config`), its plan and
rendered units (cached per process), and the compiled modules (kdagen.runtime). Every op — chunk_kda,
chunk_gated_delta_rule and a user's recurrence — and `kdagen compile` go through here.

A Config records whether the call needs a backward: the family is chosen for the directions a call runs
(an inference call may use a forward-only family), the call's class by its (sequence, head) pairs, head dim and
decay kind (few pairs without gradients, many with: families rank differently there,
kdagen.plan.families.ranking), and KDAGEN_FAMILY, read when the Config is made.
"""
from __future__ import annotations

import atexit
import dataclasses
import functools

import torch

from ..codegen import has_entries, render_unit
from ..plan import Dtypes, Plan, Problem, make_plan, verify
from ..plan.configs import options_recurrence
from ..plan.families import rank_kind, ranking, requested
from ..plan.problem import check_input_dtypes, qk_inputs, recurrence_facts
from ..runtime import env as runtime_env

_DTYPE = {torch.bfloat16: "bf16", torch.float32: "f32"}
TRAINING = ("forward", "backward")
INFERENCE = ("forward",)


def default_arch(device=None) -> str:
    """The arch kernels are planned for: KDAGEN_ARCH, else the GPU's, else sm_90a (CPU emulation, emit)."""
    from .. import runtime
    if runtime_env.arch_override() or (torch.cuda.is_available() and (device is None or device.type == "cuda")):
        return runtime.detect_arch(device)
    return "sm_90a"


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the kernels compute: a checked DSL recurrence, the readable name that starts its URIs, and its graph
    hash (two recurrences with the same graph share plans and modules whatever object holds them)."""
    recurrence: object = dataclasses.field(compare=False, repr=False)
    name: str
    graph_sha: str
    value: str = dataclasses.field(compare=False)          # the token input that is the core's value
    qk: tuple = dataclasses.field(compare=False)           # the token inputs on the q/k heads
    token_inputs: tuple = dataclasses.field(compare=False)
    head_params: tuple = dataclasses.field(compare=False)
    scalars: tuple = dataclasses.field(compare=False)
    rows: dict = dataclasses.field(compare=False)          # input -> its row dim ("K", "V") or None
    declared: dict = dataclasses.field(compare=False)      # token input -> its declared dtype
    roles: dict = dataclasses.field(compare=False)         # core operand node -> role
    inputs: tuple = dataclasses.field(compare=False)       # token inputs then head parameters: the kernels' order
    key: str = dataclasses.field(compare=False)            # name|graph_sha: how the custom ops find it (SPECS)
    rank_kind: str = dataclasses.field(compare=False)      # how calls rank (families.rank_kind)
    uri_hash: bool = dataclasses.field(default=True, compare=False)   # the URIs end with the graph hash (Problem)
    token_checks: tuple = dataclasses.field(default=(), compare=False)  # kdagen.ops.validate.token_checks

    @staticmethod
    def of(recurrence, name: str | None = None, uri_hash: bool = True) -> "Spec":
        """Read once what every call needs from the graph — the per-call path (traced by torch.compile) never
        walks it — and register the Spec under its key (the custom ops find it there). A declared dtype no kernel
        reads is refused here, before a call's tensors are checked against it. `uri_hash=False`: the name
        determines the graph (the shipped ops' tags), so the URIs need not carry its hash."""
        r = recurrence.check()
        check_input_dtypes(r)
        nodes = r.graph.nodes
        inputs = (*r.token_inputs, *r.head_params)
        tag, sha = name or r.name, recurrence_facts(r)["graph_sha"]
        spec = Spec(r, tag, sha, r.core_operands()["value"], tuple(qk_inputs(r)), tuple(r.token_inputs),
                    tuple(r.head_params), tuple(r.scalars),
                    {n: (nodes[n]["shape"][0] if nodes[n]["shape"] else None) for n in inputs},
                    {n: nodes[n]["dtype"] for n in r.token_inputs},
                    {node: role for role, node in r.core_operands().items()}, inputs, f"{tag}|{sha}", rank_kind(r),
                    uri_hash)
        from .validate import token_checks
        return SPECS.setdefault(spec.key, dataclasses.replace(spec, token_checks=token_checks(spec)))


SPECS: dict[str, Spec] = {}      # Spec.key -> Spec, every one this process made


def constant_when_compiled(fn):
    """Mark fn as torch.compiler.assume_constant_result does: torch.compile calls it while tracing (with Python
    arguments only) and keeps its result as a constant, so the graph never holds the recurrence building it does.
    Set directly so that `import kdagen` does not import torch._dynamo (1.4 s); tests/test_library.py checks the
    mark is the one the public decorator sets."""
    fn._dynamo_marked_constant = True
    return fn


@constant_when_compiled
def fla_spec(op: str, use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool,
             allow_neg_eigval: bool, lower_bound, has_A_log: bool, has_dt_bias: bool) -> Spec:
    """The Spec of chunk_kda / chunk_gated_delta_rule with these options (plain values: see
    constant_when_compiled), once per process."""
    return _fla_spec(op, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                     lower_bound, has_A_log, has_dt_bias)


@functools.lru_cache(maxsize=64)
def _fla_spec(op, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
              lower_bound, has_A_log, has_dt_bias) -> Spec:
    from ..reference import Options
    opt = Options(op=op, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
                  use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                  lower_bound=lower_bound)
    return Spec.of(*options_recurrence(opt, has_A_log, has_dt_bias), uri_hash=False)


def options_spec(opt, has_A_log: bool = True, has_dt_bias: bool = True, gate_bound=None) -> Spec:
    """The Spec of chunk_kda / chunk_gated_delta_rule with these Options. The scale and the state layout are
    call-time values, not part of what the kernels compute. safe_gate's promise (a precomputed g in
    [gate_bound, 0)) becomes g's declared lower bound, which lets the planner prove the factored form."""
    lower_bound = opt.lower_bound if opt.use_gate_in_kernel or gate_bound is None else gate_bound
    return fla_spec(opt.op, opt.use_qk_l2norm_in_kernel, opt.use_gate_in_kernel, opt.use_beta_sigmoid_in_kernel,
                    opt.allow_neg_eigval, lower_bound, has_A_log, has_dt_bias)


def call_spec(call) -> Spec:
    """The Spec a chunk_kda / chunk_gated_delta_rule Call runs."""
    t = call.tensors
    return options_spec(call.opt, t.get("A_log") is not None, t.get("dt_bias") is not None, call.gate_bound)


def options_config(opt, K: int, V: int, arch: str, *, has_A_log: bool, has_dt_bias: bool, G: int = 1,
                   varlen: bool = False, g_dtype: str = "bf16", beta_dtype: str = "bf16") -> "Config":
    """The Config of a training call of chunk_kda / chunk_gated_delta_rule with these Options (tests, probes)."""
    spec = options_spec(opt, has_A_log, has_dt_bias)
    return Config(spec, K, V, arch, G, varlen, g_dtype, beta_dtype, "vk" if opt.state_v_first else "kv")


@dataclasses.dataclass(frozen=True)
class Config:
    """What the kernels are specialised on (a hashable key: one plan and one module per value)."""
    spec: Spec
    K: int
    V: int
    arch: str
    G: int
    varlen: bool
    g_dtype: str = "bf16"         # the dtypes of token inputs named g and beta (bf16 or f32, as passed)
    beta_dtype: str = "bf16"
    state_layout: str = "kv"      # "kv": [N,HV,K,V]; "vk": state_v_first
    directions: tuple = TRAINING  # what the call runs: the family must plan all of it
    family: str | None = None     # a requested family (KDAGEN_FAMILY), else the planner's choice
    ranking: str = "default"      # the call's class for ranking families (families.ranking)

    def problem(self) -> Problem:
        return Problem(self.spec.recurrence, self.spec.name, self.K, self.V,
                       dtypes=Dtypes(g=self.g_dtype, beta=self.beta_dtype), arch=self.arch, gva_ratio=self.G,
                       varlen=self.varlen, state_layout=self.state_layout, uri_hash=self.spec.uri_hash)

    def planned(self):
        """(verified plan, recurrence), once per process."""
        return _planned(self)

    def source(self, direction: str = "forward", entries: bool = False, kernel: str | None = None) -> str:
        """The rendered unit of a direction ("forward", "backward"), or its entries unit, or one kernel of the
        direction alone, once per process."""
        return _source(self, direction, entries, kernel)


@functools.lru_cache(maxsize=64)
def _planned(config: Config):
    problem = config.problem()
    return (verify(make_plan(problem, family=config.family, directions=config.directions, ranking=config.ranking)),
            problem.recurrence)


@functools.lru_cache(maxsize=64)
def _source(config: Config, direction: str, entries: bool, kernel: str | None = None) -> str:
    plan, recurrence = config.planned()
    return render_unit(plan, recurrence, direction, entries, kernel)


def config_for(spec: Spec, K: int, V: int, G: int, varlen: bool, dtypes: dict, arch: str, *,
               state_layout: str = "kv", directions: tuple = TRAINING, family: str | None = None,
               pairs: int | None = None, rank: str | None = None) -> Config:
    """The Config of a call; dtypes maps "g" and "beta" (where the recurrence has them) to torch dtypes; `pairs`
    the call's (sequence, value head) pairs where known."""
    names = {}
    for name in ("g", "beta"):
        dtype = dtypes.get(name)
        if dtype is not None and dtype not in _DTYPE:
            raise NotImplementedError(f"{name} of dtype {dtype}: kernels read bfloat16 or float32")
        names[name] = _DTYPE.get(dtype, "bf16")
    family = family or requested()
    # the class matters only where the planner ranks, i.e. no family is named (one plan, not two, otherwise)
    return Config(spec, K, V, arch, G, varlen, names["g"], names["beta"], state_layout, tuple(directions),
                  family, "default" if family is not None else rank or ranking(directions, pairs, K, spec.rank_kind))


# The directions whose kernels compile as one NVRTC program each, side by side, rather than as one unit: NVVM's
# optimizer runs over a whole unit in one thread (NVRTC's --split-compile parallelises only the code generation
# after it), so a unit takes about the sum of its kernels' optimisation and the largest one's code generation,
# where separate programs in parallel threads take about the largest kernel's whole compile. On the CPU
# (benchmarks/NOTES.md, session 22) the backward's chunk_bwd alone took 1.77 s against the unit's 2.50; the
# forward's prepare alone takes its unit's time, so the forward stays one unit.
PER_KERNEL = ("backward",)


def module_uri(plan: Plan, direction: str, entries: bool = False, kernel: str | None = None) -> str:
    return f"{plan.uri}_{direction}{'_entries' if entries else ''}{f'_{kernel}' if kernel else ''}"


def unit_kernels(plan: Plan, direction: str, entries: bool) -> list:
    """The kernels compiled as programs of their own for a direction's unit ([None]: the unit whole)."""
    if entries or direction not in PER_KERNEL:
        return [None]
    return [k.name for k in plan.direction(direction)]


def kernel_sources(config: Config) -> list[tuple[str, str]]:
    """(uri, CUDA source) of every module a call of this Config may load (`kdagen compile`): each direction's, its
    entries module where it has one (the cut forward's maps pass, the cut backward's C pass), and the cut's chain
    kernel for a configuration with K = V (kdagen.ops.segmented: a call may be cut)."""
    from . import segmented
    plan, _ = config.planned()
    found = [(module_uri(plan, d, e, k), config.source(d, e, k)) for d in config.directions if plan.direction(d)
             for e in (False, True) if not e or has_entries(plan, d) for k in unit_kernels(plan, d, e)]
    if config.K == config.V and config.K in segmented.CHAIN_DIMS:
        found.append((segmented.chain_uri(config.K), segmented.chain_source(config.K)))
    return found


def load(config: Config, device, direction: str, entries: bool = False):
    """The compiled module of a direction for this config (kdagen.runtime: memo, disk cache, NVRTC), or of its
    further entry points (`entries`: compiled on the first call that launches one). A training call's first
    forward starts its backward's compile too (`compile_backward_ahead`)."""
    from .. import runtime
    plan, _ = config.planned()
    if direction == "forward" and not entries and "backward" in config.directions:
        compile_backward_ahead(config, device)
    kernels = unit_kernels(plan, direction, entries)
    if kernels == [None]:
        return runtime.load_module(module_uri(plan, direction, entries), config.source(direction, entries),
                                   config.arch, device=device)
    return runtime.load_kernel_modules(tuple((k, module_uri(plan, direction, entries, k),
                                              config.source(direction, entries, k)) for k in kernels),
                                       config.arch, device=device)


_AHEAD: dict[tuple, object] = {}     # (Config, device) -> the background load of its backward (a Future)
AHEAD_EXIT_WAIT_S = 60.0             # the longest an ending process waits for those loads


@atexit.register
def _finish_ahead() -> None:
    """At exit, before the interpreter finalises: wait (bounded) for the backward compiles still running."""
    from concurrent.futures import wait
    wait(list(_AHEAD.values()), timeout=AHEAD_EXIT_WAIT_S)


def compile_backward_ahead(config: Config, device):
    """The Future of the backward's module of a training Config, loaded (rendered and, on a cache miss, compiled)
    in a background thread from the first forward on: NVRTC releases the GIL, so the two directions compile side
    by side and a training step's first call waits for the longer compile, not for both. Any error is the
    backward's own load's to report (it loads again: the memo, or the entry this thread wrote; with a cache it
    cannot write, it compiles once more). The thread is a daemon, but a process that ends while it compiles waits
    for that compile at exit (`_finish_ahead`, at most AHEAD_EXIT_WAIT_S): a thread still inside NVRTC when the
    interpreter finalises crashes the process (a segmentation fault at exit), and a compile that never ends must
    not keep it alive. Where no thread can start (the interpreter shutting down) the backward simply loads when
    it runs."""
    import threading
    from concurrent.futures import Future
    key = (config, device)
    if key not in _AHEAD:
        future = _AHEAD[key] = Future()

        def run():
            try:
                future.set_result(load(config, device, "backward"))
            except BaseException as e:      # noqa: BLE001 — reported by the backward's own load
                future.set_exception(e)
        try:
            threading.Thread(target=run, name="kdagen-backward-compile", daemon=True).start()
        except RuntimeError as e:
            future.set_exception(e)
    return _AHEAD[key]


def load_emulated(config: Config, device, direction: str, entries: bool = False):
    """The direction's kernels run on the CPU by kdagen.codegen.emulate (slow; a recurrence debugged without a
    GPU, and CI); one host unit holds every entry point, so `entries` asks for the same module."""
    from ..codegen import emulate
    return emulate.build(*config.planned(), direction)


def loader_for(emulated: bool):
    return load_emulated if emulated else load
