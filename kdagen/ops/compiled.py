"""`kdagen.compile(recurrence)`: a recurrence written in kdagen.dsl as a differentiable PyTorch op.

The op takes the recurrence's token inputs and head parameters (by name, or positionally in declaration
order), its scalars by name, and the call options every op has (`initial_state`, `output_final_state`,
`cu_seqlens`, `cu_seqlens_cpu`, `state_v_first`); it returns `(o, final_state)` and is differentiable in
every tensor input. A scalar passed as a 0-d tensor that requires grad is learned too: the op rebuilds the
recurrence with it as a per-head parameter of shape (), fills every head with its value, and autograd sums the
heads' gradients (not for the core's scale, which takes no gradient). Kernels are planned, rendered and compiled once per configuration (head dim, GVA ratio,
varlen, dtypes, state layout, arch, and whether gradients are needed), in the same cache as chunk_kda's.
docs/recurrences.md walks from writing a gate to training with it.
"""
from __future__ import annotations

import functools

import torch

from .. import dsl
from .config import INFERENCE, SPECS, TRAINING, Spec, config_for, constant_when_compiled, default_arch
from .run import run

CALL_OPTIONS = ("initial_state", "output_final_state", "cu_seqlens", "cu_seqlens_cpu", "state_v_first")


class RecurrenceOp:
    """A compiled recurrence: call it like `op(q, k, v, g, beta, w=w, scale=0.1, initial_state=h0,
    output_final_state=True)`. `inputs` and `scalars` list what it reads."""

    def __init__(self, spec: Spec, family: str | None, emulate: bool):
        self.spec, self.family, self.emulate = spec, family, emulate
        self.inputs, self.scalars = spec.inputs, spec.scalars
        clash = sorted(set(self.inputs + self.scalars) & set(CALL_OPTIONS))
        if clash:
            raise ValueError(f"recurrence {spec.recurrence.name!r}: inputs named {clash} would shadow the op's own "
                             "arguments; rename them")

    def __repr__(self) -> str:
        r = self.spec.recurrence
        return (f"RecurrenceOp({self.spec.name!r}, inputs={list(self.inputs)}, scalars={list(self.scalars)}, "
                f"decay {r.decay_kind}{', emulated' if self.emulate else ''})")

    def __call__(self, /, *args, initial_state=None, output_final_state: bool = False, cu_seqlens=None,
                 cu_seqlens_cpu=None, state_v_first: bool = False, **named):     # `/`: an input may be named self
        if len(args) > len(self.inputs):
            raise TypeError(f"{self.spec.name}() takes at most {len(self.inputs)} positional inputs "
                            f"({', '.join(self.inputs)}), got {len(args)}")
        tensors = dict(zip(self.inputs, args))
        scalars = {}
        for name, value in named.items():
            if name in tensors:
                raise TypeError(f"{self.spec.name}() got multiple values for input {name!r}")
            (scalars if name in self.scalars else tensors)[name] = value
        spec = self.spec
        learned = tuple(sorted(n for n, s in scalars.items()
                               if isinstance(s, torch.Tensor) and s.requires_grad and s.dim() == 0))
        value = tensors.get(spec.value)
        if learned and isinstance(value, torch.Tensor) and value.dim() == 4:
            spec = learned_spec(spec.key, ",".join(learned))
            for name in learned:      # one value for every value head; autograd sums the heads' gradients
                tensors[name] = scalars.pop(name).float().reshape(1).expand(value.shape[2]).contiguous()
        return run(spec, tensors, scalars, initial_state=initial_state, output_final_state=output_final_state,
                   cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, state_v_first=state_v_first,
                   family=self.family, emulate=self.emulate)

    def config(self, head_dim: int = 128, *, gva: int = 1, varlen: bool = False, state_v_first: bool = False,
               inference: bool = False, dtypes: dict | None = None, arch: str | None = None, pairs: int | None = None):
        """The kernels' Config for calls of this shape (`plan()` and `precompile()` read it); `pairs`, the calls'
        (sequence, value head) pairs, ranks families as such calls rank them (families.ranking)."""
        return config_for(self.spec, head_dim, head_dim, gva, varlen, dtypes or {}, arch or default_arch(),
                          state_layout="vk" if state_v_first else "kv",
                          directions=INFERENCE if inference else TRAINING, family=self.family, pairs=pairs)

    def plan(self, head_dim: int = 128, **shape):
        """The verified plan of calls of this shape (`kdagen plan` prints the same for --recurrence)."""
        return self.config(head_dim, **shape).planned()[0]

    def precompile(self, head_dim: int = 128, **shape) -> list:
        """Compile (or fetch from the cache) the modules calls of this shape load, now; their timings."""
        from .precompile import compile_modules, target
        from .config import kernel_sources
        config = self.config(head_dim, **shape)
        arch, kind = target(config.arch)
        found = kernel_sources(config)
        return compile_modules(found, arch, kind, jobs=len(found), cold=False)


BUILDERS: dict[str, tuple] = {}     # Spec.key -> (fn, options) that built it: to rebuild it with scalars learned


@constant_when_compiled
def learned_spec(spec_key: str, names: str) -> Spec:
    """The recurrence of spec_key rebuilt with the scalars `names` (comma-separated) as per-head parameters of
    shape (), so they get gradients (plain arguments: see constant_when_compiled)."""
    return _learned_spec(spec_key, names)


@functools.lru_cache(maxsize=64)
def _learned_spec(spec_key: str, names: str) -> Spec:
    learned = tuple(names.split(","))
    if spec_key not in BUILDERS:
        raise ValueError(f"scalars {list(learned)} require grad, but this op was compiled from a built Recurrence; "
                         "compile the function that builds it to learn scalars")
    fn, options = BUILDERS[spec_key]
    spec = SPECS[spec_key]
    try:
        r = dsl.build(fn, spec.recurrence.name, learned_scalars=learned, **options)
    except dsl.DSLError as e:
        raise ValueError(f"scalars {list(learned)} require grad, but one of them cannot be learned: {e} "
                         "(the core's scale takes no gradient)") from None
    return Spec.of(r, f"{spec.name}_learn_{'_'.join(learned)}")


def compile(recurrence, *, name: str | None = None, family: str | None = None, emulate: bool = False,
            **options) -> RecurrenceOp:
    """The op of a recurrence: a kdagen.dsl.Recurrence, or a function fn(r, **options) that writes one (built
    with kdagen.dsl.build). `name` starts the kernels' URIs (default: the recurrence's name); `family` asks for a
    kernel family (default: KDAGEN_FAMILY, else the planner's choice); `emulate=True` runs the generated kernels
    on the CPU through kdagen.codegen.emulate, on CPU tensors (slow: for debugging a recurrence without a GPU)."""
    builder = None
    if isinstance(recurrence, dsl.Recurrence):
        if options:
            raise TypeError(f"compile(): options {sorted(options)} need a function that builds the recurrence, "
                            "not a built Recurrence")
        r = recurrence.check()
    elif callable(recurrence):
        r = dsl.build(recurrence, **options)
        builder = (recurrence, options)
    else:
        raise TypeError(f"compile(): recurrence must be a kdagen.dsl.Recurrence or a function fn(r, **options), "
                        f"got {type(recurrence).__name__}")
    tag = name or r.name
    if not isinstance(tag, str) or not (tag.isascii() and tag.replace("_", "").isalnum()):
        raise ValueError(f"compile(): name={tag!r} must be ASCII letters, digits and '_' (it starts the kernels' URIs)")
    if family is not None:
        from ..plan.families import family as known_family
        family = known_family(family).name
    spec = Spec.of(r, tag)
    if builder is not None:
        BUILDERS.setdefault(spec.key, builder)
    return RecurrenceOp(spec, family, bool(emulate))
