# Session 19, run 4: the tree to land (main with the prepare's row inputs staged in its tiles, GDN's bf16 tiles
# too): the GPU tests, an A/B of the wgmma64 forward's kernel times against main (trees copied beside the checkout
# under ab/, not kept; main first and last), then the bench at every default shape (README's table) in what is left.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
suite=$?
grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in main land main; do
  timeout 100 python3 ab/time_prepare.py ab/$tree 1x8192x64x128 4x4096x16x64 2>&1 | grep "^|"
done > $OUT/ab.md; cat $OUT/ab.md
left=$((585 - SECONDS))
echo "suite rc=$suite, $left s left for the bench"
if [ $suite -eq 0 ] && [ $left -gt 260 ]; then
  BENCH_SECONDS=$left bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 \
    > /dev/null 2>&1
  grep -E "^\[" $OUT/bench.log | tail -40; ls $OUT
fi
