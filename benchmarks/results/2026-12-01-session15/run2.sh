# Session 15, run 2: cold compile with NVRTC's split compile; the wgmma64 training cut's GPU tests and timing
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
git log -1 --format=%h > $OUT/env.log 2>&1
LB="--op kda --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
kdagen compile $LB --pairs 64 -j 1 > $OUT/compile-train-j1.log 2>&1; tail -7 $OUT/compile-train-j1.log
KDAGEN_CACHE_DIR=/tmp/kc-inf kdagen compile $LB --pairs 64 --inference -j 1 > $OUT/compile-inference-j1.log 2>&1; tail -4 $OUT/compile-inference-j1.log
timeout 300 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider -s tests/gpu/test_segments_gpu.py -k training \
  tests/gpu/test_wgmma64_backward_gpu.py > $OUT/suite.log 2>&1; grep -E "^\[|passed|failed|Error" $OUT/suite.log | tail -20
for fam in wgmma64 mma16; do
  KDAGEN_FAMILY=$fam timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x65536x4x128,1x32768x16x128 > $OUT/timing-$fam.log 2>&1
  cp $OUT/backward_timing.md $OUT/timing-$fam.md 2>/dev/null; cat $OUT/timing-$fam.md
done
rm -f $OUT/backward_timing.md
