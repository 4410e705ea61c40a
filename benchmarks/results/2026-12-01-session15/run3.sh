# Session 15, run 3: cold compile (NVRTC's split compile); the wgmma64 training cut's timing and bench at the few-pair
# shapes; the tensor-map encoding from a thread with no CUDA work yet
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
git log -1 --format=%h > $OUT/env.log 2>&1
LB="--op kda --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
python3 -m kdagen compile $LB --pairs 64 -j 1 > $OUT/compile-train-j1.log 2>&1; tail -7 $OUT/compile-train-j1.log
KDAGEN_CACHE_DIR=/tmp/kc-inf python3 -m kdagen compile $LB --pairs 64 --inference -j 1 > $OUT/compile-inference-j1.log 2>&1; tail -4 $OUT/compile-inference-j1.log
timeout 100 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_tensormap_gpu.py > $OUT/suite.log 2>&1; tail -2 $OUT/suite.log
KDAGEN_FAMILY=wgmma64 timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x65536x4x128,1x32768x16x128 > $OUT/timing-wgmma64.log 2>&1
mv $OUT/backward_timing.md $OUT/timing-wgmma64.md; cut -c1-400 $OUT/timing-wgmma64.md
KDAGEN_FAMILY=wgmma64 BENCH_SECONDS=300 bash benchmarks/device_bench.sh --ops kda_lb,kda,gdn --modes fwd+bwd --shapes 1x65536x4x128,1x32768x16x128 --repeats 1 --iters 10 --input-sets 2 --no-accuracy > /dev/null 2>&1
grep -E "fwd\+bwd \||Error|error" $OUT/bench.log | grep -v "^|.*accuracy" | head -20; ls $OUT
