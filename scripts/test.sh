#!/usr/bin/env bash
# Fresh machine -> test results: installs dependencies (apt, npm), builds deltaflash and the
# llama.cpp peer harness, and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/llama-peer/setup.sh
./scripts/setup.sh -DDELTAFLASH_PEER_DIR="$PWD/tools/llama-peer"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
