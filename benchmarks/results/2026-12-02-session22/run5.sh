# Session 22, run 5 (the final tree, after review): the tensor-map GPU tests (a prepared launch's AddressedMap against
# encode_tiled on the driver); cold compiles on a fresh cache for #11 point 4 (the KDA lb inference forward, one job)
# and #12 point 5 (its training configuration: forward and backward units, the default jobs); then the ops' GPU tests
# (every call through the prepared launches with their map slots), as far as the call's time allows.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../../.."
timeout 60 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_tensormap_gpu.py \
  > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/suite.log | tail -4
LB="--use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
KDAGEN_CACHE_DIR=/tmp/cold-fwd timeout 40 python3 -m kdagen compile $LB --family wgmma64 --inference -j 1 \
  > $OUT/compile-fwd.log 2>&1; cat $OUT/compile-fwd.log
KDAGEN_CACHE_DIR=/tmp/cold-train timeout 60 python3 -m kdagen compile $LB --family wgmma64 --pairs 64 \
  > $OUT/compile-train.log 2>&1; cat $OUT/compile-train.log
KDAGEN_CACHE_DIR=/tmp/cold-train timeout 100 python3 -m pytest -m gpu -q -x -rfE --tb=short -p no:cacheprovider \
  tests/test_runtime_ops_gpu.py -k "not mma16" > $OUT/ops.log 2>&1
echo "ops rc=$?"; grep -E "[0-9]+ (passed|failed)|^(FAILED|ERROR)" $OUT/ops.log | tail -4
echo "total ${SECONDS} s"
