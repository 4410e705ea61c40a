# Session 23, run 1: branch s23 = main (abcccf3) + wip-pair-tiles (the tf32 prepare's blocks by (block pair, n-tile)
# tasks) + wip-backward-per-kernel (the backward's kernels as one NVRTC program each, compiled side by side); main
# under ab/main (not kept). The GPU tests on s23, the inference forward's A/B (main first and last), the prepare's
# step clocks, and cold compiles on fresh caches (#11 point 4, #12 point 5).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
LB="--use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
KDAGEN_CACHE_DIR=/tmp/cold-fwd timeout 40 python3 -m kdagen compile $LB --family wgmma64 --inference -j 1 \
  > $OUT/compile-fwd.log 2>&1; cat $OUT/compile-fwd.log
KDAGEN_CACHE_DIR=/tmp/cold-train timeout 60 python3 -m kdagen compile $LB --family wgmma64 --pairs 64 \
  > $OUT/compile-train.log 2>&1; cat $OUT/compile-train.log
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tensormap_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/gpu/test_math_functions_gpu.py tests/test_runtime.py -k "not mma16" \
  > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ab/main; do
  timeout 90 python3 benchmarks/probe/ab_kernels.py $tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|"
done | tee $OUT/ab-fwd.md
timeout 90 python3 benchmarks/probe/step_clocks.py --kernel prepare --ops kda_lb,kda --shape 1x8192x64x128 \
  > $OUT/steps-prepare.log 2>&1
grep -v "^\s*$" $OUT/steps-prepare.log | head -40
echo "total ${SECONDS} s"
