#!/usr/bin/env bash
# One device call: a family's training path on the H200 — the wgmma64 backward's kernel tests (every gradient
# against float64, two runs bitwise equal), the public ops end to end on the family (KDAGEN_FAMILY), then one
# training step's time per kernel and peak memory for each family (benchmarks/probe/backward_timing.py, uncut).
# Logs go to $OUT. FAMILY (default wgmma64) is the family under test, TIMED the families timed (default: it and
# mma16), OPS and SHAPES what they are timed on.
set -uo pipefail
out=${OUT:-/tmp}
family=${FAMILY:-wgmma64}
shapes=${SHAPES:-1x8192x64x128,1x32768x16x128,4x4096x16x64,1x65536x4x128}
timed=${TIMED:-$family mma16}
ops=${OPS:-kda_lb,gdn}
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache KDAGEN_CUT=off
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/env.log"
step() {
  local name=$1 budget=$2; shift 2
  echo "=== $name (${budget} s): $*"
  timeout -s INT -k 15 "$budget" "$@" 2>&1 | tee "$out/$name.log" | grep -E "PASSED|FAILED|ERROR|passed|failed|^\||: " | tail -40
}
GPU_TESTS=(python3 -m pytest -m gpu -v -rfE --tb=short -p no:cacheprovider -s)
step kernels 180 "${GPU_TESTS[@]}" tests/gpu/test_wgmma64_backward_gpu.py tests/gpu/test_sm90_primitives.py
KDAGEN_FAMILY=$family step ops 120 "${GPU_TESTS[@]}" tests/test_runtime_ops_gpu.py -k "every_gradient or deterministic"
for f in $timed; do
  KDAGEN_FAMILY=$f step "timing-$f" 150 python3 benchmarks/probe/backward_timing.py --ops "$ops" --shapes "$shapes"
  [ -f "$out/backward_timing.md" ] && mv "$out/backward_timing.md" "$out/backward_timing-$f.md"
done
