#!/usr/bin/env bash
# Fresh machine -> test results: installs dependencies (apt, npm), builds deltaflash and the
# llama.cpp peer harness (our test oracle), and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./tools/llama-peer/setup.sh
./tools/js-oracles/setup.sh
./scripts/setup.sh -DDELTAFLASH_LLAMA_PEER="$PWD/build-peer/llama-peer" \
  -DDELTAFLASH_JS_ORACLES="$PWD/tools/js-oracles/node_modules" \
  -DDELTAFLASH_PEER_NODE_MODULES="$PWD/tools/llama-peer/node_modules"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
