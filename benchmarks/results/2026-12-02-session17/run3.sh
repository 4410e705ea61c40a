# Session 17, run 3: (A) the factors step's runs of two channels as 8-byte shared accesses (run 2's scalar pairs met
# each bank twice); (B) an experiment, not a kernel: A with the prologue's global loads replaced by register values,
# to bound what hiding their latency could gain. Forward GPU tests on A, then both timed.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  > $OUT/suite.log 2>&1; grep -E "passed|failed|Error" $OUT/suite.log | tail -5
timeout 150 python3 benchmarks/probe/family_timing.py 1x8192x64x128 > $OUT/family-A.log 2>&1; grep "wgmma64" $OUT/family-A.log
timeout 100 python3 benchmarks/probe/step_clocks.py --ops kda_lb,gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps-A.log 2>&1; grep -v Warn $OUT/steps-A.log | tail -20
sed -i 's|stage_{{ x.name }}\[pass\]\[piece\] = reinterpret_cast<const uint4\*>({{ x.name }}_at)\[piece\];|stage_{{ x.name }}[pass][piece] = make_uint4(0x3f803f80u ^ (tid << 3), 0x3f803f80u + pass, 0x3f003f00u + piece, 0x3e803e80u);|; s|stage_{{ x.name }}\[pass\] = \*{{ x.name }}_at;|stage_{{ x.name }}[pass] = ({{ ctype[x.param] }})(0.5f);|' templates/wgmma64/prepare.cu.j2
grep -c "0x3f803f80u" templates/wgmma64/prepare.cu.j2
export KDAGEN_CACHE_DIR=/tmp/kc-b
timeout 150 python3 benchmarks/probe/family_timing.py 1x8192x64x128 > $OUT/family-B.log 2>&1; grep "wgmma64" $OUT/family-B.log
timeout 100 python3 benchmarks/probe/step_clocks.py --ops kda_lb,gdn --shape 1x8192x64x128 --kernel prepare \
  > $OUT/steps-B.log 2>&1; grep -v Warn $OUT/steps-B.log | tail -20
