export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
git log -1 --format=%h > $OUT/env.log 2>&1; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv >> $OUT/env.log
timeout 150 python3 benchmarks/probe/backward_timing.py --ops kda_lb,kda,gdn --shapes 1x8192x64x128,1x32768x16x128 > $OUT/timing.log 2>&1; tail -60 $OUT/timing.log | grep -E "prepare|chunk_bwd|dstate|recurrence|step|shape|op" | head -60
for op in kda_lb kda; do
  KDAGEN_LINEINFO=1 timeout 170 ncu --clock-control none --kernel-name regex:'^prepare' --launch-skip 2 --launch-count 2 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
    -o $OUT/$op -f python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 1 > $OUT/ncu-$op.log 2>&1
  ncu -i $OUT/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
  for k in prepare prepare_bwd; do
    ncu -i $OUT/$op.ncu-rep --kernel-name $k --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$op-$k-sass.csv.gz
    python3 benchmarks/probe/sass_summary.py $OUT/$op-$k-sass.csv.gz 300 > $OUT/$op-$k-summary.md 2>&1; head -30 $OUT/$op-$k-summary.md
  done
  rm -f $OUT/$op.ncu-rep
done
grep -E "prepare|Duration|Registers|Achieved Occ|Issued Ipc|Executed Ipc" $OUT/*details.txt | head -40
