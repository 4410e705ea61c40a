# Session 20, run 5 (the tree of 333eadb: this session's three landings and GDN's "raw" operands): the bench at every
# default shape, for the README's table. Run as one command on the machine run 4 left warm (carry: .whl, .tcache):
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
BENCH_SECONDS=420 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 \
  > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -5; ls $OUT
