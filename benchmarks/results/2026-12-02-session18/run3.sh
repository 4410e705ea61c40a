# Session 18, run 3: the forward prepare's tf32 fragments by ldmatrix (blocks step): the forward kernel tests and
# the tf32 primitives on the GPU, both families' forward times at 1x8192x64x128; then Nsight Compute on the
# prepare (inference) and on prepare_bwd (training step), KDA lb, with SASS samples: where their instructions go.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_tf32_primitives_gpu.py > $OUT/suite.log 2>&1; grep -E "passed|failed|Error" $OUT/suite.log | tail -5
timeout 150 python3 benchmarks/probe/family_timing.py 1x8192x64x128 > $OUT/family.log 2>&1; grep wgmma64 $OUT/family.log
for kind in prepare:0 prepare_bwd:1; do
name=${kind%:*}; train=${kind#*:}
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 150 ncu --clock-control none --kernel-name regex:"^${name}\$" \
  --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o /tmp/$name -f python3 benchmarks/probe/ncu_target.py kda_lb 1 8192 64 128 $train > /dev/null 2>&1
ncu -i /tmp/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$name-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$name-sass.csv.gz 150 > $OUT/$name-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|DRAM Throughput" $OUT/$name-details.txt
sed -n 1,1p $OUT/$name-summary.md
done
