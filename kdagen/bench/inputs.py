"""Random inputs as FLA's tests and benchmarks draw them (docs/math.md §10), identical for both libraries.

bf16 q, k, v (not normalised: the L2 norm is in the kernel); the raw gate g ~ N(0,1) in bf16 with
A_log = log U(1,16) and dt_bias ~ N(0,1) in fp32 (strong decays, up to 16·softplus per step); β
logits ~ N(0,1) in bf16; an fp32 initial state ~ N(0,1); cotangents dO ~ N(0,1) (bf16) and
dht ~ N(0,1) (fp32). A seed fixes every tensor, so two runs time the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cases import Shape, Variant

ACTIVATIONS = torch.bfloat16


@dataclass
class InputSet:
    inputs: dict          # FLA argument name -> tensor; floating tensors require grad
    do: torch.Tensor
    dht: torch.Tensor

    @property
    def leaves(self) -> list[str]:
        """Names of the differentiable inputs, in a fixed order."""
        return [n for n, t in self.inputs.items() if t.is_floating_point()]

    def grads(self, outputs) -> dict:
        """Gradients of Σ o⊙dO + Σ ht⊙dht for outputs (o, ht), by input name (None if unused)."""
        grads = torch.autograd.grad(outputs, [self.inputs[n] for n in self.leaves], (self.do, self.dht),
                                    allow_unused=True)
        return dict(zip(self.leaves, grads))


def make_set(variant: Variant, shape: Shape, *, device, seed: int) -> InputSet:
    """One input set for `variant` at `shape`, with its cotangents; requires_grad on every float input."""
    gen = torch.Generator(device=device).manual_seed(seed)   # drawn on the device: the big shapes are GBs
    B, T, H, D, N = shape.B, shape.T, shape.H, shape.D, shape.sequences

    def normal(*size, dtype=ACTIVATIONS):
        return torch.randn(*size, generator=gen, device=device).to(dtype)

    per_channel = variant.op == "kda"
    x = {
        "q": normal(B, T, H, D),
        "k": normal(B, T, H, D),
        "v": normal(B, T, H, D),
        "g": normal(B, T, H, D) if per_channel else normal(B, T, H),
        "beta": normal(B, T, H),
        "initial_state": normal(N, H, D, D, dtype=torch.float32),
        "A_log": (1 + 15 * torch.rand(H, generator=gen, device=device)).log(),
        "dt_bias": normal(H * D if per_channel else H, dtype=torch.float32),
    }
    for t in x.values():
        t.requires_grad_(True)
    cu = shape.cu_seqlens()
    if cu is not None:
        x["cu_seqlens"] = torch.tensor(cu, dtype=torch.int64, device=device)
    return InputSet(x, do=normal(B, T, H, D), dht=normal(N, H, D, D, dtype=torch.float32))


def float64_copy(s: InputSet) -> dict:
    """The same numbers in float64, fresh leaves: what the reference differentiates."""
    return {n: (t.detach().double().requires_grad_(True) if t.is_floating_point() else t)
            for n, t in s.inputs.items()}
