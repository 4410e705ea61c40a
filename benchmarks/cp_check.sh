#!/usr/bin/env bash
# Context parallelism on a machine with two GPUs (device kind nvidia-h200-x2), ≈ 6 minutes: the timing, the
# float64 check beside FLA's CP, the sharded op's tests (NCCL) and FLA's context builder against kdagen's
# (benchmarks/probe/cp_probe.py; FLA compiles one configuration per kernel there, not tuned: its times are
# not comparable and the probe times kdagen only). FLA wheels in .whl/ are installed when present. Logs under $OUT.
set -uo pipefail
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache OMP_NUM_THREADS=8
nvidia-smi -L | tee "$out/cp-env.log"
step() {   # output to a file, not a pipe: a worker torchrun leaves behind cannot hold the step open
  local name=$1 budget=$2; shift 2
  echo "=== $name (${budget} s): $*"
  timeout -s INT -k 10 "$budget" "$@" >"$out/$name.log" 2>&1
  pkill -9 -f cp_probe.py
  grep -E "FAILED|ERROR|Error|passed|failed|^\||^forward" "$out/$name.log" | tail -40
}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export TRITON_CACHE_DIR=/tmp/triton-cache
  mkdir -p "$TRITON_CACHE_DIR" && tar xzf benchmarks/fla-autotune-h200.tgz -C "$TRITON_CACHE_DIR"
fi
step cp-time 120 torchrun --nproc-per-node 2 benchmarks/probe/cp_probe.py time ${CP_SHAPE:-131072 16 128}
step cp-check 240 torchrun --nproc-per-node 2 benchmarks/probe/cp_probe.py check
[ "${CP_TESTS:-1}" = 1 ] && step cp-tests 120 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_context_parallel_gpu.py \
  tests/test_context_parallel.py::test_context_for_is_flas_context
