# Session 18, run 4: the GPU tests of run 3's tree (its suite log did not come back), then an experiment, not a
# kernel: do the two prepare CTAs of an SM wait on their prologue loads together? The CTAs of the first wave's
# second slots (linear ids 132..263, if the dispatcher fills SMs breadth-first) start STAGGER_NS later, so that
# the two CTAs of an SM run half a CTA apart from then on; prepare timed (both families' forward) without and with.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=line -p no:cacheprovider tests/gpu/test_forward_kernels.py \
  tests/gpu/test_tf32_primitives_gpu.py 2>&1 | tail -15 > $OUT/suite.txt; cat $OUT/suite.txt
timeout 100 python3 benchmarks/probe/family_timing.py 1x8192x64x128 2>&1 | grep wgmma64 > $OUT/family-A.txt
cat $OUT/family-A.txt
cp templates/wgmma64/prepare.cu.j2 /tmp/prepare.cu.j2.orig
for ns in 4000 8000; do
cp /tmp/prepare.cu.j2.orig templates/wgmma64/prepare.cu.j2
sed -i "s|^  const int chunk = blockIdx.x, h = blockIdx.y, HV = gridDim.y, hq = h / G;|&\n  { const unsigned lin = blockIdx.y * gridDim.x + blockIdx.x; if (lin >= 132 \&\& lin < 264) { unsigned long long t0, t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0)); do { __nanosleep(256); asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); } while (t - t0 < $ns); } }|" templates/wgmma64/prepare.cu.j2
grep -c globaltimer templates/wgmma64/prepare.cu.j2
KDAGEN_CACHE_DIR=/tmp/kc-$ns timeout 100 python3 benchmarks/probe/family_timing.py 1x8192x64x128 2>&1 | grep wgmma64 \
  > $OUT/family-B$ns.txt; cat $OUT/family-B$ns.txt
done
cp /tmp/prepare.cu.j2.orig templates/wgmma64/prepare.cu.j2
