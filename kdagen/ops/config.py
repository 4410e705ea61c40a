"""What a call's kernels are specialised on (`Config`), its plan and rendered units (cached per process), and
the compiled modules (kdagen.runtime). Both directions and `kdagen compile` go through here.

A Config records whether the call needs a backward: the family is chosen for the directions a call runs
(an inference call may use a forward-only family), and KDAGEN_FAMILY, read when the Config is made.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from ..codegen import render_unit
from ..plan import Dtypes, Plan, make_plan, problem_from_options, verify
from ..plan.families import requested
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
class Config:
    """What the kernels are specialised on (a hashable key: one plan and one module per value)."""
    opt: object                   # kdagen.reference.Options (after plan_options)
    K: int
    V: int
    arch: str
    has_A_log: bool
    has_dt_bias: bool
    G: int
    varlen: bool
    g_dtype: str
    beta_dtype: str
    directions: tuple = TRAINING  # what the call runs: the family must plan all of it
    family: str | None = None     # a requested family (KDAGEN_FAMILY), else the planner's choice

    def problem(self):
        return problem_from_options(self.opt, K=self.K, V=self.V, arch=self.arch, has_A_log=self.has_A_log,
                                    has_dt_bias=self.has_dt_bias, gva_ratio=self.G, varlen=self.varlen,
                                    dtypes=Dtypes(g=self.g_dtype, beta=self.beta_dtype))

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


def config_for(call, K: int, V: int, G: int, varlen: bool, dtypes: dict, arch: str,
               directions: tuple = TRAINING) -> Config:
    """The Config of a call; dtypes maps "g" and "beta" to torch dtypes."""
    for name in ("g", "beta"):
        if dtypes[name] not in _DTYPE:
            raise NotImplementedError(f"{name} of dtype {dtypes[name]}: kernels read bfloat16 or float32")
    t = call.tensors
    return Config(plan_options(call), K, V, arch, t.get("A_log") is not None, t.get("dt_bias") is not None, G, varlen,
                  _DTYPE[dtypes["g"]], _DTYPE[dtypes["beta"]], tuple(directions), requested())


def module_uri(plan: Plan, direction: str) -> str:
    return f"{plan.uri}_{direction}"


def kernel_sources(call, dims, dtypes, arch: str | None = None, directions: tuple = TRAINING) -> list[tuple[str, str]]:
    """(uri, CUDA source) of every module a call with these sizes and dtypes loads (`kdagen compile`)."""
    config = config_for(call, dims.K, dims.V, dims.HV // dims.H, call.tensors.get("cu_seqlens") is not None,
                        dtypes, arch or default_arch(), directions)
    plan, _ = config.planned()
    return [(module_uri(plan, d), config.source(d)) for d in directions if plan.direction(d)]


def load(config: Config, device, direction: str):
    """The compiled module of a direction for this config (kdagen.runtime: memo, disk cache, NVRTC)."""
    from .. import runtime
    plan, _ = config.planned()
    return runtime.load_module(module_uri(plan, direction), config.source(direction), config.arch, device=device)
