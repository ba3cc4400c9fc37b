#!/usr/bin/env bash
# Installs every Debian package bakusoku needs to build, test and train its examples.
# Safe to run again: apt skips what is already installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev libomp-dev
  libdnnl-dev libopenblas-dev
  libprotobuf-dev protobuf-compiler
  zlib1g-dev libhdf5-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev libsqlite3-dev libstb-dev libjpeg62-turbo-dev libjs-chart.js
  liblmdb-dev libleveldb-dev
  libonnx-dev python3-onnx python3-torch python3-torchvision
  openmpi-bin libopenmpi-dev openssh-client iproute2
  slurmctld slurmd slurm-client munge
  chromium graphviz
  dataset-fashion-mnist fortunes
)

# The dashboard's browser test runs under Node.js (playwright-core from npm). A machine
# that has a node of its own (e.g. NodeSource's, which bundles npm) keeps it; Debian's
# nodejs and npm otherwise.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
