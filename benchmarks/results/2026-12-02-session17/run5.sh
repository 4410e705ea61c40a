# Session 17, run 5: the final tree's GPU tests (wgmma64 forward and backward kernels, ops end to end, the training
# cut at T = 65536, user recurrences, tf32 primitives) and prepare_bwd's times (its adjoint passes rolled again).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 330 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
grep -E "passed|failed|Error" $OUT/suite.log | tail -8
KDAGEN_CUT=off timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn,kda \
  --shapes 1x8192x64x128,1x32768x16x128 > $OUT/timing.log 2>&1; cut -c1-200 $OUT/backward_timing.md
