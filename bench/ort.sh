#!/usr/bin/env bash
# bakusoku against ONNX Runtime on the same ONNX files (bench/ort.py says how).
# Usage: bash bench/ort.sh [--threads N] [--iterations N] [--rounds N] [--precision fp32|int8|bf16] [--only REGEX]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
npm ci --prefix bench/ort --ignore-scripts --no-audit --no-fund --loglevel=error
bash scripts/build.sh
/usr/bin/python3 bench/ort.py "$PWD/build/src/bakusoku" "$@"
