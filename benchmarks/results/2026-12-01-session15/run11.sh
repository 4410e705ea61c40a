# Session 15, run 11: the final tree's GPU tests (the wgmma64 backward kernels with dstate's entry point, the ops end
# to end with the backward compiled ahead on a daemon thread, the wgmma64 training cut at T = 65536)
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
timeout 290 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider -s tests/gpu/test_wgmma64_backward_gpu.py \
  tests/test_runtime_ops_gpu.py "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  -k "not mma16" > $OUT/suite.log 2>&1; grep -E "^\[|passed|failed|Error" $OUT/suite.log | tail -8
