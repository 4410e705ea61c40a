# Session 16, run 4: (A) run 3's prepare_bwd; (B) its q/k passes unrolled (both passes' loads in flight); Nsight
# Compute on B.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn --shapes 1x8192x64x128,1x32768x16x128 \
  > $OUT/timing.log 2>&1; mv $OUT/backward_timing.md $OUT/timing-A.md; cut -c1-200 $OUT/timing-A.md
sed -i 's|{% set pass_unroll = "#pragma unroll 1" %}|{% set pass_unroll = "#pragma unroll" if mma else "#pragma unroll 1" %}|' \
  templates/wgmma64/prepare_bwd.cu.j2
grep -n "set pass_unroll" templates/wgmma64/prepare_bwd.cu.j2
export KDAGEN_CACHE_DIR=/tmp/kc-b
timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn --shapes 1x8192x64x128,1x32768x16x128 \
  > $OUT/timing.log 2>&1; mv $OUT/backward_timing.md $OUT/timing-B.md; cut -c1-200 $OUT/timing-B.md
op=kda_lb
KDAGEN_LINEINFO=1 timeout 200 ncu --clock-control none --kernel-name prepare_bwd --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section ComputeWorkloadAnalysis -o /tmp/$op -f python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 1 > /dev/null 2>&1
ncu -i /tmp/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
ncu -i /tmp/$op.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$op-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$op-sass.csv.gz 200 > $OUT/$op-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ" $OUT/$op-details.txt
sed -n 1,1p $OUT/$op-summary.md; grep -A9 "| stall |" $OUT/$op-summary.md; grep -A20 "| stretch |" $OUT/$op-summary.md
