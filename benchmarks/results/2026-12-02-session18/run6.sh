# Session 18, run 6: the final tree's GPU tests (both families' forward kernels, the wgmma64 backward, the ops end
# to end, the training cut at T = 65536, user recurrences, tf32 primitives), then the bench at every default shape
# (README's table) in what is left of the call's 600 s.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
suite=$?
grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
left=$((585 - SECONDS))
echo "suite rc=$suite, $left s left for the bench"
if [ $suite -eq 0 ] && [ $left -gt 270 ]; then
  BENCH_SECONDS=$left bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 \
    > /dev/null 2>&1
  grep -E "^\[" $OUT/bench.log | tail -40; ls $OUT
fi
