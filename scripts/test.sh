#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# The dashboard's browser test drives Chromium with playwright-core (pinned in
# tests/browser/package-lock.json).
npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
bash scripts/build.sh
cd build
ctest -j "$(nproc)" --output-on-failure --timeout 900
