#!/usr/bin/env bash
# Context parallelism on a machine with two GPUs (device kind nvidia-h200-x2), ≈ 5 minutes: the sharded op's
# tests (NCCL), FLA's context builder against kdagen's, the float64 check beside FLA's CP and the timing
# (benchmarks/probe/cp_probe.py). FLA wheels in .whl/ are installed when present. Logs under $OUT.
set -uo pipefail
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
nvidia-smi -L | tee "$out/cp-env.log"
step() {
  local name=$1 budget=$2; shift 2
  echo "=== $name (${budget} s): $*"
  timeout -s INT -k 10 "$budget" "$@" 2>&1 | tee "$out/$name.log" | grep -E "FAILED|ERROR|Error|passed|failed|^\||^forward" | tail -40
}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export TRITON_CACHE_DIR=/tmp/triton-cache
  mkdir -p "$TRITON_CACHE_DIR" && tar xzf benchmarks/fla-autotune-h200.tgz -C "$TRITON_CACHE_DIR"
fi
step cp-tests 120 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_context_parallel_gpu.py \
  tests/test_context_parallel.py::test_context_for_is_flas_context
step cp-check 150 torchrun --nproc-per-node 2 benchmarks/probe/cp_probe.py check
step cp-time 180 torchrun --nproc-per-node 2 benchmarks/probe/cp_probe.py time ${CP_SHAPE:-131072 16 128}
