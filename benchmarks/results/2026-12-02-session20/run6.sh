# Session 20, run 6: GDN's "raw" Mqk and Mkk as wgmma chains (a warp group per product over q, k as loaded in
# swizzled tiles) where run 4's form issued 20 mma.sync tiles over 8 warps: the final tree's GPU tests (session 19's
# run 6 list), the A/B of the inference forward's kernels against 98734d5 (run 4's form, copied under ab/main, not
# kept; first and last), and GDN's step clocks.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ab/main; do
  timeout 45 python3 benchmarks/probe/ab_kernels.py $tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|" | grep gdn
done | tee $OUT/ab.md
KDAGEN_CUT=off timeout 40 python3 benchmarks/probe/step_clocks.py --ops gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; cat $OUT/steps.log
echo "total ${SECONDS} s"
