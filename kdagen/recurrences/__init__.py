"""The shipped recurrences, written in kdagen.dsl: KDA (per-channel decay) and GDN (per-head decay)."""
from kdagen.reference.options import Options

from . import gdn, kda

BUILDERS = {"kda": kda, "gdn": gdn}


def from_options(opt: Options, has_A_log: bool = True, has_dt_bias: bool = True):
    """The recurrence a chunk_kda / chunk_gated_delta_rule call with these options computes."""
    return BUILDERS[opt.op].from_options(opt, has_A_log, has_dt_bias)


__all__ = ["BUILDERS", "from_options", "gdn", "kda"]
