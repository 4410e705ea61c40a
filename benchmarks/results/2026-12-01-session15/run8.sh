# Session 15, run 8 (a fresh machine): cold compiles as `kdagen compile` reports them (NVRTC's load apart): the
# inference forward of KDA lb (#11), then the training configuration of the softplus gate (other sources: NVRTC on
# the device serves a source it has compiled again), its units side by side (#12)
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
LB="--op kda --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
SP="--op kda --use-gate-in-kernel --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
python3 -m kdagen compile $LB --pairs 64 --inference -j 4 > $OUT/compile-inference.log 2>&1; grep -v "^compiling" $OUT/compile-inference.log
python3 -m kdagen compile $SP --pairs 64 -j 4 > $OUT/compile-training-softplus.log 2>&1; grep -v "^compiling" $OUT/compile-training-softplus.log
