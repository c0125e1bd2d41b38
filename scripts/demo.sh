#!/usr/bin/env bash
# Fresh machine -> text: installs dependencies, builds the CLI, and runs the bundled demo model.
# The demo model is a tiny random-weight qwen35 model generated at build time, so the text is
# gibberish until the trained demo models land; it shows the whole path working.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target demo-model
./build/deltaflash run -m build/models/demo-qwen35-tiny.gguf -p "The quick brown fox" -n 48 --seed 1 "$@"
