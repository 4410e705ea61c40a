# Session 21, run 1: softplus on the special-function unit (templates/common/math.cuh) — the working tree; main
# (131a26f) copied under ab/main (not kept). (1) The GPU tests of the forward and backward kernels, the ops, user
# recurrences (per_head_gate_k128_wgmma64's first GPU run), the math probe on the hardware's MUFU; tests/test_sass.py
# where cuobjdump exists (#11 point 3); (2) the A/B of the inference forward's and the training step's kernels
# against main (main first and last); (3) the softplus prepare's step clocks.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py tests/gpu/test_math_functions_gpu.py -k "not mma16" \
  > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
which cuobjdump nvcc
timeout 150 python3 -m pytest -q -rsfE --tb=short -p no:cacheprovider tests/test_sass.py > $OUT/sass.log 2>&1
echo "sass rc=$?"; grep -E "[0-9]+ (passed|failed|skipped)|^(FAILED|ERROR|SKIPPED)" $OUT/sass.log | tail -8
for tree in ab/main . ab/main; do
  timeout 60 python3 benchmarks/probe/ab_kernels.py $tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|"
done | tee $OUT/ab-fwd.md
for tree in ab/main . ab/main; do
  timeout 90 python3 benchmarks/probe/ab_kernels.py $tree --train 2>&1 | grep "^|"
done | tee $OUT/ab-train.md
KDAGEN_CUT=off timeout 60 python3 benchmarks/probe/step_clocks.py --ops kda --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; cat $OUT/steps.log
echo "total ${SECONDS} s"
