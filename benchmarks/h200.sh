#!/usr/bin/env bash
# `kdagen bench` on the device machine, from the repository root of a copy of the checkout.
# FLA comes from the wheels in .whl/ (../shared/tools/peer-wheels.sh; carry .whl with the run) and kdagen
# from the checkout itself. Results go to $OUT (the device tool brings that folder back), else
# benchmarks/results. Extra arguments go to `kdagen bench`, e.g. --ops kda --modes fwd.
set -euo pipefail
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader || true
python3 benchmarks/run.py --out "${OUT:-benchmarks/results}" "$@"
