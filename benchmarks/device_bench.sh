#!/usr/bin/env bash
# One benchmark call on the device machine: `kdagen bench` with FLA from .whl/, FLA's Triton autotune results
# carried between calls in .tcache/autotune.tgz (tuning a new shape takes FLA minutes; the chosen configs are
# reused, so FLA still runs its own best configuration). Arguments go to `kdagen bench`; pass --tune-jobs N to
# have FLA compile its candidates (or, with its choices known, its chosen kernels) in N processes first.
# Budget: the bench gets BENCH_SECONDS (default 480), then the autotune results are packed into $OUT.
set -uo pipefail
export TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$TRITON_CACHE_DIR"
for cache in benchmarks/fla-autotune-h200.tgz .tcache/autotune.tgz; do     # checked-in, then the latest run's
  [ -f "$cache" ] && tar xzf "$cache" -C "$TRITON_CACHE_DIR"
done
timeout "${BENCH_SECONDS:-480}" bash benchmarks/h200.sh "$@" 2>&1 | tee "${OUT:-/tmp}/bench.log"
(cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json' | tar czf "${OUT:-/tmp}/autotune.tgz" -T -)
ls -la "${OUT:-/tmp}"
