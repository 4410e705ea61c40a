# Session 20, run 3: (1) the GPU tests of main with both of this session's landings (session 19's run 6 list; the
# landed chunk_bwd hoists its bf16 row base, which run 2 did not time); (2) where the wgmma64 prepare's time goes
# step by step for KDA lb, KDA softplus and GDN after this session (step_clocks.py; GDN's steps never measured);
# (3) Nsight Compute with SASS samples on prepare_bwd (KDA lb, training step, 1x8192x64x128) after the bf16 chunk
# gradients: where the backward's longest kernel waits now.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 300 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_wgmma64_backward_gpu.py tests/test_runtime_ops_gpu.py tests/gpu/test_tf32_primitives_gpu.py \
  "tests/gpu/test_segments_gpu.py::test_a_training_step_cut_on_the_kernels_matches_float64" \
  tests/gpu/test_recurrence_op_gpu.py tests/test_runtime.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
export KDAGEN_CUT=off
timeout 90 python3 benchmarks/probe/step_clocks.py --ops kda_lb,kda,gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps.log 2>&1; cat $OUT/steps.log
name=prepare_bwd
KDAGEN_FAMILY=wgmma64 KDAGEN_LINEINFO=1 timeout 150 ncu --clock-control none --kernel-name regex:"^${name}\$" \
  --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o /tmp/$name -f python3 benchmarks/probe/ncu_target.py kda_lb 1 8192 64 128 1 > /dev/null 2>&1
ncu -i /tmp/$name.ncu-rep --page details > $OUT/$name-details.txt 2>&1
ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$name-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$name-sass.csv.gz 150 > $OUT/$name-summary.md 2>&1
grep -E "Duration|Executed Ipc A|Issue Slots Busy|Achieved Occ|DRAM Throughput" $OUT/$name-details.txt
grep -A12 "| stall |" $OUT/$name-summary.md
echo "total ${SECONDS} s"
