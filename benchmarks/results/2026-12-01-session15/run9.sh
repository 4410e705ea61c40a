# Session 15, run 9 (a fresh machine): the KDA lb inference forward's cold compile with one unit at a time (-j 1),
# as `kdagen compile` reports it (NVRTC's load apart)
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
LB="--op kda --use-gate-in-kernel --lower-bound -5 --use-qk-l2norm-in-kernel --use-beta-sigmoid-in-kernel --arch sm_90a"
python3 -m kdagen compile $LB --pairs 64 --inference -j 1 > $OUT/compile-inference-j1.log 2>&1; grep -v "^compiling" $OUT/compile-inference-j1.log
