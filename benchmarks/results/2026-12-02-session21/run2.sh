# Session 21, run 2: the softplus diagonal's reduce-scatter stores and GDN's recurrence on q and k as loaded (qk
# "raw", ws_row_factors) — the working tree; main (131a26f) under ab/main (not kept). The GPU tests (forward,
# backward, ops, user recurrences, segments' training cut, math, SASS); the A/B of the inference forward and the
# training step against main (main first and last); family_timing at 1x8192x64x128 and 8x4096x32x128 (does GDN's
# inference at 256 pairs now rank wgmma64 first?); GDN's and softplus's prepare step clocks.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py tests/gpu/test_math_functions_gpu.py -k "not mma16" \
  > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
timeout 120 python3 -m pytest -q -rsfE --tb=short -p no:cacheprovider tests/test_sass.py > $OUT/sass.log 2>&1
echo "sass rc=$?"; grep -E "[0-9]+ (passed|failed|skipped)|^(FAILED|ERROR|SKIPPED)" $OUT/sass.log | tail -8
for tree in ab/main . ab/main; do
  timeout 60 python3 benchmarks/probe/ab_kernels.py $tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|"
done | tee $OUT/ab-fwd.md
for tree in ab/main . ab/main; do
  timeout 90 python3 benchmarks/probe/ab_kernels.py $tree --train 2>&1 | grep "^|"
done | tee $OUT/ab-train.md
timeout 150 python3 benchmarks/probe/family_timing.py 1x8192x64x128 8x4096x32x128 > $OUT/family_timing.log 2>&1
tail -30 $OUT/family_timing.log
KDAGEN_CUT=off timeout 60 python3 benchmarks/probe/step_clocks.py --ops kda,gdn --shape 1x8192x64x128 \
  --kernel prepare > $OUT/steps.log 2>&1; cat $OUT/steps.log
echo "total ${SECONDS} s"
