# Session 15, run 5 (a fresh machine): the cold compile of a training configuration with its units side by side;
# the GPU tests of the changed kernels and the ops (the backward compiled ahead); prepare_bwd with and without the
# prefetch of the next wave's inputs
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
LB="--op kda --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
python3 -m kdagen compile $LB --pairs 64 -j 4 > $OUT/compile-j4.log 2>&1; grep -v "^compiling" $OUT/compile-j4.log
timeout 240 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/gpu/test_tensormap_gpu.py tests/test_runtime_ops_gpu.py > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
KDAGEN_CUT=off timeout 100 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x8192x64x128 > /dev/null 2>&1
mv $OUT/backward_timing.md $OUT/timing-prefetch.md; cut -c1-200 $OUT/timing-prefetch.md
sed -i 's/^PREFETCH_AHEAD = True/PREFETCH_AHEAD = False/' kdagen/plan/families/wgmma64/backward.py
KDAGEN_CACHE_DIR=/tmp/kc-b KDAGEN_CUT=off timeout 100 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x8192x64x128 > /dev/null 2>&1
mv $OUT/backward_timing.md $OUT/timing-no-prefetch.md; cut -c1-200 $OUT/timing-no-prefetch.md
