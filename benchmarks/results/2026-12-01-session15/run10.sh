# Session 15, run 10: prepare_bwd's next-wave prefetch as line prefetches from every thread (run 5's bulk form was
# slower): GPU tests, then the time with and without
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
timeout 100 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py > $OUT/suite.log 2>&1; tail -2 $OUT/suite.log
timeout 90 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x8192x64x128 > /dev/null 2>&1
mv $OUT/backward_timing.md $OUT/timing-line-prefetch.md; cut -c1-200 $OUT/timing-line-prefetch.md
sed -i 's/^PREFETCH_AHEAD = True/PREFETCH_AHEAD = False/' kdagen/plan/families/wgmma64/backward.py
KDAGEN_CACHE_DIR=/tmp/kc-b timeout 90 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x8192x64x128 > /dev/null 2>&1
mv $OUT/backward_timing.md $OUT/timing-no-prefetch.md; cut -c1-200 $OUT/timing-no-prefetch.md
