#!/usr/bin/env bash
# On the dev machine: packs the llama.cpp source that the pinned node-llama-cpp bundles (the
# peer of tools/llama-peer and bench/build-llama-bench.sh) into third_party/llama-src.tar.xz
# (git-ignored, ~4 MB: only what a CUDA llama-bench build needs, no other GPU backends, no web
# UI), small enough to travel to the GPU machine with the working tree. There,
# `tools/gpu-check.sh --bench --llama` builds it for sm_90 and runs llama-bench on the same
# model files as deltaflash's bench, in the same call. Never committed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/tools/llama-peer/setup.sh" --no-harness >/dev/null
SRC="$ROOT/third_party/llama.cpp-src"
OUT="$ROOT/third_party/llama-src.tar.xz"
excludes=()
for b in vulkan sycl opencl metal cann hexagon webgpu openvino et virtgpu; do excludes+=(--exclude="ggml/src/ggml-$b"); done
(cd "$SRC" && tar cJf "$OUT" "${excludes[@]}" --exclude='tools/server/public*' --exclude='tools/ui' \
  CMakeLists.txt cmake ggml src include common vendor tools LICENSE licenses)
echo "$OUT: $(du -h "$OUT" | cut -f1) (llama.cpp $(git -C "$SRC" rev-parse --short HEAD))"
