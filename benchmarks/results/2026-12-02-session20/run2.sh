# Session 20, run 2: (1) the cold compile of the KDA lb inference forward unit on a fresh machine, a second sample
# for #11 point 4 (main); (2) branch wip-bf16-chunk-grads, now with chunk_bwd's bf16 rows stored 8 B per lane (a
# whole sector per quad), copied under ab/bf16 (not kept): its backward GPU tests, the training step's A/B against
# ab/main (main first and last), and Nsight Compute on its chunk_bwd (KDA lb, 1x8192x64x128; ncu_target.py copied
# into ab/bf16/benchmarks/probe so that it imports that tree).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
LB="--use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
timeout 60 python3 -m kdagen compile $LB --family wgmma64 --inference -j 1 > $OUT/compile.log 2>&1; cat $OUT/compile.log
(cd ab/bf16 && timeout 130 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py -k "not mma16" > $OUT/suite-bf16.log 2>&1)
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite-bf16.log | tail -6
for tree in main bf16 main; do
  timeout 60 python3 benchmarks/probe/ab_kernels.py ab/$tree --train 2>&1 | grep "^|"
done | tee $OUT/ab-train.md
cd ab/bf16 && KDAGEN_CUT=off KDAGEN_FAMILY=wgmma64 timeout 180 ncu --clock-control none --kernel-name regex:"^chunk_bwd\$" \
  --launch-skip 1 --launch-count 1 --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section LaunchStats -o /tmp/chunk_bwd -f python3 benchmarks/probe/ncu_target.py kda_lb 1 8192 64 128 1 \
  > $OUT/ncu.log 2>&1
ncu -i /tmp/chunk_bwd.ncu-rep --page details > $OUT/chunk_bwd-bf16-details.txt 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots|Registers Per" $OUT/chunk_bwd-bf16-details.txt
echo "total ${SECONDS} s"
