"""The driver's tensor maps on the GPU (kdagen.runtime.tensormap): an encoding is cached by everything it reads, so a
call that meets an address and shape again skips the checks and the driver, and nothing that changes the map (or a
check's verdict) can hit an old entry. Run: python -m pytest -m gpu tests/gpu/test_tensormap_gpu.py -q
"""
from __future__ import annotations

import pytest
import torch

from kdagen.runtime import tensormap

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture
def encodes(monkeypatch):
    """The driver encodings made during a test (the cache starts empty)."""
    monkeypatch.setattr(tensormap, "_ENCODED", {})
    made = []
    real = tensormap._encode

    def counted(layout):
        made.append(layout)
        return real(layout)

    monkeypatch.setattr(tensormap, "_encode", counted)
    return made


def test_an_encoding_is_made_once_per_address_and_layout(encodes):
    t = torch.zeros(4, 64, 64, dtype=torch.bfloat16, device="cuda")
    first = tensormap.encode_tiled(t, (64, 64, 1), 128)
    assert tensormap.encode_tiled(t, (64, 64, 1), 128) == first and len(encodes) == 1
    # another box, another view of the same storage, another address: each its own encoding, with its own bytes
    others = [tensormap.encode_tiled(t, (64, 32, 1), 128), tensormap.encode_tiled(t[1:], (64, 64, 1), 128),
              tensormap.encode_tiled(t.view(4, 32, 128), (64, 32, 1), 128)]
    assert len(encodes) == 4 and len({m.data for m in [first, *others]}) == 4


def test_a_cached_encoding_keeps_the_checks(encodes):
    t = torch.zeros(64, 64, dtype=torch.float32, device="cuda")
    tensormap.encode_tiled(t, (32, 32), 128, dims=[64, 64], strides=[64])
    with pytest.raises(TypeError, match="box must be ints"):
        tensormap.encode_tiled(t, (32.0, 32), 128, dims=[64, 64], strides=[64])      # equal as a key, not an int
    assert len(encodes) == 1       # (the storage size in the key: tests/test_tensormap_key.py)


def test_a_thread_that_has_run_no_cuda_work_can_encode(encodes):
    """The autograd engine runs a backward on its own thread, which may have no current context yet when a cut
    backward's first launch encodes its maps; the driver refuses an encoding then (CUDA_ERROR_INVALID_CONTEXT)."""
    import threading
    t = torch.zeros(2, 64, 64, dtype=torch.bfloat16, device="cuda")
    got = []
    thread = threading.Thread(target=lambda: got.append(tensormap.encode_tiled(t, (64, 64, 1), 128)))
    thread.start()
    thread.join()
    assert len(got) == 1 and len(encodes) == 1


def test_a_prepared_launchs_map_is_the_tensors_own_encoding(encodes):
    """AddressedMap (the prepared launches' slot) encodes from a layout checked without the tensor and an address:
    the driver must give the bytes encode_tiled gives from the tensor itself."""
    t = torch.zeros(4, 64, 64, dtype=torch.bfloat16, device="cuda")
    layout = tensormap.map_layout(t.dtype, t.numel() * t.element_size(), (64, 64, 1), 128, [64, 64, 4],
                                  [64, 64 * 64])
    slot = tensormap.AddressedMap(layout, t.device.index, "t")
    assert slot(t.data_ptr()) == tensormap.encode_tiled(t, (64, 64, 1), 128).data
    assert slot(t[1:].data_ptr()) != slot(t.data_ptr())
