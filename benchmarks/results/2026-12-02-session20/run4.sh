# Session 20, run 4: GDN's prepare multiplying q and k as loaded (operands "raw": one bf16 product per block, the
# l2norms' numbers per row applied to the results) where it ran three (hi + lo) — the working tree; main before it
# copied under ab/main (not kept). The GPU tests of the forward kernels, the ops and user recurrences (a new one,
# channel_scaled_query, keeps the "split" form), the A/B of the inference forward's kernels (main first and last),
# then the prepare's step clocks for GDN.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/test_runtime_ops_gpu.py tests/gpu/test_recurrence_op_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ab/main; do
  timeout 60 python3 benchmarks/probe/ab_kernels.py $tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|"
done | tee $OUT/ab.md
KDAGEN_CUT=off timeout 60 python3 benchmarks/probe/step_clocks.py --ops gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; cat $OUT/steps.log
echo "total ${SECONDS} s"
