# Session 23, run 4 (the final tree, after review: the kernels' code as run 3's but for one comment; the backward's
# programs named per kernel): the GPU tests of the forward and backward kernels, the ops end to end (per-kernel
# modules), the training cut, user recurrences, tensor maps, the math functions.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 300 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tensormap_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/gpu/test_math_functions_gpu.py tests/test_runtime.py -k "not mma16" \
  > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
echo "total ${SECONDS} s"
