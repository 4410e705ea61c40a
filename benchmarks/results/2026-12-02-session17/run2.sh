# Session 17, run 2: the forward prepare in fewer instructions (row segments for the C×C steps, Mqk as bf16 pairs,
# tf32 row side rounded once, two channels per thread in factors): the forward GPU tests, per-kernel times, step
# clocks, Nsight Compute for the lower-bound gate.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_tf32_primitives_gpu.py > $OUT/suite.log 2>&1; grep -E "passed|failed|Error" $OUT/suite.log | tail -5
timeout 150 python3 benchmarks/probe/family_timing.py 1x8192x64x128 > $OUT/family.log 2>&1; grep "^| chunk" $OUT/family.log
timeout 100 python3 benchmarks/probe/step_clocks.py --ops kda_lb,kda,gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; grep -v Warn $OUT/steps.log | tail -30
op=kda_lb
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 150 ncu --clock-control none --kernel-name regex:prepare --launch-skip 1 \
  --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -o /tmp/$op -f \
  python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 0 > /dev/null 2>&1
ncu -i /tmp/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
ncu -i /tmp/$op.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$op-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$op-sass.csv.gz 150 > $OUT/$op-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|DRAM Throughput" $OUT/$op-details.txt
sed -n 1,1p $OUT/$op-summary.md; grep -A9 "| stall |" $OUT/$op-summary.md
