"""What a call's kernels compute (`Spec`: a DSL recurrence) and are specialised on (`Config`), its plan and
rendered units (cached per process), and the compiled modules (kdagen.runtime). Every op — chunk_kda,
chunk_gated_delta_rule and a user's recurrence — and `kdagen compile` go through here.

A Config records whether the call needs a backward: the family is chosen for the directions a call runs
(an inference call may use a forward-only family), and KDAGEN_FAMILY, read when the Config is made.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from ..codegen import render_unit
from ..plan import Dtypes, Plan, Problem, make_plan, verify
from ..plan.configs import options_recurrence
from ..plan.families import requested
from ..plan.problem import qk_inputs, recurrence_facts
from ..runtime import env as runtime_env

_DTYPE = {torch.bfloat16: "bf16", torch.float32: "f32"}
TRAINING = ("forward", "backward")
INFERENCE = ("forward",)


def plan_options(call):
    """The Options the recurrence is built from: safe_gate's promise (g in [gate_bound, 0)) becomes the
    precomputed gate's declared lower bound, which lets the planner prove the factored form. The scale is a
    run-time argument of the kernels, not something they are specialised on: one plan serves every scale."""
    opt = dataclasses.replace(call.opt, scale=None)
    bound = getattr(call, "gate_bound", None)
    if bound is not None and not opt.use_gate_in_kernel:
        opt = dataclasses.replace(opt, lower_bound=bound)
    return opt


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

    @staticmethod
    def of(recurrence, name: str | None = None) -> "Spec":
        """Read once what every call needs from the graph (the per-call path never walks it)."""
        recurrence.check()
        return Spec(recurrence, name or recurrence.name, recurrence_facts(recurrence)["graph_sha"],
                    recurrence.core_operands()["value"], tuple(qk_inputs(recurrence)))


@functools.lru_cache(maxsize=64)
def options_spec(opt, has_A_log: bool = True, has_dt_bias: bool = True) -> Spec:
    """The Spec of chunk_kda / chunk_gated_delta_rule with these Options (after plan_options), once per process."""
    return Spec.of(*options_recurrence(opt, has_A_log, has_dt_bias))


def call_spec(call) -> Spec:
    """The Spec a chunk_kda / chunk_gated_delta_rule Call runs."""
    t = call.tensors
    return options_spec(plan_options(call), t.get("A_log") is not None, t.get("dt_bias") is not None)


def options_config(opt, K: int, V: int, arch: str, *, has_A_log: bool, has_dt_bias: bool, G: int = 1,
                   varlen: bool = False, g_dtype: str = "bf16", beta_dtype: str = "bf16") -> "Config":
    """The Config of a training call of chunk_kda / chunk_gated_delta_rule with these Options (tests, probes)."""
    spec = options_spec(dataclasses.replace(opt, scale=None), has_A_log, has_dt_bias)
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

    def problem(self) -> Problem:
        return Problem(self.spec.recurrence, self.spec.name, self.K, self.V,
                       dtypes=Dtypes(g=self.g_dtype, beta=self.beta_dtype), arch=self.arch, gva_ratio=self.G,
                       varlen=self.varlen, state_layout=self.state_layout)

    def planned(self):
        """(verified plan, recurrence), once per process."""
        return _planned(self)

    def source(self, direction: str = "forward") -> str:
        """The rendered unit of a direction ("forward", "backward"), once per process."""
        return _source(self, direction)


@functools.lru_cache(maxsize=64)
def _planned(config: Config):
    problem = config.problem()
    return verify(make_plan(problem, family=config.family, directions=config.directions)), problem.recurrence


@functools.lru_cache(maxsize=64)
def _source(config: Config, direction: str) -> str:
    plan, recurrence = config.planned()
    return render_unit(plan, recurrence, direction)


def config_for(spec: Spec, K: int, V: int, G: int, varlen: bool, dtypes: dict, arch: str, *,
               state_layout: str = "kv", directions: tuple = TRAINING, family: str | None = None) -> Config:
    """The Config of a call; dtypes maps "g" and "beta" (where the recurrence has them) to torch dtypes."""
    names = {}
    for name in ("g", "beta"):
        dtype = dtypes.get(name)
        if dtype is not None and dtype not in _DTYPE:
            raise NotImplementedError(f"{name} of dtype {dtype}: kernels read bfloat16 or float32")
        names[name] = _DTYPE.get(dtype, "bf16")
    return Config(spec, K, V, arch, G, varlen, names["g"], names["beta"], state_layout, tuple(directions),
                  family or requested())


def module_uri(plan: Plan, direction: str) -> str:
    return f"{plan.uri}_{direction}"


def kernel_sources(config: Config) -> list[tuple[str, str]]:
    """(uri, CUDA source) of every module a call of this Config loads (`kdagen compile`)."""
    plan, _ = config.planned()
    return [(module_uri(plan, d), config.source(d)) for d in config.directions if plan.direction(d)]


def load(config: Config, device, direction: str):
    """The compiled module of a direction for this config (kdagen.runtime: memo, disk cache, NVRTC)."""
    from .. import runtime
    plan, _ = config.planned()
    return runtime.load_module(module_uri(plan, direction), config.source(direction), config.arch, device=device)


def load_emulated(config: Config, device, direction: str):
    """The direction's kernels run on the CPU by kdagen.codegen.emulate (slow; a recurrence debugged without a
    GPU, and CI)."""
    from ..codegen import emulate
    return emulate.build(*config.planned(), direction)


def loader_for(emulated: bool):
    return load_emulated if emulated else load
