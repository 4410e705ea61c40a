"""Context parallelism on two GPUs (NCCL): the sharded op against the whole batch on one GPU, both layouts,
sequences crossing the part boundaries, with and without initial and final states (tests/test_context_parallel.py
runs the same check on the CPU)."""
import pytest
import torch
from test_context_parallel import check_sharded_run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]


@pytest.mark.parametrize("states", [False, True], ids=["no-states", "states"])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_sharded_run_on_two_gpus_matches_one(tmp_path, layout, states):
    cu = [0, 3000, 3001, 3001, 8192] if states else [0, 3000, 3001, 8192]     # with states: an empty sequence too
    check_sharded_run(tmp_path, layout, cu, "cuda", states=states)
