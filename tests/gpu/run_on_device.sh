#!/usr/bin/env bash
# The GPU test batch on the device machine, from the repository root: the runtime's GPU tests, the kernels
# against the float64 references, the public ops end to end. Logs go to $OUT (or /tmp). Extra arguments
# go to pytest (e.g. -k forward).
set -uo pipefail
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git rev-parse --short HEAD 2>/dev/null || true
PYTHONUNBUFFERED=1 python3 -m pytest -m gpu tests/test_runtime_gpu.py tests/gpu tests/test_runtime_ops_gpu.py \
  -q -rfE --durations=15 -p no:cacheprovider "$@" 2>&1 | tee "$out/gpu_tests.log"
