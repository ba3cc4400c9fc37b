#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cd build
ctest -j "$(nproc)" --output-on-failure --timeout 900
