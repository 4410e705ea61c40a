# Session 19, run 1: the wgmma64 prepare on a persistent grid, its row inputs staged in its tiles one item ahead
# (KDA at K = 128): the GPU tests (both families' forward kernels, the wgmma64 backward, the ops end to end, the
# training cut, user recurrences, tf32 primitives), then each family's forward kernels timed at three shapes.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 300 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -12
KDAGEN_CUT=off timeout 200 python3 benchmarks/probe/family_timing.py > $OUT/family.log 2>&1
echo "family rc=$?"; grep -E "wgmma64|prepare|recurrence|shape|^\|" $OUT/family.log | head -60
