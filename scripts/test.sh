#!/usr/bin/env bash
# The test command: installs dependencies, builds (warnings are errors), runs the whole
# suite (CTest), then builds again with clang under AddressSanitizer +
# UndefinedBehaviorSanitizer and runs the fast tests and the fuzz harnesses there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# The dashboard's browser test drives Chromium with playwright-core (pinned in
# tests/browser/package-lock.json).
npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
# ONNX Runtime (its CPU binaries ship inside the npm package; --ignore-scripts: nothing else
# is fetched) runs the models `bakusoku export` writes (tests/test_onnx_export.cc); the
# same pinned package is bench/ort.sh's inference peer.
npm ci --prefix bench/ort --ignore-scripts --no-audit --no-fund --loglevel=error
bash scripts/build.sh -DBKS_WERROR=ON
(cd build && ctest -j "$(nproc)" --output-on-failure --timeout 900)
# Sanitizers and fuzzing in one clang tree (build-fuzz/): the fast tests (ops, planner,
# parsers, executor, solvers, formats) under AddressSanitizer + UndefinedBehaviorSanitizer,
# and each libFuzzer harness for a fixed number of inputs from its seed corpus
# (tests/fuzz/; scripts/fuzz.sh runs them for longer).
command -v clang++ > /dev/null || { echo "test: clang++ not found; scripts/install_deps.sh installs clang" >&2; exit 1; }
echo "test: building with clang under address,undefined sanitizers and libFuzzer in build-fuzz/ (log: build-fuzz.log)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBKS_SANITIZE=address,undefined -DBKS_FUZZ=ON -DBKS_CUDA=OFF -DBKS_WERROR=ON > build-fuzz.log 2>&1 || { cat build-fuzz.log; exit 1; }
ninja -C build-fuzz -j "$(nproc)" >> build-fuzz.log 2>&1 || { tail -50 build-fuzz.log; exit 1; }
(cd build-fuzz && ctest -j "$(nproc)" -L 'fast|fuzz' --output-on-failure --timeout 900)
