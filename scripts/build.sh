#!/usr/bin/env bash
# Configures and builds bakusoku (Release) in build/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > build.log 2>&1 || { cat build.log; exit 1; }
echo "build: compiling with $(nproc) jobs (log: build.log)"
ninja -C build -j "$(nproc)" >> build.log 2>&1 || { tail -50 build.log; exit 1; }
echo "build: done: build/src/bakusoku"
