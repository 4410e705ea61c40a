# Session 16, run 2: prepare_bwd's tensor-core form on 16 warps at K = 128 (a warp per 8 channels, 128 registers)
# against run 1's 8 warps; GPU tests; chunk_bwd's failing seed of session 15; Nsight Compute on the 16-warp form.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn --shapes 1x8192x64x128,1x32768x16x128 \
  > $OUT/timing.log 2>&1; mv $OUT/backward_timing.md $OUT/timing-16warps.md; cut -c1-200 $OUT/timing-16warps.md
timeout 100 python3 benchmarks/probe/chunk_rows.py kda_lb_k128 56718244 > $OUT/chunk-rows.log 2>&1
tail -9 $OUT/chunk-rows.log
op=kda_lb
KDAGEN_LINEINFO=1 timeout 200 ncu --clock-control none --kernel-name prepare_bwd --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section ComputeWorkloadAnalysis -o /tmp/$op -f python3 benchmarks/probe/ncu_target.py $op 1 8192 64 128 1 > /dev/null 2>&1
ncu -i /tmp/$op.ncu-rep --page details > $OUT/$op-details.txt 2>&1
ncu -i /tmp/$op.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/$op-sass.csv.gz
python3 benchmarks/probe/sass_summary.py $OUT/$op-sass.csv.gz 300 > $OUT/$op-summary.md 2>&1
grep -E "Duration|Registers Per|Achieved Occ|Executed Ipc A|Issue Slots Busy|Eligible Warps|No Eligible" $OUT/$op-details.txt
sed -n 1,4p $OUT/$op-summary.md; grep -A9 "| stall |" $OUT/$op-summary.md
# the 8-warp form (run 1) in the same process image
sed -i 's|    return 32 \* K // 8 if contractions_of|    return PREPARE_BWD_THREADS if contractions_of|' kdagen/plan/families/wgmma64/backward.py
grep -n "return PREPARE_BWD_THREADS if" kdagen/plan/families/wgmma64/backward.py
KDAGEN_CACHE_DIR=/tmp/kc-8 timeout 120 python3 benchmarks/probe/backward_timing.py --ops kda_lb,gdn \
  --shapes 1x8192x64x128,1x32768x16x128 > /dev/null 2>&1; mv $OUT/backward_timing.md $OUT/timing-8warps.md
cut -c1-200 $OUT/timing-8warps.md
