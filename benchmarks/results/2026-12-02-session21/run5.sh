# Session 21, run 5: the final tree's kernels after review (softplus with −|x| clamped and NaN passed through; the
# rest as run 3 but for comments) — the GPU tests of the forward and backward kernels, the ops, user recurrences and
# the math probe, then tests/test_sass.py (now with the entries units and GDN's K = 128 forward).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_recurrence_op_gpu.py \
  tests/gpu/test_math_functions_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
timeout 90 python3 -m pytest -q -rsfE --tb=short -p no:cacheprovider tests/test_sass.py > $OUT/sass.log 2>&1
echo "sass rc=$?"; grep -E "[0-9]+ (passed|failed|skipped)|^(FAILED|ERROR|SKIPPED)" $OUT/sass.log | tail -8
echo "total ${SECONDS} s"
