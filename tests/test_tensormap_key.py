"""The key of kdagen.runtime.tensormap's encoding cache, on the CPU: everything an encoding and its checks read is
in it, so two tensors share an entry only where their maps are the same bytes (the encodings themselves need the
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
