# Session 17, run 4: the gate on ex2/rcp.approx.ftz (sigmoid for every family, α in the wgmma64 prepare): the
# forward kernel tests and the ops end to end on the GPU; both families' forward at three shapes (the few-pairs
# limit); step clocks.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 280 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/test_runtime_ops_gpu.py > $OUT/suite.log 2>&1; grep -E "passed|failed|Error" $OUT/suite.log | tail -5
timeout 200 python3 benchmarks/probe/family_timing.py 1x8192x64x128 8x4096x32x128 4x4096x16x64 > $OUT/family.log 2>&1
grep "^| chunk" $OUT/family.log
timeout 60 python3 benchmarks/probe/step_clocks.py --ops kda_lb --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; grep -v Warn $OUT/steps.log | tail -9
