#!/usr/bin/env bash
# One device call (10 minutes at most) that checks the tree end to end, most important first. Every step has its
# own time budget and prints one line per test (-v), so a step that runs out still says what passed; logs go to
# $OUT. The session-4 lesson: a single pytest run under the call's limit lost everything when the limit hit.
#   1. wgmma64's forward kernels against float64 (its value-row split against one CTA too) and the inference
#      forward cut into segments on long sequences (kdagen.ops.segmented), then each family's forward time per
#      kernel at the two few-pair shapes, uncut and cut every 4096 tokens (family_timing --cut)
#   2. the GPU suite without FLA on the path (runtime, both directions' kernels, the ops, compile and graphs,
#      compiled recurrences, non-finite isolation); the sm_90a primitives only with PRIMITIVES=1
#   3. with FLA (from .whl/, its autotune results from benchmarks/fla-autotune-h200.tgz): the host time per eager
#      call beside FLA's (kdagen bench at 4x4096x16x64)
# The budgets add up to ≈ 580 s: run it as the call's only command (`bash benchmarks/device_check.sh`). FLA's own
# layers on kdagen (tests/gpu/test_fla_layers_gpu.py) need a call of their own: ≈ 330 s, most of it Triton
# compiling FLA's backward (2026-12-01, session 9, run 6).
# Extra arguments go to the suite's pytest (e.g. -k backward).
set -uo pipefail
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"; } 2>&1 | tee "$out/env.log"
# step NAME SECONDS COMMAND...: the command under its budget (SIGINT first, so pytest still prints its summary)
step() {
  local name=$1 budget=$2; shift 2
  echo "=== $name (${budget} s): $*"
  timeout -s INT -k 15 "$budget" "$@" 2>&1 | tee "$out/$name.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|^\|" | tail -40
}
GPU_TESTS=(python3 -m pytest -m gpu -v -rfE --tb=short -p no:cacheprovider)      # timeout runs commands, not functions

CUT=tests/gpu/test_segments_gpu.py::test_an_inference_forward_cut_on_the_kernels_matches_float64
step forward 150 "${GPU_TESTS[@]}" tests/gpu/test_forward_kernels.py "$CUT" -k "wgmma64 or cut"
step timing 100 python3 benchmarks/probe/family_timing.py --cut 4096 1x65536x4x128 1x32768x16x128
[ "${PRIMITIVES:-0}" = 1 ] && step primitives 60 "${GPU_TESTS[@]}" tests/gpu/test_sm90_primitives.py
step suite 250 "${GPU_TESTS[@]}" tests/test_runtime_gpu.py tests/gpu tests/test_runtime_ops_gpu.py \
  --deselect tests/gpu/test_sm90_primitives.py --deselect tests/gpu/test_fla_layers_gpu.py --deselect "$CUT" \
  --durations=15 "$@"

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export TRITON_CACHE_DIR=/tmp/triton-cache
  mkdir -p "$TRITON_CACHE_DIR" && tar xzf benchmarks/fla-autotune-h200.tgz -C "$TRITON_CACHE_DIR"
  step host_time 80 python3 -m kdagen bench --ops kda,kda_lb --shapes 4x4096x16x64 --modes fwd,fwd+bwd \
    --no-accuracy --repeats 1 --out "$out/bench"
fi
