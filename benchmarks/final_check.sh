#!/usr/bin/env bash
# A short device call for the end of a session with little device time left (≈ 4 minutes of command): the GPU
# suite without FLA, the host time per eager call beside FLA's, then the in-GPU segments against the uncut call.
# Logs under $OUT. The full check is benchmarks/device_check.sh.
set -uo pipefail
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
git rev-parse --short HEAD 2>/dev/null | tee "$out/env.log"
step() {
  local name=$1 budget=$2; shift 2
  echo "=== $name (${budget} s): $*"
  timeout -s INT -k 10 "$budget" "$@" 2>&1 | tee "$out/$name.log" | grep -E "FAILED|ERROR|passed|failed|^\|" | tail -30
}
step suite 125 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/test_runtime_gpu.py tests/gpu \
  tests/test_runtime_ops_gpu.py --deselect tests/gpu/test_sm90_primitives.py --deselect tests/gpu/test_fla_layers_gpu.py \
  --deselect tests/gpu/test_segments_gpu.py
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export TRITON_CACHE_DIR=/tmp/triton-cache
  mkdir -p "$TRITON_CACHE_DIR" && tar xzf benchmarks/fla-autotune-h200.tgz -C "$TRITON_CACHE_DIR"
  step host_time 45 python3 -m kdagen bench --ops kda,kda_lb --shapes 4x4096x16x64 --modes fwd --no-accuracy \
    --repeats 1 --out "$out/bench"
fi
step segments 60 python3 benchmarks/probe/segments_timing.py
