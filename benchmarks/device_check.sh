#!/usr/bin/env bash
# One device call that checks a change end to end, most important first (the call has 10 minutes):
#   1. the sm_90a primitives against the references the CPU emulator meets (validates the emulator; PRIMITIVES=0
#      skips them)
#   2. SASS of the Hopper forward (HGMMA, UTMALDG, no local memory, setmaxnreg quotas) and cold compile times
#   3. the forward kernels of every family and the public ops without gradients (FLA's errors beside ours)
#   4. a quick forward timing per family with per-kernel device times
#   5. the rest of the GPU suite (runtime, backward, ops with gradients)
# Logs go to $OUT. FLA comes from .whl/ when carried.
set -uo pipefail
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"; } 2>&1 | tee "$out/env.log"
step() { local name=$1; shift; echo "=== $name: $*"; "$@" 2>&1 | tee "$out/$name.log" | tail -25; }
[ "${PRIMITIVES:-1}" = 1 ] && step primitives python3 -m pytest -q -m gpu tests/gpu/test_sm90_primitives.py -rfE -p no:cacheprovider
step sass python3 -m pytest -q tests/test_sass.py -rfEs -p no:cacheprovider
step compile bash -c 'for op in kda gdn; do python3 -m kdagen compile --op $op --head-dim 128 --use-gate-in-kernel \
  --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --inference --arch sm_90a -j 1; done'
step forward python3 -m pytest -q -m gpu tests/gpu/test_forward_kernels.py -rfE -p no:cacheprovider
step inference python3 -m pytest -q -s -m gpu tests/test_runtime_ops_gpu.py -k inference -rfE -p no:cacheprovider
step timing timeout 150 python3 benchmarks/probe/family_timing.py
step suite python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/gpu tests/test_runtime_ops_gpu.py \
  --deselect tests/gpu/test_sm90_primitives.py -k "not inference" -rfE -p no:cacheprovider "$@"
