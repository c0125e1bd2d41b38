#!/usr/bin/env bash
# Installs the build and test dependencies on Debian 12 from apt. Safe to rerun.
set -euo pipefail

APT_PACKAGES=(build-essential cmake pkg-config git ccache
  nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libfmt-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev)

missing=()
# node/npm (for the test oracles) may come from nodesource; only install Debian's if absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
