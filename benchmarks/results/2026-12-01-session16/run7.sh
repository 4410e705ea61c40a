# Session 16, run 7: the final tree (after review)'s GPU tests — the wgmma64 backward's kernel tests (prepare_bwd's tensor-core form,
# chunk_bwd's rows against their terms), the ops end to end, the wgmma64 training cut at T = 65536, the user
# recurrences (three head parameters at K = 128 on wgmma64), the SASS and ptxas checks — and the per-kernel times.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
timeout 330 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider -s tests/gpu/test_wgmma64_backward_gpu.py \
  tests/test_runtime_ops_gpu.py "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_sass.py -k "not mma16" > $OUT/suite.log 2>&1
grep -E "^\[|passed|failed|Error" $OUT/suite.log | tail -8
KDAGEN_CUT=off timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn,kda \
  --shapes 1x8192x64x128,1x32768x16x128 > $OUT/timing.log 2>&1; cut -c1-200 $OUT/backward_timing.md
