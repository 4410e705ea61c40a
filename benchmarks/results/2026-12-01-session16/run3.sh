# Session 16, run 3: prepare_bwd's tensor-core form with each row block's operand built once per value head (the
# block pairs unrolled, every block's sums live); GPU tests, per-kernel times.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn --shapes 1x8192x64x128,1x32768x16x128 \
  > $OUT/timing.log 2>&1; cut -c1-200 $OUT/backward_timing.md
