"""Named configurations: the defaults `kdagen emit/plan` use and generated/ holds.

The default KDA is FlashKDA's setting (gate in kernel with lower_bound −5, L2 norm and β sigmoid in
kernel): its decay is proven in [−5, 0], so it plans the factored form. The default GDN uses the same
in-kernel maps with the softplus gate (unbounded decay: relative form). Both at K = V = 128.
"""
from __future__ import annotations

from ..reference.options import Options
from .problem import ARCHS, Dtypes, Problem

DEFAULT_OPTIONS = {
    "kda": dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                lower_bound=-5.0),
    "gdn": dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
}
DEFAULT_ARCHS = ("sm_90a", "sm_80")
DEFAULT_HEAD_DIM = 128


def options_tag(opt: Options) -> str:
    """A readable name for the recurrence an Options describes: kda_lb5_l2_bsig, gdn_sp_l2, kda_g ..."""
    parts = [opt.op]
    if opt.use_gate_in_kernel:
        parts.append("sp" if opt.lower_bound is None else f"lb{abs(opt.lower_bound):g}".replace(".", "p"))
    elif opt.lower_bound is not None:
        parts.append(f"glb{abs(opt.lower_bound):g}".replace(".", "p"))
    else:
        parts.append("g")
    if opt.use_qk_l2norm_in_kernel:
        parts.append("l2")
    if opt.use_beta_sigmoid_in_kernel:
        parts.append("bsig2" if opt.allow_neg_eigval else "bsig")
    return "_".join(parts)


def problem_from_options(opt: Options, *, K: int, V: int, arch: str, has_A_log: bool = True,
                         has_dt_bias: bool = True, gva_ratio: int = 1, varlen: bool = False,
                         dtypes: Dtypes = Dtypes()) -> Problem:
    from ..recurrences import from_options
    r = from_options(opt, has_A_log, has_dt_bias)
    name = options_tag(opt)
    if opt.use_gate_in_kernel and not (has_A_log and has_dt_bias):     # the gate without A_log or dt_bias
        name += "_noalog" * (not has_A_log) + "_nodtbias" * (not has_dt_bias)
    return Problem(r, name, K, V, dtypes=dtypes, arch=arch, gva_ratio=gva_ratio, varlen=varlen,
                   state_layout="vk" if opt.state_v_first else "kv")


def default_problem(op: str, *, head_dim: int = DEFAULT_HEAD_DIM, arch: str = "sm_90a", **kw) -> Problem:
    if op not in DEFAULT_OPTIONS:
        raise ValueError(f"op {op!r}: one of {sorted(DEFAULT_OPTIONS)}")
    return problem_from_options(Options(op=op, **DEFAULT_OPTIONS[op]), K=head_dim, V=head_dim, arch=arch, **kw)


def default_problems() -> list[Problem]:
    """The configurations checked in under generated/: KDA and GDN, K = V = 128, sm_90a and sm_80."""
    return [default_problem(op, arch=arch) for op in DEFAULT_OPTIONS for arch in DEFAULT_ARCHS]


def add_problem_arguments(p) -> None:
    """Command-line options naming a configuration (shared by `kdagen emit`, `plan`, `inspect`).

    Without option flags a configuration is the op's default (DEFAULT_OPTIONS); `--fla-defaults`
    starts from flash-linear-attention's defaults instead; each flag then overrides one option."""
    import argparse
    p.add_argument("--op", choices=sorted(DEFAULT_OPTIONS), default="kda", help="recurrence (default kda)")
    p.add_argument("--head-dim", type=int, default=DEFAULT_HEAD_DIM, help="K = V (64 or 128; default 128)")
    p.add_argument("--arch", choices=sorted(ARCHS), default="sm_90a", help="target (default sm_90a)")
    p.add_argument("--gva", type=int, default=1, help="value heads per q/k head (default 1)")
    p.add_argument("--varlen", action="store_true", help="packed sequences with cu_seqlens")
    p.add_argument("--g-dtype", choices=("bf16", "f32"), default="bf16", help="dtype of g (default bf16)")
    p.add_argument("--beta-dtype", choices=("bf16", "f32"), default="bf16", help="dtype of beta (default bf16)")
    p.add_argument("--state-v-first", action="store_true", help="states stored [V, K]")
    p.add_argument("--fla-defaults", action="store_true",
                   help="start from FLA's option defaults (no in-kernel gate, L2 norm or β sigmoid)")
    for flag, help_ in (("gate-in-kernel", "use_gate_in_kernel"), ("l2norm", "use_qk_l2norm_in_kernel"),
                        ("beta-sigmoid", "use_beta_sigmoid_in_kernel"), ("allow-neg-eigval", "allow_neg_eigval")):
        p.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=None, help=help_)
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--lower-bound", type=float, default=None, help="KDA's lower_bound (sigmoid gate form)")
    bound.add_argument("--no-lower-bound", action="store_true", help="drop the default lower_bound (softplus gate)")


def problem_args_given(args) -> list[str]:
    """The configuration options of add_problem_arguments that args sets away from their defaults."""
    import argparse
    probe = argparse.ArgumentParser()
    add_problem_arguments(probe)
    return sorted(k for k, v in vars(probe.parse_args([])).items() if getattr(args, k) != v)


def problem_from_args(args) -> Problem:
    """The Problem the options of add_problem_arguments name."""
    base = {} if args.fla_defaults else dict(DEFAULT_OPTIONS[args.op])
    for name, attr in (("gate_in_kernel", "use_gate_in_kernel"), ("l2norm", "use_qk_l2norm_in_kernel"),
                       ("beta_sigmoid", "use_beta_sigmoid_in_kernel"), ("allow_neg_eigval", "allow_neg_eigval")):
        if getattr(args, name) is not None:
            base[attr] = getattr(args, name)
    if args.no_lower_bound:
        base.pop("lower_bound", None)
    if args.lower_bound is not None:
        base["lower_bound"] = args.lower_bound
    opt = Options(op=args.op, state_v_first=args.state_v_first, **base)
    return problem_from_options(opt, K=args.head_dim, V=args.head_dim, arch=args.arch, gva_ratio=args.gva,
                                varlen=args.varlen, dtypes=Dtypes(g=args.g_dtype, beta=args.beta_dtype))
