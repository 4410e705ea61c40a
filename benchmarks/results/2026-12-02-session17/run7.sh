# Session 17, run 7: the bench at every default shape after the ranking by decay kind (KDA's inference calls at head
# dim 128 rank wgmma64 first at any number of pairs); README's table is rendered from it. Kernels as run 6.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
BENCH_SECONDS=420 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -40; ls $OUT
