"""Named configurations: the defaults `kdagen emit/plan` use and generated/ holds.

The default KDA is FlashKDA's setting (gate in kernel with lower_bound −5, L2 norm and β sigmoid in
kernel): its decay is proven in [−5, 0], so it plans the factored form. The default GDN uses the same
in-kernel maps with the softplus gate (unbounded decay: relative form). Both at K = V = 128.
"""
from __future__ import annotations

from ..reference.options import Options
from .problem import Dtypes, Problem

DEFAULT_OPTIONS = {
    "kda": dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                lower_bound=-5.0),
    "gdn": dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
}
DEFAULT_ARCHS = ("sm_90a", "sm_80")
DEFAULT_HEAD_DIM = 128


def _bound_tag(x: float) -> str:
    """A lower bound in letters and digits, exactly (repr round-trips), so that distinct bounds name distinct
    configurations: -5 → "5", -0.25 → "0p25", -1e-05 → "1em05"; a bound ≥ 0 starts "pos"."""
    text = repr(abs(float(x))).removesuffix(".0").replace(".", "p").replace("e-", "em").replace("e+", "e")
    return text if x < 0 else f"pos{text}"


def options_tag(opt: Options) -> str:
    """A readable name for the recurrence an Options describes: kda_lb5_l2_bsig, gdn_sp_l2, kda_g ..."""
    parts = [opt.op]
    if opt.use_gate_in_kernel:
        parts.append("sp" if opt.lower_bound is None else f"lb{_bound_tag(opt.lower_bound)}")
    elif opt.lower_bound is not None:
        parts.append(f"glb{_bound_tag(opt.lower_bound)}")
    else:
        parts.append("g")
    if opt.use_qk_l2norm_in_kernel:
        parts.append("l2")
    if opt.use_beta_sigmoid_in_kernel:
        parts.append("bsig2" if opt.allow_neg_eigval else "bsig")
    return "_".join(parts)


def options_recurrence(opt: Options, has_A_log: bool = True, has_dt_bias: bool = True) -> tuple:
    """(recurrence, name) of the call an Options describes: the DSL recurrence and the tag its URIs start with."""
    from ..recurrences import from_options
    name = options_tag(opt)
    if opt.use_gate_in_kernel and not (has_A_log and has_dt_bias):     # the gate without A_log or dt_bias
        name += "_noalog" * (not has_A_log) + "_nodtbias" * (not has_dt_bias)
    return from_options(opt, has_A_log, has_dt_bias), name


def problem_from_options(opt: Options, *, K: int, V: int, arch: str, has_A_log: bool = True,
                         has_dt_bias: bool = True, gva_ratio: int = 1, varlen: bool = False,
                         dtypes: Dtypes = Dtypes()) -> Problem:
    r, name = options_recurrence(opt, has_A_log, has_dt_bias)
    return Problem(r, name, K, V, dtypes=dtypes, arch=arch, gva_ratio=gva_ratio, varlen=varlen,
                   state_layout="vk" if opt.state_v_first else "kv")


def default_problem(op: str, *, head_dim: int = DEFAULT_HEAD_DIM, arch: str = "sm_90a", **kw) -> Problem:
    if op not in DEFAULT_OPTIONS:
        raise ValueError(f"op {op!r}: one of {sorted(DEFAULT_OPTIONS)}")
    return problem_from_options(Options(op=op, **DEFAULT_OPTIONS[op]), K=head_dim, V=head_dim, arch=arch, **kw)


def default_problems() -> list[Problem]:
    """The configurations checked in under generated/: KDA and GDN, K = V = 128, sm_90a and sm_80."""
    return [default_problem(op, arch=arch) for op in DEFAULT_OPTIONS for arch in DEFAULT_ARCHS]


def default_plans() -> list:
    """(verified plan, recurrence) of every default problem by every family that supports it (training
    calls, and inference calls where another family serves those): what generated/ holds."""
    from .families import verdicts
    from .planner import make_plan
    from .verify import verify
    out, seen = [], set()
    for problem in default_problems():
        for directions in (("forward", "backward"), ("forward",)):
            for f, ok, _ in verdicts(problem, directions):
                if ok and (problem.uri(f.name)) not in seen:
                    seen.add(problem.uri(f.name))
                    out.append((verify(make_plan(problem, family=f.name, directions=directions)), problem.recurrence))
    return out
