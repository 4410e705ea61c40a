# Session 19, run 7 (branch wip-bf16-chunk-grads): chunk_bwd's three [C, K] gradient workspaces stored in bf16
# (prepare_bwd reads them so): the wgmma64 backward's GPU tests and the ops end to end, then an A/B of the training
# step's kernel times against main (benchmarks/probe/ab_kernels.py; main copied beside the checkout first: `mkdir -p
# ab/main && git archive main kdagen templates pyproject.toml | tar -x -C ab/main`, not kept).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 110 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/test_runtime_ops_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in ab/main . ab/main; do timeout 45 python3 benchmarks/probe/ab_kernels.py $tree --train 2>&1 | grep "^|"; done \
  | tee $OUT/ab.md
