# Session 15, run 6: Nsight Compute on prepare_bwd of GDN (the tensor-core form) and KDA lb (the CUDA-core form),
# training step at 1x8192x64x128: where each spends its time, for the rewrite's design
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
for op in gdn kda_lb; do
  KDAGEN_LINEINFO=1 timeout 200 ncu --clock-control none --kernel-name prepare_bwd --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section ComputeWorkloadAnalysis -o $OUT/$op -f python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 1 > /dev/null 2>&1
  ncu -i $OUT/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
  ncu -i $OUT/$op.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > /tmp/$op-sass.csv.gz
  python3 benchmarks/probe/sass_summary.py /tmp/$op-sass.csv.gz 300 > $OUT/$op-summary.md 2>&1
  rm -f $OUT/$op.ncu-rep
  grep -E "Duration|Registers Per|Achieved Occ|Executed Ipc A|Issue Slots Busy|Eligible Warps|No Eligible" $OUT/$op-details.txt
  sed -n 1,4p $OUT/$op-summary.md; grep -A9 "| stall |" $OUT/$op-summary.md
done
cp /tmp/gdn-sass.csv.gz $OUT/
