#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU: builds with CUDA, shows the GPU, runs the
# `gpu` tests (every GPU kernel against the CPU's) and the convolution benchmark. About five
# minutes on 16 cores once the dependencies are installed (scripts/install_deps.sh).
#   scripts/gpu_check.sh              build, then check
#   scripts/gpu_check.sh --no-build   check what build/ holds
# With BKS_GPU_BIN set to a folder holding bakusoku, test_gpu_ops and gpu_conv_bench (what
# scripts/gpu_bundle.sh packs for a machine that cannot build), it runs those instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${BKS_GPU_BIN:-}"
if [ -z "$bin" ]; then
  [ "${1:-}" = "--no-build" ] || bash scripts/build.sh -DBKS_WERROR=ON
  [ -x build/tests/test_gpu_ops ] || { echo "gpu_check: build/ has no CUDA backend (see 'CUDA backend' in build.log)" >&2; exit 1; }
fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== device_query"
"${bin:-build/src}/bakusoku" device_query
echo "== gpu tests"
status=0
if [ -z "$bin" ]; then
  (cd build && ctest -L gpu --output-on-failure --timeout 300) || status=$?
else
  "$bin/test_gpu_ops" || status=$?
fi
echo "== convolution benchmark"  # also after a failed test: its figures still say something
"${bin:-build/tests}/gpu_conv_bench" ${BKS_BENCH_BATCHES:-64 256}
[ "$status" -eq 0 ] || echo "gpu_check: the gpu tests FAILED" >&2
exit "$status"
