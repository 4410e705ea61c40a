"""Context parallelism on two GPUs (NCCL): the sharded op against the whole batch on one GPU, both layouts,
sequences crossing the part boundaries (tests/test_context_parallel.py runs the same check on the CPU)."""
import pytest
import torch
from test_context_parallel import check_sharded_run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_sharded_run_on_two_gpus_matches_one(tmp_path, layout):
    check_sharded_run(tmp_path, layout, [0, 3000, 3001, 8192], "cuda")
