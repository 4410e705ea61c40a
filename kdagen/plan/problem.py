"""What to plan for: `Problem` (a recurrence plus head dims, dtypes, arch) and the facts it implies.

The recurrence is a `kdagen.dsl.Recurrence`; the planner reads off it whether the decay is per channel
or per head, the decay's proven interval and a hash of its graph (`recurrence_facts`), and which heads
each token input lives on (`head_space`). Chunk sizes and supported head dims belong to the kernel
families (kdagen.plan.families), not to the problem.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import networkx as nx

LOG2E = 1.4426950408889634
EXP2_RANGE = 126          # 2^±126: the normal fp32 / bf16 exponent range the factored form must stay in


class PlanError(ValueError):
    """A problem that cannot be planned, or a plan that fails `verify` (the message names the part)."""


@dataclass(frozen=True)
class ArchSpec:
    """Per-arch limits the planner and `verify` respect."""
    name: str
    smem_per_block: int       # opt-in maximum dynamic shared memory per block (bytes)
    static_smem: int = 48 * 1024
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    max_threads: int = 1024
    setmaxnreg: bool = False
    tma: bool = False                          # bulk tensor copies (cp.async.bulk.tensor) and tx-count mbarriers


ARCHS = {
    "sm_90a": ArchSpec("sm_90a", smem_per_block=227 * 1024, setmaxnreg=True, tma=True),
    "sm_80": ArchSpec("sm_80", smem_per_block=163 * 1024),
}


@dataclass(frozen=True)
class Dtypes:
    """Element types: io for q, k, v, o (and their gradients); g and beta as passed; state fp32."""
    io: str = "bf16"
    g: str = "bf16"
    beta: str = "bf16"
    state: str = "f32"

    def tag(self) -> str:
        return f"{self.io}_g{self.g}_b{self.beta}"


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


@dataclass(frozen=True)
class Problem:
    """One configuration to plan. `name` is a readable tag for the recurrence and its options
    (e.g. "kda_lb5_l2_bsig"); it starts the configuration's URI. `uri_hash`: the name alone does not determine
    the recurrence (a user's function, whose options or file may change it), so the URI ends with the graph
    hash; the shipped ops' names spell out every option and leave it off."""
    recurrence: object = field(compare=False, repr=False)
    name: str
    K: int
    V: int
    dtypes: Dtypes = Dtypes()
    arch: str = "sm_90a"
    gva_ratio: int = 1
    varlen: bool = False
    state_layout: str = "kv"               # "kv": [N,HV,K,V] (FLA default); "vk": state_v_first
    uri_hash: bool = False

    def __post_init__(self):
        from ..dsl import Recurrence
        checks = [
            (isinstance(self.recurrence, Recurrence), f"recurrence must be a kdagen.dsl.Recurrence (build a function "
                                                      f"with kdagen.dsl.build), got {type(self.recurrence).__name__}"),
            (_positive_int(self.K), f"K={self.K!r}: a positive head dim"),
            (_positive_int(self.V), f"V={self.V!r}: a positive head dim"),
            (self.K == self.V, f"K={self.K}, V={self.V}: the kernels need V == K"),
            (self.arch in ARCHS, f"arch={self.arch!r}: known archs are {sorted(ARCHS)}"),
            (_positive_int(self.gva_ratio), f"gva_ratio={self.gva_ratio!r}: an int >= 1"),
            (isinstance(self.varlen, bool), f"varlen={self.varlen!r}: a bool"),
            (self.state_layout in ("kv", "vk"), f"state_layout={self.state_layout!r}: 'kv' or 'vk'"),
            (self.dtypes.io == "bf16", f"dtypes.io={self.dtypes.io!r}: only bf16 kernels are planned"),
            (self.dtypes.g in ("bf16", "f32"), f"dtypes.g={self.dtypes.g!r}: bf16 or f32"),
            (self.dtypes.beta in ("bf16", "f32"), f"dtypes.beta={self.dtypes.beta!r}: bf16 or f32"),
            (self.dtypes.state == "f32", f"dtypes.state={self.dtypes.state!r}: states are fp32"),
            (isinstance(self.name, str) and self.name.isascii() and self.name.replace("_", "").isalnum(),
             f"name={self.name!r}: ASCII letters, digits and '_' only"),
        ]
        for ok, msg in checks:
            if not ok:
                raise PlanError(f"Problem: {msg}")
        check_input_dtypes(self.recurrence.check())    # check(): a graph edited since it was built is checked again

    @property
    def arch_spec(self) -> ArchSpec:
        return ARCHS[self.arch]

    def uri(self, family: str) -> str:
        """The readable identity of the configuration planned by a family (directory name under generated/)."""
        parts = [self.name, f"k{self.K}v{self.V}", self.dtypes.tag(), f"gva{self.gva_ratio}"]
        if self.varlen:
            parts.append("varlen")
        if self.state_layout == "vk":
            parts.append("vfirst")
        parts += [family, self.arch.replace("_", "")]
        if self.uri_hash:
            parts.append(recurrence_facts(self.recurrence)["graph_sha"][:8])
        return "_".join(parts)

    def describe(self) -> dict:
        facts = recurrence_facts(self.recurrence)
        return {"name": self.name, "K": self.K, "V": self.V,
                "dtypes": {"io": self.dtypes.io, "g": self.dtypes.g, "beta": self.dtypes.beta,
                           "state": self.dtypes.state},
                "arch": self.arch, "gva_ratio": self.gva_ratio, "varlen": self.varlen,
                "state_layout": self.state_layout, "value_input": self.recurrence.core_operands()["value"],
                "qk_inputs": qk_inputs(self.recurrence),
                "recurrence": facts}


KERNEL_DTYPES = ("bf16", "f32")     # what the kernels read a token input as


def check_input_dtypes(r) -> None:
    """Refuse a declared dtype no kernel reads (token inputs bf16 or f32, head parameters f32): a tensor of that
    dtype read through a pointer of another type would be garbage, and the declaration would be silently
    overridden otherwise (q/k/v, g and beta are read as the call passes them)."""
    for n in r.token_inputs:
        dtype = r.graph.nodes[n]["dtype"]
        if dtype not in KERNEL_DTYPES:
            raise PlanError(f"token input {n!r}: declared dtype {dtype!r}; the kernels read token inputs in bf16 or "
                            "f32")
    for n in r.head_params:
        dtype = r.graph.nodes[n]["dtype"]
        if dtype != "f32":
            raise PlanError(f"head parameter {n!r}: declared dtype {dtype!r}; the kernels read head parameters in "
                            "f32")


def recurrence_facts(r) -> dict:
    """decay kind, decay interval and graph hash of a DSL recurrence (the planner's only inputs from it)."""
    lo, hi = r.decay_interval()
    return {"decay_kind": r.decay_kind, "decay_interval": [float(lo), float(hi)],
            "graph_sha": hashlib.sha256(r.to_json().encode()).hexdigest()[:16]}


def exponent_form(decay_kind: str, interval, chunk: int) -> str:
    """"factored" when the per-channel decay is proven in [lb, 0] with C·|lb|·log2(e) < 126, so
    k⊙2^(−Γ₂) is representable and the C×C products run on tensor cores; "relative" otherwise
    (per-pair e^(Γi−Γj), never overflowing for non-positive decays). A per-head decay always uses the
    relative form: its C×C scalar factors are cheap."""
    lo, hi = interval
    if decay_kind == "scalar":
        return "relative"
    if hi <= 0 and math.isfinite(lo) and chunk * abs(lo) * LOG2E < EXP2_RANGE:
        return "factored"
    return "relative"


QK_ROLES = ("query", "key")


def qk_inputs(r) -> list[str]:
    """The token inputs that live on the q/k heads, in declaration order."""
    return [n for n in r.token_inputs if head_space(r, n) == "H"]


def head_space(r, name: str) -> str:
    """"H" for a token input that only feeds query/key (it lives on the q/k heads), "HV" for everything
    else (the value heads)."""
    if r.graph.nodes[name]["op"] != "token_input":
        return "HV"
    reach = {role for role, node in r.core_operands().items() if node == name or nx.has_path(r.graph, name, node)}
    if reach and reach <= set(QK_ROLES):
        return "H"
    if reach & set(QK_ROLES):
        raise PlanError(f"node {name!r}: a token input feeding both query/key (on the q/k heads) and "
                        f"{sorted(reach - set(QK_ROLES))} (on the value heads)")
    return "HV"
