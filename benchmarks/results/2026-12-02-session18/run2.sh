# Session 18, run 2: (1) the cold compile of the KDA lb inference forward on a fresh machine (#11 point 4, after
# session 17's smaller prepare); (2) where the wgmma64 recurrence's chunk step goes (inference at 1x8192x64x128,
# KDA lb and GDN): per-step clocks of the first consumer thread and Nsight Compute with SASS samples.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
LB="--use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
timeout 60 python3 -m kdagen compile $LB --family wgmma64 --inference -j 1 > $OUT/compile.log 2>&1; cat $OUT/compile.log
timeout 100 python3 benchmarks/probe/step_clocks.py --ops kda_lb,gdn --shape 1x8192x64x128 --kernel recurrence \
  --thread 128 > $OUT/steps.log 2>&1; grep -v Warn $OUT/steps.log | tail -30
for op in kda_lb; do
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 150 ncu --clock-control none --kernel-name regex:recurrence \
  --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o /tmp/$op -f python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 0 > /dev/null 2>&1
ncu -i /tmp/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
ncu -i /tmp/$op.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$op-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$op-sass.csv.gz 100 > $OUT/$op-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|Memory Throughput|DRAM Throughput" $OUT/$op-details.txt
sed -n 1,1p $OUT/$op-summary.md; grep -A10 "| stall |" $OUT/$op-summary.md; grep -A40 "| stretch |" $OUT/$op-summary.md
done
