#!/usr/bin/env bash
# Installs what bench/server_load.sh needs besides bakusoku's own dependencies: wrk (an HTTP
# load generator) and python3 (the live-chart viewers). Safe to run again.
set -euo pipefail

packages=(wrk python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_load_tools: all ${#packages[@]} packages present"
  exit 0
fi
echo "install_load_tools: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
