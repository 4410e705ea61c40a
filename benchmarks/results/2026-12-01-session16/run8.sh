# Session 16, run 8: after the last simplification (prepare_bwd's load_grads as one template macro; the rendered
# kernels differ only in comments and #line), the wgmma64 backward's GPU tests and the user recurrences on the GPU.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
timeout 200 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_wgmma64_backward_gpu.py \
  tests/gpu/test_recurrence_op_gpu.py > $OUT/suite.log 2>&1; tail -3 $OUT/suite.log
