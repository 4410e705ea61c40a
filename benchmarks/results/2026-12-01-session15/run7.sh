# Session 15, run 7: 3xTF32 operands split by truncation (an AND and a subtraction) against two cvt.rna.tf32:
# GDN's prepare_bwd (the only user), its GPU tests, and its time before and after
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
timeout 150 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/gpu/test_tf32_primitives_gpu.py > $OUT/suite.log 2>&1; tail -3 $OUT/suite.log
timeout 100 python3 benchmarks/probe/backward_timing.py --ops gdn --shapes 1x8192x64x128,1x32768x16x128 > /dev/null 2>&1
mv $OUT/backward_timing.md $OUT/timing-truncated-split.md; cut -c1-220 $OUT/timing-truncated-split.md
python3 - <<'PY'
p = "templates/sm80/mma.cuh"
s = open(p).read()
s = s.replace("  big = __float_as_uint(x) & 0xffffe000u;\n  small = __float_as_uint(x - __uint_as_float(big));",
              "  big = ptx_cvt_tf32(x);\n  small = ptx_cvt_tf32(x - __uint_as_float(big));")
open(p, "w").write(s)
PY
grep -n "big = " templates/sm80/mma.cuh
KDAGEN_CACHE_DIR=/tmp/kc-b timeout 100 python3 benchmarks/probe/backward_timing.py --ops gdn --shapes 1x8192x64x128,1x32768x16x128 > /dev/null 2>&1
mv $OUT/backward_timing.md $OUT/timing-rna-split.md; cut -c1-220 $OUT/timing-rna-split.md
