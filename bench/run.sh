#!/usr/bin/env bash
# Benchmarks bakusoku against PyTorch (Debian's python3-torch) on this machine.
# Usage: bash bench/run.sh [--quick] [--seeds N]
#   --quick skips the full 10,000-iteration runs; --seeds N trains the full solver N times on
#   each side (seeds 1..N) and compares mean test accuracy (one run is +-0.3 points of noise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "bench: installing python3-torch"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch
fi
bash scripts/build.sh
/usr/bin/python3 bench/compare.py "$PWD/build/src/bakusoku" "$@"
