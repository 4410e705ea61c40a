# Session 19, run 6: the final tree's GPU tests (run 4's list): after review, the prepare's template comments and
# address arithmetic regrouped, and a user recurrence with four row inputs (the staging "registers" path) in
# tests/recurrence_cases.py, which tests/gpu/test_recurrence_op_gpu.py runs forward and backward on the GPU.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 300 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
grep -E "two_gate" $OUT/suite.log | head -3
