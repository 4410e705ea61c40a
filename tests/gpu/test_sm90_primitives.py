"""The sm_90a primitives on a Hopper GPU: the kernels of tests/test_emulate_sm90.py, compiled by NVRTC for
sm_90a, with tensor maps from kdagen.runtime.encode_tiled, against the numpy references the CPU emulator
meets there — so the emulator's reading of the PTX ISA (TMA boxes and swizzles, mbarrier tx-counts, the
wgmma operand layouts and fragments, stmatrix, named barriers, setmaxnreg) is checked against hardware.

TMA and stmatrix bytes, named-barrier hashes and setmaxnreg outputs must match exactly; wgmma results
within fp32 accumulation error (the tensor cores sum in another order than numpy). A mismatch reports how
many elements differ, the worst one and the first few indices with expected and actual values.
Run: python -m pytest -m gpu tests/gpu/test_sm90_primitives.py -q
"""
from __future__ import annotations

import pytest
import torch

import test_emulate_sm90 as sm90
from kdagen import runtime

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def module():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"sm_90a kernels need a Hopper GPU (compute capability 9.0), not "
                    f"{torch.cuda.get_device_name()} {torch.cuda.get_device_capability()}")
    return runtime.load_module("sm90-primitives", sm90.device_source(), "sm_90a")


@pytest.fixture(autouse=True)
def context_alive(module):
    """A kernel fault loses the CUDA context for the rest of the process: skip the later tests, naming the
    cause, instead of failing each with the same error (the first failure is the one to read)."""
    try:
        torch.cuda.synchronize()
    except Exception as e:              # torch.AcceleratorError / RuntimeError, by torch version
        pytest.skip(f"CUDA context lost to an earlier test's kernel fault: {str(e).splitlines()[0]}")


def synced(result):
    torch.cuda.synchronize()
    return result


@pytest.mark.parametrize("name", sorted(sm90.TMA_CASES))
def test_tma_loads(module, name):
    got, expected = synced(sm90.run_tma(module, "cuda", runtime.encode_tiled, name, seed=len(name)))
    report = sm90.mismatches(got, expected, 0)
    assert not report, (f"{name} {sm90.TMA_CASES[name]}: bytes (iteration, copy, byte of the raw tile then of "
                        f"the box read back through swizzle_offset) differ:\n{report}")


def test_mbarrier_phases_wait_for_transaction_bytes(module):
    got, expected = synced(sm90.run_mbarrier_tx(module, "cuda", runtime.encode_tiled))
    assert not sm90.mismatches(got, expected, 0), \
        f"mbarrier phase flags (thread 0's view after each step) {got.tolist()}, expected {expected.tolist()}"


@pytest.mark.parametrize("name", sorted(sm90.TMA_STORE_CASES))
def test_tma_store(module, name):
    got, expected = synced(sm90.run_tma_store(module, "cuda", runtime.encode_tiled, name, seed=len(name)))
    report = sm90.mismatches(got, expected, 0)
    assert not report, f"{name} {sm90.TMA_STORE_CASES[name]}: the tensor after the store differs:\n{report}"


@pytest.mark.parametrize("nbytes", [16, 4096, 8192])
def test_bulk_copy(module, nbytes):
    got, expected = synced(sm90.run_bulk(module, "cuda", nbytes, seed=nbytes))
    report = sm90.mismatches(got, expected, 0)
    assert not report, f"bulk copy of {nbytes} bytes: bytes differ:\n{report}"


@pytest.mark.parametrize("name", sorted(sm90.WGMMA_CASES))
def test_wgmma(module, name):
    n, ta, tb, span_a, span_b, ksteps, scale_d, rs = sm90.WGMMA_CASES[name]
    got, expected = synced(sm90.run_wgmma(module, "cuda", n, ta, tb, span_a, span_b, ksteps, scale_d,
                                          seed=len(name), rs=rs))
    report = sm90.mismatches(got, expected, sm90.wgmma_tolerance(expected))
    assert not report, f"{name} {sm90.WGMMA_CASES[name]}: D (row, col) differs:\n{report}"


def test_wgmma_chain_through_register_fragments(module):
    got, expected = synced(sm90.run_chain(module, "cuda", seed=3))
    report = sm90.mismatches(got, expected, sm90.wgmma_tolerance(expected))
    assert not report, f"chain bf16(A·B1)·B2: D (row, col) differs:\n{report}"


@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix(module, trans):
    got, expected = synced(sm90.run_stmatrix(module, "cuda", trans))
    report = sm90.mismatches(got.reshape(32, 16), expected.reshape(32, 16), 0)
    assert not report, f"stmatrix{' .trans' if trans else ''}: (8 x matrix + row, column) differs:\n{report}"


def test_named_barriers_order_producer_and_consumers(module):
    got, expected = synced(sm90.run_named_barrier(module, "cuda", iters=40, blocks=2))
    report = sm90.mismatches(got.reshape(2, 96), expected.reshape(2, 96), 0)
    assert not report, f"named barriers: hashes (block, consumer thread - 32) differ:\n{report}"


def test_setmaxnreg_split(module):
    got, expected = synced(sm90.run_setmaxnreg(module, "cuda"))
    report = sm90.mismatches(got, expected, 0)
    assert not report, f"setmaxnreg: outputs (thread) differ:\n{report}"
