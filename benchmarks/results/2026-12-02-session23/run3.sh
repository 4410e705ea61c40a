# Session 23, run 3 (the final kernels, e7a65f2's tree: run 2's prepare_bwd at head dim 64, the backward compiled per
# kernel): the bench at every default shape for the README's table (carry: .whl, .tcache); tests/test_sass.py
# (HGMMA, UTMALDG, no local memory, the plan's quotas in the SASS: cuobjdump exists on the device).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
BENCH_SECONDS=330 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 \
  > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -3; ls $OUT
timeout 120 python3 -m pytest -q -rsfE --tb=short -p no:cacheprovider tests/test_sass.py > $OUT/sass.log 2>&1
echo "sass rc=$?"; grep -E "[0-9]+ (passed|failed|skipped)|^(FAILED|ERROR|SKIPPED)" $OUT/sass.log | tail -8
echo "total ${SECONDS} s"
