# Session 21, run 4 (run 3's tree): the bench at every default shape, for the README's table. Run on the machine
# run 3 left warm (carry: .whl, .tcache):
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
BENCH_SECONDS=420 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 \
  > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -5; ls $OUT
