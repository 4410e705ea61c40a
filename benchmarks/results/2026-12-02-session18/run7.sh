# Session 18, run 7 (a profile, no kernel change): are the backward's chunk_bwd and dstate bound by memory at 64
# pairs? Nsight Compute on each in a KDA lb training step at 1x8192x64x128 (uncut).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
for name in chunk_bwd dstate; do
KDAGEN_FAMILY=wgmma64 timeout 80 ncu --clock-control none --kernel-name regex:"^${name}\$" --launch-skip 1 \
  --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  -o /tmp/$name -f python3 benchmarks/probe/ncu_target.py kda_lb 1 8192 64 128 1 > /dev/null 2>&1
ncu -i /tmp/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
echo "== $name"; grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occ|Compute \(SM\) Thr" $OUT/$name-details.txt
done
