"""flash-linear-attention's own layers on kdagen through FLA's backend registry (kdagen.integrations.fla), on the
GPU with FLA installed: with FLA_KDAGEN=1 `fla.layers.KimiDeltaAttention` dispatches to kdagen (FLA's log says so)
and a few training steps give losses and gradients equal to FLA's own within bf16 noise; a configuration kdagen
does not serve falls back to FLA with the reason logged. GatedDeltaNet: forward only (FLA's GDN backward refuses
to run on this image's Triton).

Run on a GPU machine with FLA: python -m pytest -m gpu tests/gpu/test_fla_layers_gpu.py -q
(KDAGEN_FLA_FIRST_CONFIG=1: FLA's kernels on their first configuration, not tuned; tests/fla_untuned.py)
"""
from __future__ import annotations

import copy
import logging
import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
if os.environ.get("KDAGEN_FLA_FIRST_CONFIG") == "1" and torch.cuda.is_available():
    from fla_untuned import first_config_only          # FLA untuned: device runs short of time
    first_config_only()
fla_layers = pytest.importorskip("fla.layers", reason="flash-linear-attention is not installed")

from kdagen.integrations import fla as kdagen_backend  # noqa: E402  (importing registers the backends)

assert kdagen_backend.__name__
B, T, HIDDEN = 2, 512, 512


def rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def train(layer, steps: int, seed: int, monkeypatch, enabled: bool):
    """Losses and the last step's parameter gradients of a few SGD steps on fixed random data."""
    monkeypatch.setenv("FLA_KDAGEN", "1" if enabled else "0")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        x = torch.randn(B, T, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
        target = torch.randn(B, T, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
        opt.zero_grad()
        o, _, _ = layer(x)
        loss = (o.float() - target.float()).square().mean()
        loss.backward()
        losses.append(loss.item())
        grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
        opt.step()
    return losses, grads


def test_kimi_delta_attention_trains_on_kdagen(seed, monkeypatch, caplog):
    torch.manual_seed(seed)
    layer = fla_layers.KimiDeltaAttention(hidden_size=HIDDEN, head_dim=128, num_heads=4, safe_gate=True,
                                          lower_bound=-5.0).cuda().bfloat16()
    twin = copy.deepcopy(layer)
    with caplog.at_level(logging.INFO, logger="fla.backends"):
        ours, our_grads = train(layer, 3, seed, monkeypatch, enabled=True)
    assert any("-> kdagen" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    theirs, their_grads = train(twin, 3, seed, monkeypatch, enabled=False)
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= 1e-2 * abs(b), (ours, theirs)
    bad = {n: f"{rel(our_grads[n], g):.2e}" for n, g in their_grads.items() if not rel(our_grads[n], g) <= 3e-2}
    assert not bad, f"seed {seed}: gradients off: {bad}"


def test_unsupported_configuration_falls_back_with_the_reason(seed, monkeypatch, caplog):
    torch.manual_seed(seed)
    layer = fla_layers.KimiDeltaAttention(hidden_size=HIDDEN, head_dim=96, num_heads=4).cuda().bfloat16()
    x = torch.randn(B, T, HIDDEN, device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv("FLA_KDAGEN", "1")
    with caplog.at_level(logging.INFO, logger="fla.backends"), torch.no_grad():
        o, _, _ = layer(x)
    messages = [r.getMessage() for r in caplog.records]
    assert any("kdagen rejected" in m and "head dim K = 96" in m for m in messages), messages
    monkeypatch.setenv("FLA_KDAGEN", "0")
    with torch.no_grad():
        o_fla, _, _ = layer(x)
    assert torch.equal(o, o_fla)


def test_gated_deltanet_forward_on_kdagen(seed, monkeypatch, caplog):
    torch.manual_seed(seed)
    layer = fla_layers.GatedDeltaNet(hidden_size=HIDDEN, head_dim=128, num_heads=4, expand_v=1).cuda().bfloat16()
    x = torch.randn(B, T, HIDDEN, device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv("FLA_KDAGEN", "1")
    with caplog.at_level(logging.INFO, logger="fla.backends"), torch.no_grad():
        ours, _, _ = layer(x)
    assert any("-> kdagen" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("FLA_KDAGEN", "0")
    with torch.no_grad():
        theirs, _, _ = layer(x)
    assert rel(ours, theirs) <= 1e-2, rel(ours, theirs)
