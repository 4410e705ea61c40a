"""A configuration written as command-line arguments: the one set of flags `kdagen emit`, `plan`, `inspect`
and `compile` share, and the text form KDAGEN_PRECOMPILE uses.

The flags are flash-linear-attention's option names with FLA's defaults, so the same words always name the
same kernels: `--op kda --use-gate-in-kernel --lower-bound -5` plans exactly what
`chunk_kda(..., use_gate_in_kernel=True, lower_bound=-5)` runs. They become a Call through the public ops'
own rules (kdagen.ops.api.make_call, with meta tensors standing in for the optional inputs), then the
Config every call of that kind uses. `--recurrence FILE.py:FN` (with `--option name=value`) names a user's
recurrence instead: the Config a `kdagen.compile(...)` op of it uses.
"""
from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

DTYPES = {"bf16": "bfloat16", "f32": "float32"}
FLAGS = ("use-qk-l2norm-in-kernel", "use-gate-in-kernel", "use-beta-sigmoid-in-kernel", "allow-neg-eigval",
         "state-v-first", "safe-gate")


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that make up a configuration."""
    p.add_argument("--op", choices=("kda", "gdn"), default=None, help="chunk_kda or chunk_gated_delta_rule (default kda)")
    p.add_argument("--recurrence", metavar="FILE.py:FN|MODULE:FN", default=None,
                   help="a recurrence of your own instead of --op: a function fn(r, **options) writing it into a "
                        "kdagen.dsl.Recurrence, or a Recurrence object (docs/recurrences.md)")
    p.add_argument("--option", action="append", metavar="NAME=VALUE", default=[],
                   help="a keyword argument for the --recurrence function (a Python literal; repeat for more)")
    p.add_argument("--head-dim", type=int, default=128, help="K = V (default 128)")
    p.add_argument("--gva", type=int, default=1, help="value heads per q/k head, HV / H (default 1)")
    p.add_argument("--varlen", action="store_true", help="variable-length batch (cu_seqlens)")
    p.add_argument("--g-dtype", choices=sorted(DTYPES), default="bf16", help="dtype of g (default bf16)")
    p.add_argument("--beta-dtype", choices=sorted(DTYPES), default="bf16", help="dtype of beta (default bf16)")
    for flag in FLAGS:
        p.add_argument(f"--{flag}", action="store_true", help=f"the option {flag.replace('-', '_')}")
    p.add_argument("--lower-bound", type=float, default=None, help="KDA's lower_bound (sigmoid gate form)")
    p.add_argument("--no-A-log", action="store_true", help="in-kernel gate without A_log (KDA with --lower-bound)")
    p.add_argument("--no-dt-bias", action="store_true", help="in-kernel gate without dt_bias")
    p.add_argument("--arch", default=None, help="sm_90a or sm_80 (default: KDAGEN_ARCH, else the GPU's, else sm_90a)")
    p.add_argument("--family", default=None,
                   help="the kernel family (default: KDAGEN_FAMILY, else the best one that supports the configuration)")
    p.add_argument("--inference", action="store_true",
                   help="the kernels of a call without gradients (a forward-only family may serve it)")
    p.add_argument("--pairs", type=int, default=None, metavar="N",
                   help="the call's (sequence, value head) pairs, B·HV: families are ranked as a call of that shape "
                        "ranks them. With --inference: wgmma64 first at head dim 128 (any N, or none given; N ≤ 64 "
                        "for a per-head decay whose query or key is not a bf16 input or its l2norm), otherwise with "
                        "N ≤ 16; without it, a "
                        "training call: wgmma64 first with any N at head dim 128, N ≥ 16 otherwise (default: "
                        "unknown)")


@dataclass(frozen=True)
class CallConfig:
    """A parsed configuration: the recurrence (Spec), its sizes (B, T, N are placeholders: kernels are not
    specialised on them), the dtypes of g and beta, varlen and the state layout, the directions the call runs,
    arch and family."""
    spec: object
    dims: object
    dtypes: dict
    varlen: bool
    state_layout: str
    directions: tuple
    arch: str | None
    family: str | None
    pairs: int | None = None

    def config(self):
        """The ops.config.Config every call of this kind uses (arch resolved, family validated)."""
        from ..plan.families import family
        from .config import config_for, default_arch
        return config_for(self.spec, self.dims.K, self.dims.V, self.dims.G, self.varlen, self.dtypes,
                          self.resolved_arch() or default_arch(), state_layout=self.state_layout,
                          directions=self.directions, family=family(self.family).name if self.family else None,
                          pairs=self.pairs)

    def resolved_arch(self) -> str | None:
        from ..runtime import normalize_arch
        return normalize_arch(self.arch, "--arch") if self.arch else None


def _option_value(text: str):
    """A --option value: a Python literal (numbers, True, None, strings in quotes), else the text itself."""
    import ast
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def recurrence_options(pairs) -> dict:
    out = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--option {pair!r}: write name=value, name an identifier")
        if name in out:
            raise ValueError(f"--option {name} is given twice")
        out[name] = _option_value(value)
    return out


def _fla_call(args, op: str, HV: int, K: int):
    """The chunk_kda / chunk_gated_delta_rule Call the FLA flags describe (meta tensors for the optional inputs)."""
    import torch

    from .api import make_call
    meta = {"device": "meta", "dtype": torch.float32}
    options = {"output_final_state": True, "initial_state": torch.empty(1, HV, K, K, **meta),
               "state_v_first": args.state_v_first, "use_qk_l2norm_in_kernel": args.use_qk_l2norm_in_kernel,
               "use_beta_sigmoid_in_kernel": args.use_beta_sigmoid_in_kernel,
               "allow_neg_eigval": args.allow_neg_eigval, "use_gate_in_kernel": args.use_gate_in_kernel}
    if args.lower_bound is not None:
        options["lower_bound"] = args.lower_bound
    if args.safe_gate:
        options["safe_gate"] = True
    ignored = [f for f, on in (("--no-A-log", args.no_A_log), ("--no-dt-bias", args.no_dt_bias)) if on]
    if ignored and not args.use_gate_in_kernel:
        raise ValueError(f"{', '.join(ignored)} acts only with --use-gate-in-kernel; it would be ignored here")
    if args.use_gate_in_kernel:
        if not args.no_A_log:
            options["A_log"] = torch.empty(HV, **meta)
        if not args.no_dt_bias:
            options["dt_bias"] = torch.empty(HV * K if op == "kda" else HV, **meta)
    if args.varlen:
        options["cu_seqlens"] = torch.empty(2, device="meta", dtype=torch.int64)
    return make_call(op, **options)


FLA_ONLY = ("use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
            "safe_gate", "lower_bound", "no_A_log", "no_dt_bias")


def config_from_args(args) -> CallConfig:
    """The configuration the flags name; a flag combination that names none raises UsageError (exit code 2)."""
    from ..commands import UsageError
    from ..plan import PlanError
    from ..runtime import UnsupportedArchError
    try:
        config = _config_from_args(args)
        config.config()              # the arch, the family and KDAGEN_FAMILY resolve (nothing is planned yet)
        return config
    except (NotImplementedError, PlanError, TypeError, UnsupportedArchError, ValueError) as e:
        raise UsageError(str(e)) from e


def _config_from_args(args) -> CallConfig:
    import torch

    from .config import INFERENCE, TRAINING, Spec, call_spec
    from .validate import Dims
    K, G, H = args.head_dim, args.gva, 1
    HV = H * G
    if args.recurrence:
        given = [f"--{n.replace('_', '-')}" for n in FLA_ONLY if getattr(args, n) not in (False, None)]
        if given or args.op:
            raise ValueError(f"{', '.join(given or ['--op'])}: FLA's options describe chunk_kda / "
                             "chunk_gated_delta_rule, not --recurrence (pass its own with --option name=value)")
        from ..recurrences.loading import load_recurrence
        spec = Spec.of(load_recurrence(args.recurrence, recurrence_options(args.option)))
    else:
        if args.option:
            raise ValueError("--option passes options to a --recurrence; FLA's options have their own flags")
        spec = call_spec(_fla_call(args, args.op or "kda", HV, K))
    dtypes = {"g": getattr(torch, DTYPES[args.g_dtype]), "beta": getattr(torch, DTYPES[args.beta_dtype])}
    return CallConfig(spec, Dims(B=1, T=0, H=H, HV=HV, K=K, V=K, N=1), dtypes, args.varlen,
                      "vk" if args.state_v_first else "kv", INFERENCE if args.inference else TRAINING, args.arch,
                      args.family, _pairs(args.pairs))


def _pairs(pairs: int | None) -> int | None:
    if pairs is not None and pairs < 1:
        raise ValueError(f"--pairs {pairs}: a call has at least one (sequence, value head) pair")
    return pairs


class _RaisingParser(argparse.ArgumentParser):
    """Reports a bad configuration as a ValueError (argparse would print usage and exit)."""

    def error(self, message):
        raise ValueError(message)


def parse_config(text: str) -> CallConfig:
    """One configuration written as arguments, e.g. "--op kda --head-dim 128"."""
    p = _RaisingParser(prog="configuration", add_help=False, exit_on_error=False)
    add_config_arguments(p)
    try:
        return config_from_args(p.parse_args(shlex.split(text)))
    except (argparse.ArgumentError, TypeError, ValueError) as e:
        raise ValueError(f"configuration {text!r}: {e}") from None
