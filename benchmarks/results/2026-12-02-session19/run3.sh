# Session 19, run 3: an A/B in one process each, same machine: the wgmma64 forward's kernel times (KDA softplus,
# KDA lb, GDN; bench inputs) of three trees copied beside the checkout (ab/, not kept): main (4bdd290), main with
# the row inputs staged in the tiles (branch wip-prologue-smem-staging's template), and the persistent prepare
# (this branch). Main runs again last, to see the machine's drift.
export PYTHONUNBUFFERED=1 KDAGEN_CACHE_DIR=/tmp/kdagen-cache
cd "$(dirname "$0")/../../.."
for tree in main staging persistent main; do
  timeout 120 python3 ab/time_prepare.py ab/$tree 1x8192x64x128 8x4096x32x128 2>&1 | grep "^|"
done | tee $OUT/ab.md
