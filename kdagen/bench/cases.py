"""What the benchmark runs: op variants, shapes and modes, as plain data.

Every variant calls the op as FLA's own benchmarks and model code do (docs/math.md §10): the gate, the q/k
L2 norm and the β sigmoid all inside the kernel, an fp32 initial state given and the final state
returned. The two KDA variants are its two gate forms.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from kdagen.reference import Options

MODES = ("fwd", "bwd", "fwd+bwd")


@dataclass(frozen=True)
class Variant:
    key: str            # the name on the command line and in the results
    function: str       # attribute of kdagen and of the FLA module that implements it
    op: str             # "kda" (per-channel decay) or "gdn" (one decay per head)
    label: str
    lower_bound: float | None = None

    def call_kwargs(self) -> dict:
        """Keyword arguments both libraries get, on top of the tensors."""
        kwargs = dict(output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                      use_beta_sigmoid_in_kernel=True)
        if self.lower_bound is not None:
            kwargs.update(lower_bound=self.lower_bound, safe_gate=True)
        return kwargs

    def options(self) -> Options:
        """The same call, as the float64 reference reads it."""
        return Options(op=self.op, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                       use_beta_sigmoid_in_kernel=True, lower_bound=self.lower_bound)


VARIANTS = {
    v.key: v for v in (
        Variant("kda", "chunk_kda", "kda", "chunk_kda, softplus gate"),
        Variant("kda_lb", "chunk_kda", "kda", "chunk_kda, lb·σ gate (lb=-5)", lower_bound=-5.0),
        Variant("gdn", "chunk_gated_delta_rule", "gdn", "chunk_gated_delta_rule"),
    )
}
FUNCTIONS = tuple(sorted({v.function for v in VARIANTS.values()}))


@dataclass(frozen=True)
class Shape:
    """B sequences of T tokens, or (B = 1) varlen sequences of the given lengths; H heads of dim D."""
    B: int
    T: int
    H: int
    D: int
    lengths: tuple[int, ...] | None = None

    @classmethod
    def varlen(cls, lengths, H: int, D: int) -> "Shape":
        lengths = tuple(int(n) for n in lengths)
        return cls(1, sum(lengths), H, D, lengths)

    @property
    def sequences(self) -> int:
        return self.B if self.lengths is None else len(self.lengths)

    @property
    def tokens(self) -> int:
        return self.B * self.T

    @property
    def name(self) -> str:
        if self.lengths is None:
            return f"{self.B}x{self.T}x{self.H}x{self.D}"
        return "+".join(map(str, self.lengths)) + f"x{self.H}x{self.D}"

    def cu_seqlens(self) -> list[int] | None:
        if self.lengths is None:
            return None
        cu = [0]
        for n in self.lengths:
            cu.append(cu[-1] + n)
        return cu

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lengths"] = None if self.lengths is None else list(self.lengths)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Shape":
        return cls(d["B"], d["T"], d["H"], d["D"], None if d.get("lengths") is None else tuple(d["lengths"]))


def parse_shape(text: str) -> Shape:
    """'BxTxHxD' (dense) or 'L1+L2+...xHxD' (varlen, ≥ 2 sequences), e.g. '1x8192x64x128', '1300+547x64x128'."""
    fields = text.strip().lower().split("x")
    try:
        if len(fields) == 4 and "+" not in fields[0]:
            B, T, H, D = (int(f) for f in fields)
            shape = Shape(B, T, H, D)
        elif len(fields) == 3 and "+" in fields[0]:   # one sequence is just the dense 1xTxHxD
            shape = Shape.varlen([int(n) for n in fields[0].split("+")], int(fields[1]), int(fields[2]))
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"shape {text!r}: expected BxTxHxD (e.g. 1x8192x64x128) "
                         f"or varlen lengths L1+L2+...xHxD (e.g. 1300+547x64x128)") from None
    if min((shape.B, shape.T, shape.H, shape.D) + (shape.lengths or ())) < 1:
        raise ValueError(f"shape {text!r}: every size must be ≥ 1")
    return shape


DEFAULT_SHAPES = (
    Shape(1, 8192, 64, 128),
    Shape(1, 32768, 16, 128),
    Shape(8, 4096, 32, 128),
    Shape(4, 4096, 16, 64),
    Shape(1, 65536, 4, 128),        # long context, few heads: 4 (sequence, head) pairs on 132 SMs
    Shape.varlen([1300, 547, 2048, 963, 271, 3063], H=64, D=128),
)

# Accuracy runs the float64 token recurrence, whose autograd keeps ~3 float64 states per token
# (H·D²·24 bytes: 9.4 GB for the first shape, 11 GB for the second), so it gets short shapes of its
# own: tail chunks (1500 = 23·64 + 28; 300, 147) and two varlen sequences. Their batch, heads and
# head dims are those of default timing shapes (1x32768x16x128 and the varlen one): FLA's Triton
# autotune keys hold those but (nearly) not T, so they add almost no tuning of their own.
ACCURACY_SHAPES = (
    Shape(1, 1500, 16, 128),
    Shape.varlen([300, 147], H=64, D=128),
)


def parse_list(text: str, allowed, what: str) -> tuple[str, ...]:
    """A comma-separated choice from `allowed`, order kept; a clear error names the bad item."""
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in items if s not in allowed]
    if bad or not items:
        raise ValueError(f"{what}: {', '.join(bad) or '(empty)'} not among {', '.join(allowed)}")
    return items
