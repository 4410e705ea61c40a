"""The calls kdagen's flash-linear-attention backend (kdagen.integrations.fla) receives: what it converts, what it
accepts and why not, and how it runs them. Plain functions of FLA's arguments; nothing here imports FLA.

Converted first, at no measurable cost, what FLA's layers pass and kdagen's ops would refuse: non-contiguous views
become contiguous, and A_log / dt_bias in a low precision (after `model.to(torch.bfloat16)`) become fp32; both
conversions are differentiable, so gradients reach the caller's tensors.
"""
from __future__ import annotations

import inspect

import torch

ENV = "FLA_KDAGEN"                  # FLA's convention: FLA_<BACKEND_TYPE>
BACKEND_TYPE = "kdagen"
PRIORITY = 1                        # FLA runs the lowest first; FLA_KDAGEN=1 means "use kdagen where it can"
PARAMS = ("A_log", "dt_bias")       # fp32 head parameters
FUNCTIONS = {"kda": "chunk_kda", "gdn": "chunk_gated_delta_rule"}
QKVGB = ("q", "k", "v", "g", "beta")


def _kdagen_function(op: str):
    from .. import ops
    return getattr(ops, FUNCTIONS[op])


def adapt(op: str, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name, with the conversions described above applied."""
    bound = inspect.signature(_kdagen_function(op)).bind(*args, **kwargs)
    named = dict(bound.arguments)
    extra = named.pop("kwargs", {})
    for name, value in list(named.items()) + list(extra.items()):
        if not isinstance(value, torch.Tensor) or name in ("cu_seqlens_cpu", "chunk_indices"):
            continue
        if name in PARAMS and value.is_floating_point() and value.dtype != torch.float32:
            value = value.float()
        if not value.is_contiguous():
            value = value.contiguous()
        (extra if name in extra else named)[name] = value
    return {**named, **extra}


def verdict(op: str, args: tuple, kwargs: dict, device_type: str = "cuda") -> tuple[bool, str | None]:
    """(True, None) when kdagen serves this call, else (False, why): kdagen's own option resolution and input
    checks, run on the adapted arguments without launching anything; device_type "cpu" checks them as the CPU
    emulation would take them (tests)."""
    from ..ops import context_parallel
    from ..ops.api import call_params, resolve, run_arguments
    from ..ops.run import checked
    from ..plan import PlanError
    try:
        named = adapt(op, args, kwargs)
        params = call_params(op, **{n: v for n, v in named.items() if n not in QKVGB})
        if params.get("cp_context") is not None:        # this rank's shard: the context's own checks
            context_parallel.check(params["cp_context"], params, named["q"], named["v"])
        call = resolve(op, params)
        spec, tensors, scalars, options = run_arguments(call, {n: named[n] for n in QKVGB})
        checked(spec, tensors, scalars, **options, emulate=device_type == "cpu")
    except (NotImplementedError, PlanError, TypeError, ValueError) as e:
        return False, f"kdagen: {e}"
    return True, None


def run(op: str, args: tuple, kwargs: dict):
    """The call on kdagen's kernels."""
    return _kdagen_function(op)(**adapt(op, args, kwargs))
