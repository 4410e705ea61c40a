# Session 20, run 1: two CPU-built branches on the GPU in one call. Trees copied beside the checkout under ab/ (not
# kept): ab/main = main, ab/bf16 = wip-bf16-chunk-grads (chunk_bwd's three [C, K] gradient workspaces in bf16,
# prepare_bwd's branch_grads loads asked ahead), ab/unm = wip-prologue-unmasked (the forward prologue without
# tail-row selects): each branch's GPU tests from its own tree, then A/Bs with benchmarks/probe/ab_kernels.py
# (main first and last): the training step for bf16, the inference forward for unm.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
root=$PWD
suite() {  # tree, log, test paths...
  local tree=$1 log=$2; shift 2
  (cd $tree && timeout 130 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider "$@" -k "not mma16" \
    > $OUT/$log 2>&1); echo "$log rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/$log | tail -6
}
suite ab/bf16 suite-bf16.log tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py
suite ab/unm suite-unm.log tests/gpu/test_forward_kernels.py tests/test_runtime_ops_gpu.py
for tree in main bf16 main; do
  timeout 60 python3 benchmarks/probe/ab_kernels.py ab/$tree --train 2>&1 | grep "^|"
done | tee $OUT/ab-train.md
for tree in main unm main; do
  timeout 60 python3 benchmarks/probe/ab_kernels.py ab/$tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|"
done | tee $OUT/ab-fwd.md
echo "total ${SECONDS} s"
