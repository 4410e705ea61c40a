# Session 23, run 2: prepare_bwd at head dim 64 two CTAs per SM (the tensor-core form's 8 warps; dgc over the split dM
# tiles after one more barrier; launch bounds (256, 2): 128 registers, no spill by ptxas), on the working tree; main
# (abcccf3, the same kernels as 5294b34) under ab/main (not kept). The backward GPU tests (gdn_softplus_k64 among
# them), the training step's A/B at head dim 64 and 128 (main first and last), prepare_bwd's step clocks at K = 64.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/test_runtime_ops_gpu.py "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ab/main; do
  timeout 100 python3 benchmarks/probe/ab_kernels.py $tree --train 4x4096x16x64 1x8192x64x128 2>&1 | grep "^|"
done | tee $OUT/ab-train.md
timeout 90 python3 benchmarks/probe/step_clocks.py --train --kernel prepare_bwd --ops kda_lb,gdn --shape 4x4096x16x64 \
  > $OUT/steps-prepare_bwd.log 2>&1
grep -v "^\s*$" $OUT/steps-prepare_bwd.log | head -30
echo "total ${SECONDS} s"
