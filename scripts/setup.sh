#!/usr/bin/env bash
# Installs the build and test dependencies on Debian 12 (apt) and configures + builds
# deltaflash into build/. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake pkg-config git ccache nodejs npm
  nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libfmt-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
