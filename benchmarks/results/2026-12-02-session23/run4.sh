# Session 23, run 4 (the final tree, after review: the kernels' code as run 3's but for one comment; the backward's
# programs named per kernel, their threads joined as the review asked): the backward kernels' GPU tests (the K = 64
# two-CTA prepare_bwd among them), the ops end to end (the backward through per-kernel modules) and the runtime's
# GPU tests. Trimmed to what the review touched: three refused calls had left ≈ 350 s of device time.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 140 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/test_runtime_ops_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
echo "total ${SECONDS} s"
