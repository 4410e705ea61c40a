# Session 19, run 5 (profiles, no kernel change): (1) the cold compile of the KDA lb inference forward on a fresh
# machine after this session's prepare (#11 point 4); (2) Nsight Compute on the training step's chunk_bwd and dstate
# (KDA lb, 1x8192x64x128): where the backward's other kernels spend their time, for the next session's choice.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
LB="--use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
timeout 60 python3 -m kdagen compile $LB --family wgmma64 --inference -j 1 > $OUT/compile.log 2>&1; cat $OUT/compile.log
for name in chunk_bwd dstate; do
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 180 ncu --clock-control none --kernel-name regex:"^${name}\$" \
  --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o /tmp/$name -f python3 benchmarks/probe/ncu_target.py kda_lb 1 8192 64 128 1 > /dev/null 2>&1
ncu -i /tmp/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$name-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$name-sass.csv.gz 150 > $OUT/$name-summary.md 2>&1
echo "== $name"; grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|DRAM Throughput|Registers Per|Grid Size|Block Size|Dynamic Shared" $OUT/$name-details.txt
grep -A10 "| stall |" $OUT/$name-summary.md
done
