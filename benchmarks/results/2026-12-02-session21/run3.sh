# Session 21, run 3: off the chain — the recurrence's Sᵀ decay (and raw q's scaling) during the solve, the update's
# scaled operand during the output's products, dstate's dSᵀ decay during dXᵀ's — on run 2's tree less the softplus
# diagonal change (reverted); GDN's inference at any number of pairs on wgmma64. The working tree; main (131a26f)
# under ab/main (not kept). The GPU tests, tests/test_sass.py, the A/B of the inference forward and the training step
# against main (main first and last), family_timing at 4x4096x16x64 and 8x4096x32x128.
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
timeout 120 python3 benchmarks/probe/family_timing.py 4x4096x16x64 8x4096x32x128 > $OUT/family_timing.log 2>&1
grep "^|" $OUT/family_timing.log
echo "total ${SECONDS} s"
