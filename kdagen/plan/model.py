"""The plan vocabulary: plain dataclasses that say, for each kernel, who does what with which memory.

A `Plan` is data only (JSON round-trip through `to_json` / `from_json`); a kernel family
(kdagen.plan.families) fills it in, `verify` checks it, the templates read it. Thread ranges are in
warps; every count is explicit so a reader (or a tuner) never has to re-derive it from template code.
docs/plan.md describes the vocabulary.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field

PLAN_VERSION = 3     # 3: kernel families, typed kernel options, the Hopper vocabulary (swizzle, tx bytes, tensor maps)

WARP = 32

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i64": 8, "u64": 8}
CTYPES = {"bf16": "bf16", "f16": "__half", "f32": "float", "i32": "int", "i64": "long long", "u64": "u64"}
SCALAR_CTYPES = {"i32": "int", "i64": "long long", "f32": "float"}
SWIZZLES = (0, 32, 64, 128)          # bytes of a swizzle span; the span times 8 rows is the pattern's alignment
TENSOR_MAP_CTYPE = "kdg::TensorMap"


def param_ctype(p) -> str:
    """The C type of a kernel parameter as the kernel declares it (render) and as a host caller passes it
    (the emulator's trampolines): one table for both."""
    if p.kind == "ptr":
        return f"{'const ' if p.const else ''}{CTYPES[p.dtype]}*"
    if p.kind == "tensor_map":
        return TENSOR_MAP_CTYPE
    return SCALAR_CTYPES[p.kind]


_OPTION_TYPES: dict[str, type] = {}


def kernel_options(cls):
    """Register a dataclass as a kernel's typed options (the JSON form records its name)."""
    _OPTION_TYPES[cls.__name__] = cls
    return cls


def _named(items, name: str, missing: str):
    """The item of that name; a KeyError that says whose list lacked it."""
    for item in items:
        if item.name == name:
            return item
    raise KeyError(f"{missing} {name!r}")


@dataclass
class Role:
    """A set of warps that runs one part of the kernel. `regs` is the per-thread register budget:
    the setmaxnreg quota when `setmaxnreg` is true (sm_90a warp groups: the kernel's skeleton raises or
    lowers each role's registers to it), else the launch-bound cap the role is planned to fit in."""
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
    "cta" (__syncthreads). `arrivals` lists (role, unit) with unit "thread" | "warp" | "elected" | "group" (the
    threads of one warp group of the role, the others not taking part);
    `count` must equal what those arrivals add up to (per copy: a named barrier with `copies` > 1 is one
    hardware barrier per warp group of its role, ids id .. id + copies − 1). `stages` > 1 makes an array (one per pipeline
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
    tx_bytes: int = 0                       # mbarrier: bytes of bulk copies completing on it per phase
    copies: int = 1                         # named: one barrier per warp group of the arriving role (ids id..)
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
    copy: str = "cp.async"                  # "cp.async" (per-thread 16-byte copies) | "tma" (bulk tensor copies)


@dataclass
class Buffer:
    """A shared-memory buffer. `shape` is logical, `ld` the padded row length in elements (the last
    dim as stored). `stages` copies exist when the buffer belongs to a pipeline. Buffers that share an
    `alias` group are unioned: their lifetimes must not overlap. scope "cta" or "warp" (each warp owns
    `shape` for itself: total = warps × size). `swizzle` (bytes: 0, 32, 64, 128) is the pattern a bulk
    tensor copy writes and wgmma descriptors read: a row must then be exactly one swizzle span and the
    buffer (and each stage) aligned to 8 spans; `align` is the byte alignment of its offset."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    ld: int | None = None
    stages: int = 1
    alias: str | None = None
    scope: str = "cta"
    copies: int = 1                          # warp-scope buffers: number of owning warps
    align: int = 16
    swizzle: int = 0
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
    def stage_bytes(self) -> int:
        return self.elems * DTYPE_BYTES[self.dtype]

    @property
    def bytes(self) -> int:
        return self.stage_bytes * self.stages * self.copies


@dataclass
class Step:
    """One step of a role's per-iteration program, in program order. `waits`/`arrives` name barriers, once per
    wait or arrival inside the step;
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
class TensorMapSpec:
    """What the host encodes into a tensor map (a bulk-tensor-copy descriptor) for one kernel parameter:
    the global `tensor` (a workspace or input by name), viewed as `dims` (innermost first; entries may be
    size expressions) with row `strides` in elements for dims 1.. (innermost is contiguous), copied in
    boxes of `box` elements into a shared buffer with the given swizzle. Out-of-bounds elements read 0."""
    tensor: str
    dtype: str
    dims: list
    strides: list
    box: list[int]
    swizzle: int = 128
    buffer: str = ""                        # the shared buffer the boxes land in


@dataclass
class Param:
    """A kernel argument. kind: "ptr" (tensor data pointer, `dtype` of its elements, `const` when
    read-only), "i32", "i64", "f32", or "tensor_map" (a 128-byte descriptor passed by value as
    `const __grid_constant__`, encoded on the host from `tensor_map`)."""
    name: str
    kind: str
    dtype: str | None = None
    const: bool = True
    tensor_map: TensorMapSpec | None = None


@dataclass
class Workspace:
    """A global tensor passed between kernels. `shape` may hold symbols resolved at launch ("chunks",
    "HV", "N"); `producer` and `consumers` are kernel names. `kept_only`: written only for a backward (a
    forward call that keeps nothing passes its kernels a null pointer and allocates none)."""
    name: str
    shape: tuple
    dtype: str
    producer: str
    consumers: list[str]
    note: str = ""
    kept_only: bool = False

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
    options: object = None                  # the family's typed options for this kernel kind (a dataclass)
    smem_bytes: int = 0
    smem_dynamic: bool = False              # above the 48 KiB static limit: extern __shared__ + attribute
    spill_allowance: int = 0                # bytes of spill stores accepted on purpose (0 = none)
    note: str = ""
    # further extern "C" entry points the template renders beside `name`, with the same parameters (a variant
    # compiled with a constant switched, e.g. recurrence_maps: the maps pass of a cut forward)
    entries: list[str] = field(default_factory=list)

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
    """Everything the templates need for one problem: the family's kernels of both directions, in launch
    order; `saved` names the workspaces the forward keeps for the backward (the rest of a direction's
    workspaces live only during its launches)."""
    uri: str
    problem: dict
    family: str
    chunk: int
    decay_kind: str                         # "vector" (per channel) | "scalar" (per head)
    decay_interval: tuple[float, float]
    exponent_form: str                      # "factored" | "relative"
    kernels: list[Kernel]
    workspaces: list[Workspace]
    saved: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=lambda: ["common"])   # header groups the kernels include
    notes: list[str] = field(default_factory=list)
    version: int = PLAN_VERSION

    def kernel(self, name: str) -> Kernel:
        return _named(self.kernels, name, f"plan {self.uri!r} has no kernel")

    def workspace(self, name: str) -> Workspace:
        return _named(self.workspaces, name, f"plan {self.uri!r} has no workspace")

    def direction(self, direction: str) -> list[Kernel]:
        return [k for k in self.kernels if k.direction == direction]

    def directions(self) -> list[str]:
        return list(dict.fromkeys(k.direction for k in self.kernels))

    def produced_in(self, direction: str) -> list[Workspace]:
        """The workspaces a direction's kernels write (what its launcher allocates)."""
        names = {k.name for k in self.direction(direction)}
        return [w for w in self.workspaces if w.producer in names]

    def to_dict(self) -> dict:
        return _to_plain(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, allow_nan=False) + "\n"

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
        d = {f.name: _to_plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if type(x).__name__ in _OPTION_TYPES:
            d["type"] = type(x).__name__
        return d
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _to_plain(v) for k, v in x.items()}
    if isinstance(x, float) and math.isinf(x):
        return INFINITIES[x > 0]             # strict JSON has no infinity (an unbounded decay interval)
    return x


INFINITIES = ("-inf", "inf")


def _restore(x):
    """Infinities back from their JSON strings, in values without a declared type (the problem summary)."""
    if isinstance(x, str) and x in INFINITIES:
        return float(x)
    if isinstance(x, list):
        return [_restore(v) for v in x]
    if isinstance(x, dict):
        return {k: _restore(v) for k, v in x.items()}
    return x


def _from_plain(tp, x):
    """Rebuild a value of annotated type `tp` from its JSON form (lists back to tuples where typed)."""
    origin = typing.get_origin(tp)
    if tp is object and isinstance(x, dict) and "type" in x:            # typed kernel options
        cls = _OPTION_TYPES.get(x["type"])
        if cls is None:
            raise ValueError(f"plan: unknown kernel options type {x['type']!r}")
        return _from_plain(cls, {k: v for k, v in x.items() if k != "type"})
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
    return _restore(x)
