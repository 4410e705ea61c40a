# Session 19, run 2: why run 1's prepare did not move. Its time on the planned persistent grid against one CTA per
# item (the same kernel: nothing loaded ahead), then Nsight Compute on the persistent prepare (KDA lb, inference,
# 1x8192x64x128) with SASS samples: where its stalls went once the row inputs were loaded one item ahead.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 200 python3 benchmarks/probe/prepare_grid.py > $OUT/prepare_grid.md 2>&1; cat $OUT/prepare_grid.md | tail -8
name=prepare
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 200 ncu --clock-control none --kernel-name regex:"^${name}\$" \
  --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o /tmp/$name -f python3 benchmarks/probe/ncu_target.py kda_lb 1 8192 64 128 0 > /dev/null 2>&1
ncu -i /tmp/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$name-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$name-sass.csv.gz 150 > $OUT/$name-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|DRAM Throughput|Registers Per|Grid Size" $OUT/$name-details.txt
head -40 $OUT/$name-summary.md
