# Session 22, run 3: run 2's tree with prepare_bwd's reverse_cumsum on every lane (a lane per (channel, row block),
# the later blocks' sums by shuffles) and the factored block_factors on every thread; main (f7f138d) under ab/main
# (not kept). The GPU tests, the A/B of the training step (main first and last), prepare_bwd's step clocks.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ab/main; do
  timeout 120 python3 benchmarks/probe/ab_kernels.py $tree --train 2>&1 | grep "^|"
done | tee $OUT/ab-train.md
timeout 150 python3 benchmarks/probe/step_clocks.py --train --kernel prepare_bwd --ops kda_lb,gdn \
  --shape 1x8192x64x128 > $OUT/steps-prepare_bwd.log 2>&1
cat $OUT/steps-prepare_bwd.log | grep -v "^\s*$" | head -40
echo "total ${SECONDS} s"
