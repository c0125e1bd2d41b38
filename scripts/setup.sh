#!/usr/bin/env bash
# Installs the dependencies (apt) and configures + builds deltaflash into build/.
# Extra arguments go to the CMake configure step. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
