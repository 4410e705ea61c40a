# Session 22, run 1: tensor maps as slots of the prepared launches (the wgmma64 calls' host path), on the working
# tree; main (f7f138d) under ab/main (not kept). The GPU tests (the tensor-map encodings among them), family_timing
# (CUDA events around a call, host included) on both trees at head dim 64 (64 and 256 pairs) and 128, and the step
# clocks of prepare_bwd in a training step (step_clocks.py --train).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tensormap_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ; do
  echo "== $tree"
  timeout 150 python3 $tree/benchmarks/probe/family_timing.py 4x4096x16x64 8x4096x32x64 1x8192x64x128 2>&1 | grep "^|"
done | tee $OUT/family_timing.md   # (family_timing.py rewrites this file itself: see run1-family_timing.md)
timeout 150 python3 benchmarks/probe/step_clocks.py --train --kernel prepare_bwd --ops kda_lb,kda,gdn \
  --shape 1x8192x64x128 > $OUT/steps-prepare_bwd.log 2>&1
cat $OUT/steps-prepare_bwd.log | grep -v "^\s*$" | head -60
echo "total ${SECONDS} s"
