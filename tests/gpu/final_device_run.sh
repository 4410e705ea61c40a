#!/usr/bin/env bash
# The evidence run for the runtime/ops issue on the device machine: cold and cached compile of one forward+backward
# configuration through `kdagen compile`, then every GPU test with FLA (from .whl/) importable so its errors print
# beside ours. Logs in $OUT.
set -uo pipefail
out=${OUT:-/tmp}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cfg="--op kda --head-dim 128 --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel"
{ echo "\$ kdagen compile $cfg   (cold: empty KDAGEN_CACHE_DIR)"; python3 -m kdagen compile $cfg;
  echo "\$ kdagen compile $cfg --op gdn"; python3 -m kdagen compile --op gdn --head-dim 128 --use-gate-in-kernel \
    --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel; } 2>&1 | tee "$out/compile.log"
PYTHONUNBUFFERED=1 python3 -m pytest -m gpu tests/test_runtime_gpu.py tests/gpu tests/test_runtime_ops_gpu.py \
  -q -s -rfEs --durations=10 -p no:cacheprovider "$@" 2>&1 | tee "$out/gpu_tests.log"
