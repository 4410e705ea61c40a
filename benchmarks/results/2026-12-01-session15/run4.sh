# Session 15, run 4: split compile against plain in one process (fresh sources); the bench at every default shape
# under the final ranking (training calls at head dim 128 on wgmma64, cut by the planner's model)
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
git log -1 --format=%h > $OUT/env.log 2>&1
timeout 90 python3 benchmarks/probe/compile_split.py > $OUT/compile-split.md 2>&1; cat $OUT/compile-split.md
BENCH_SECONDS=450 bash benchmarks/device_bench.sh --modes fwd,fwd+bwd --repeats 1 --iters 10 --input-sets 2 > /dev/null 2>&1
grep -E "^\[" $OUT/bench.log | tail -40; ls $OUT
