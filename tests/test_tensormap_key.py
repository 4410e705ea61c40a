"""The caches of kdagen.runtime.tensormap's encodings, on the CPU: the key of `encode_tiled`'s holds everything an
encoding and its checks read, so two tensors share an entry only where their maps are the same bytes; a prepared
launch's `AddressedMap` checks its layout once and encodes each address once (the encodings themselves need the
driver: tests/gpu/test_tensormap_gpu.py)."""
from __future__ import annotations

import torch

from kdagen.runtime.tensormap import _encoding_key


def test_the_key_holds_what_the_encoding_reads():
    buf = bytearray(64 * 64 * 4)
    whole = torch.frombuffer(buf, dtype=torch.float32).view(64, 64)
    rows = whole[:32]                                                     # 16 KB of storage behind it
    alone = torch.frombuffer(buf, dtype=torch.float32, count=32 * 64).view(32, 64)   # 8 KB: same address, shape
    assert rows.data_ptr() == alone.data_ptr() and rows.shape == alone.shape and rows.stride() == alone.stride()
    key = _encoding_key(rows, (32, 32), 128, [64, 64], [64])
    assert key != _encoding_key(alone, (32, 32), 128, [64, 64], [64])     # the reach check differs: so must the key
    assert key == _encoding_key(whole[:32], (32, 32), 128, (64, 64), (64,))      # lists or tuples alike
    for other in [((32, 16), 128, [64, 64], [64]), ((32, 32), 64, [64, 64], [64]), ((32, 32), 128, [64, 32], [64]),
                  ((32, 32), 128, [64, 64], [128])]:
        assert key != _encoding_key(rows, *other), other
    assert _encoding_key(whole[1:33], (32, 32), 128, [64, 64], [64]) != key            # another address


def test_sizes_that_are_not_plain_ints_are_never_cached():
    t = torch.zeros(64, 64)
    assert _encoding_key(t, (32.0, 32), 128, None, None) is None   # equal to (32, 32) as a key; the checks refuse it
    assert _encoding_key(t, (32, 32), 128, [64, True], [64]) is None
    assert _encoding_key(t, (32, 32), True, None, None) is None
    assert _encoding_key(t, (32, 32), 128, None, None) is not None


def test_a_prepared_launchs_map_encodes_each_address_once(monkeypatch):
    """runtime.tensormap.AddressedMap (a prepared launch's tensor-map slot): a layout reaching past its tensor's extent
    is refused when the slot is made (map_layout); each address a launch brings is checked for alignment and
    encoded once, the oldest dropped past LIMIT; 0 is the zero map only where the tensor may be absent."""
    import contextlib

    import pytest

    from kdagen.runtime import launch, tensormap
    made = []
    monkeypatch.setattr(tensormap, "_encode", lambda t: made.append(t.address) or tensormap.TensorMap(
        t.address.to_bytes(8, "little") * 16))
    monkeypatch.setattr(launch, "on_device", lambda index: contextlib.nullcontext())
    with pytest.raises(ValueError, match="reach 16384 bytes.*holds 16383"):
        tensormap.map_layout(torch.float32, 64 * 64 * 4 - 1, (32, 32), 128, [64, 64], [64])
    layout = tensormap.map_layout(torch.float32, 64 * 64 * 4, (32, 32), 128, [64, 64], [64])
    slot = tensormap.AddressedMap(layout, 0, "ws_A", absent_ok=True)
    assert slot(0) == bytes(128) and not made
    first = slot(0x1000)
    assert slot(0x1000) == first == (0x1000).to_bytes(8, "little") * 16 and made == [0x1000]
    assert slot(0x2000) != first and made == [0x1000, 0x2000]
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        slot(0x1008)
    monkeypatch.setattr(tensormap.AddressedMap, "LIMIT", 3)
    slot(0x3000)                                    # 0, 0x2000, 0x3000 held: 0x1000, the oldest, was dropped
    assert slot(0) == bytes(128) and slot(0x2000) and made == [0x1000, 0x2000, 0x3000]
    slot(0x1000)
    assert made[-1] == 0x1000
    with pytest.raises(ValueError, match="tensor map of 'v': the tensor is absent"):
        tensormap.AddressedMap(layout, 0, "v")(0)
