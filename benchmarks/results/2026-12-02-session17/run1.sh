# Session 17, run 1: where the wgmma64 forward prepare's time goes now (inference at 1x8192x64x128): per-kernel
# times of both families, per-step clocks, Nsight Compute with SASS samples for the lower-bound and softplus gates.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 150 python3 benchmarks/probe/family_timing.py 1x8192x64x128 > $OUT/family.log 2>&1; tail -40 $OUT/family.log
timeout 100 python3 benchmarks/probe/step_clocks.py --ops kda_lb,kda,gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; cat $OUT/steps.log | tail -40
for op in kda_lb kda; do
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 150 ncu --clock-control none --kernel-name regex:prepare --launch-skip 1 \
  --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -o /tmp/$op -f \
  python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 0 > /dev/null 2>&1
ncu -i /tmp/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
ncu -i /tmp/$op.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$op-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$op-sass.csv.gz 150 > $OUT/$op-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|Memory Throughput|DRAM Throughput" $OUT/$op-details.txt
sed -n 1,1p $OUT/$op-summary.md; grep -A9 "| stall |" $OUT/$op-summary.md; grep -A30 "| stretch |" $OUT/$op-summary.md
done
