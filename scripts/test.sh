#!/usr/bin/env bash
# The test command: installs dependencies, builds (warnings are errors), runs the whole
# suite (CTest), then builds again under AddressSanitizer + UndefinedBehaviorSanitizer and
# runs the fast tests there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# The dashboard's browser test drives Chromium with playwright-core (pinned in
# tests/browser/package-lock.json).
npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
bash scripts/build.sh -DBKS_WERROR=ON
(cd build && ctest -j "$(nproc)" --output-on-failure --timeout 900)
# Sanitizers: the fast tests (ops, planner, parsers, executor, solvers, formats).
echo "test: building under address,undefined sanitizers in build-asan/ (log: build-asan.log)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBKS_SANITIZE=address,undefined \
  -DBKS_WERROR=ON > build-asan.log 2>&1 || { cat build-asan.log; exit 1; }
ninja -C build-asan -j "$(nproc)" >> build-asan.log 2>&1 || { tail -50 build-asan.log; exit 1; }
(cd build-asan && ctest -j "$(nproc)" -L fast --output-on-failure --timeout 900)
