# Session 16, run 1: prepare_bwd's contractions as bf16 hi + lo mma.m16n8k16 products, dMqk and dMkk split once into
# tiles read by ldmatrix, the lower-bound gate factored about each block's middle row (GDN: the pair factors in dM as
# before). GPU tests of the wgmma64 backward, per-kernel times, and last session's failing chunk_bwd seed.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
timeout 150 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn,kda --shapes 1x8192x64x128,1x32768x16x128 \
  > $OUT/timing.log 2>&1; cut -c1-240 $OUT/backward_timing.md
timeout 100 python3 benchmarks/probe/chunk_rows.py kda_lb_k128 56718244 > $OUT/chunk-rows.log 2>&1
cat $OUT/chunk-rows.log | tail -12
