"""The plan vocabulary: plain dataclasses that say, for each kernel, who does what with which memory.

A `Plan` is data only (JSON round-trip through `to_json` / `from_json`); the planner fills it in,
`verify` checks it, the templates read it. Thread ranges are in warps; every count is explicit so a
reader (or a tuner) never has to re-derive it from template code.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field

PLAN_VERSION = 2     # 2: problem.qk_inputs (the token inputs on the q/k heads)

WARP = 32

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i64": 8, "u64": 8}
CTYPES = {"bf16": "bf16", "f16": "__half", "f32": "float", "i32": "int", "i64": "long long", "u64": "u64"}


def _named(items, name: str, missing: str):
    """The item of that name; a KeyError that says whose list lacked it."""
    for item in items:
        if item.name == name:
            return item
    raise KeyError(f"{missing} {name!r}")


@dataclass
class Role:
    """A set of warps that runs one part of the kernel. `regs` is the per-thread register budget:
    the setmaxnreg value when `setmaxnreg` is true (sm_90a warp groups), else the launch-bound cap
    the role is planned to fit in."""
    name: str
    warps: tuple[int, int]                 # [first, last) warp index
    work: list[str] = field(default_factory=list)
    regs: int | None = None
    setmaxnreg: bool = False

    @property
    def threads(self) -> int:
        return (self.warps[1] - self.warps[0]) * WARP


@dataclass
class Barrier:
    """A synchronisation object. kind: "mbarrier" (shared-memory, phase parity), "named" (bar.sync id),
    "cta" (__syncthreads). `arrivals` lists (role, unit) with unit "thread" | "warp" | "elected";
    `count` must equal what those arrivals add up to. `stages` > 1 makes an array (one per pipeline
    stage); each completes `phases_per_iter` times per loop iteration."""
    name: str
    kind: str
    count: int
    arrivals: list[tuple[str, str]]
    waiters: list[str]
    stages: int = 1
    phases_per_iter: int = 1
    id: int | None = None                   # hardware id for "named"
    offset: int = -1                        # byte offset of the mbarrier words (planner)
    note: str = ""


@dataclass
class Pipeline:
    """A ring of `stages` buffers filled by `producer` and drained by `consumers`, guarded by a
    ready/free barrier pair (both with `stages` entries)."""
    name: str
    stages: int
    producer: str
    consumers: list[str]
    ready: str
    free: str
    buffers: list[str]
    copy: str = "cp.async"


@dataclass
class Buffer:
    """A shared-memory buffer. `shape` is logical, `ld` the padded row length in elements (the last
    dim as stored). `stages` copies exist when the buffer belongs to a pipeline. Buffers that share an
    `alias` group are unioned: their lifetimes must not overlap. scope "cta" or "warp" (each warp owns
    `shape` for itself: total = warps × size)."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    ld: int | None = None
    stages: int = 1
    alias: str | None = None
    scope: str = "cta"
    copies: int = 1                          # warp-scope buffers: number of owning warps
    offset: int = -1                         # byte offset in the kernel's shared memory (planner)

    @property
    def row_elems(self) -> int:
        return self.ld if self.ld is not None else (self.shape[-1] if self.shape else 1)

    @property
    def elems(self) -> int:
        rows = 1
        for d in self.shape[:-1]:
            rows *= d
        return rows * self.row_elems

    @property
    def bytes(self) -> int:
        return self.elems * DTYPE_BYTES[self.dtype] * self.stages * self.copies


@dataclass
class Step:
    """One step of a role's per-iteration program, in program order. `waits`/`arrives` name barriers;
    `reads`/`writes` name shared buffers (workspace and global tensors go in `global_reads` /
    `global_writes`). `mapping` says how threads cover the data (steps with different mappings, or
    different roles, need a barrier between a write and a read of the same buffer)."""
    name: str
    role: str
    mapping: str
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    arrives: list[str] = field(default_factory=list)
    global_reads: list[str] = field(default_factory=list)
    global_writes: list[str] = field(default_factory=list)
    loop: bool = False                      # part of the per-chunk loop
    note: str = ""


@dataclass
class Param:
    """A kernel argument. kind: "ptr" (tensor data pointer, `dtype` of its elements, `const` when
    read-only), "i32", "i64", "f32"."""
    name: str
    kind: str
    dtype: str | None = None
    const: bool = True


@dataclass
class Workspace:
    """A global tensor passed between kernels. `shape` may hold symbols resolved at launch ("chunks",
    "HV", "N"); `producer` and `consumers` are kernel names."""
    name: str
    shape: tuple
    dtype: str
    producer: str
    consumers: list[str]
    note: str = ""

    @property
    def bytes_per_chunk_head(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            if isinstance(d, int):
                n *= d
        return n


@dataclass
class Kernel:
    """One kernel launch. `grid` entries are symbolic expressions over launch sizes (see
    `kdagen.plan.sizes.evaluate`). `smem_bytes` is the planned static shared memory (the layout the
    template declares, computed by `kdagen.plan.smem`)."""
    name: str
    kind: str
    template: str
    direction: str                          # "forward" | "backward"
    grid: list[str]
    threads: int
    min_ctas_per_sm: int
    roles: list[Role]
    buffers: list[Buffer]
    barriers: list[Barrier]
    pipelines: list[Pipeline]
    steps: list[Step]
    params: list[Param]
    options: dict = field(default_factory=dict)
    smem_bytes: int = 0
    smem_dynamic: bool = False              # above the 48 KiB static limit: extern __shared__ + attribute
    spill_allowance: int = 0                # bytes of spill stores accepted on purpose (0 = none)
    note: str = ""

    def role(self, name: str) -> Role:
        return _named(self.roles, name, f"kernel {self.name!r} has no role")

    def buffer(self, name: str) -> Buffer:
        return _named(self.buffers, name, f"kernel {self.name!r} has no buffer")

    def barrier(self, name: str) -> Barrier:
        return _named(self.barriers, name, f"kernel {self.name!r} has no barrier")

    @property
    def max_regs(self) -> int:
        """The per-thread register cap implied by __launch_bounds__(threads, min_ctas_per_sm)."""
        cap = 65536 // (self.threads * self.min_ctas_per_sm)
        return min(255, cap - cap % 8)


@dataclass
class Plan:
    """Everything the templates need for one problem: both directions' kernels, in launch order."""
    uri: str
    problem: dict
    chunk: int
    decay_kind: str                         # "vector" (per channel) | "scalar" (per head)
    decay_interval: tuple[float, float]
    exponent_form: str                      # "factored" | "relative"
    kernels: list[Kernel]
    workspaces: list[Workspace]
    notes: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=lambda: ["common", "sm80"])   # header groups the kernels include
    version: int = PLAN_VERSION

    def kernel(self, name: str) -> Kernel:
        return _named(self.kernels, name, f"plan {self.uri!r} has no kernel")

    def workspace(self, name: str) -> Workspace:
        return _named(self.workspaces, name, f"plan {self.uri!r} has no workspace")

    def direction(self, direction: str) -> list[Kernel]:
        return [k for k in self.kernels if k.direction == direction]

    def to_dict(self) -> dict:
        return _to_plain(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, allow_nan=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        if d.get("version") != PLAN_VERSION:
            raise ValueError(f"plan {d.get('uri')!r} has format version {d.get('version')}, this kdagen reads "
                             f"{PLAN_VERSION}: emit it again (`kdagen emit` / `kdagen plan --json`)")
        return _from_plain(cls, d)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))


def _to_plain(x):
    if dataclasses.is_dataclass(x):
        return {f.name: _to_plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _to_plain(v) for k, v in x.items()}
    return x


def _from_plain(tp, x):
    """Rebuild a value of annotated type `tp` from its JSON form (lists back to tuples where typed)."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _from_plain(hints[f.name], x[f.name]) for f in dataclasses.fields(tp) if f.name in x})
    if origin in (typing.Union, types.UnionType):
        if x is None:
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _from_plain(args[0], x)
    if origin is list:
        (a,) = typing.get_args(tp) or (typing.Any,)
        return [_from_plain(a, v) for v in x]
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_plain(args[0], v) for v in x)
        if args:
            return tuple(_from_plain(a, v) for a, v in zip(args, x))
        return tuple(x)
    if tp is tuple:
        return tuple(x)
    return x
