# Session 17, run 6: the bench at every default shape on the final tree (README's table is rendered from it)
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
BENCH_SECONDS=500 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -40; ls $OUT
