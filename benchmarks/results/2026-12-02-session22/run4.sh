# Session 22, run 4 (the final kernels: run 2's, the q/k adjoint unrolled by two at every head dim; the tensor-map
# slots and the K = 64 ranking of run 1): the GPU tests of the forward and backward kernels, the ops and user
# recurrences; the bench at every default shape for the README's table (carry: .whl, .tcache); tests/test_sass.py.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_recurrence_op_gpu.py \
  tests/gpu/test_tensormap_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
BENCH_SECONDS=330 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 \
  > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -3; ls $OUT
timeout 45 python3 -m pytest -q -rsfE --tb=short -p no:cacheprovider tests/test_sass.py > $OUT/sass.log 2>&1
echo "sass rc=$?"; grep -E "[0-9]+ (passed|failed|skipped)|^(FAILED|ERROR|SKIPPED)" $OUT/sass.log | tail -8
echo "total ${SECONDS} s"
