# Session 19, run 7 (branch wip-bf16-chunk-grads): chunk_bwd's three [C, K] gradient workspaces stored in bf16
# (prepare_bwd reads them so): the wgmma64 backward's GPU tests and the ops end to end, then an A/B of the training
# step's kernel times against main (trees copied beside the checkout under ab/, not kept: `git archive main kdagen
# templates pyproject.toml | tar -x -C ab/main`, the branch's likewise into ab/branch, and ab/time_train.py, the
# training-step variant of session 19's ab/time_prepare.py, as in this session's run 3 and run 4).
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
timeout 110 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/test_runtime_ops_gpu.py -k "not mma16" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -8
for tree in main branch; do timeout 45 python3 ab/time_train.py ab/$tree 2>&1 | grep "^|"; done | tee $OUT/ab.md
