#!/usr/bin/env bash
# Fresh machine -> text: installs dependencies, builds the CLI, and runs the bundled demo model
# (models/demo/qwen35-demo-target-q8_0.gguf, a 16.6M-parameter Qwen3.5 hybrid trained by train/
# on Python sources and docs): a code completion, then a chat turn through its chat template.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target deltaflash
./build/deltaflash run -p 'def read_json_file(path):' -n 96 --temp 0 "$@"
./build/deltaflash run --chat -p 'What is a dictionary in Python?' -n 96 --temp 0 "$@"
