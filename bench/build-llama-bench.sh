#!/usr/bin/env bash
# Build llama-bench and llama-quantize from the llama.cpp source bundled in the
# pinned node-llama-cpp (the same source as the prebuilt libraries used by
# tools/llama-peer) into third_party/llama.cpp-build/ (git-ignored).
#
# CPU build: Release, GGML_NATIVE=ON, LLAMA_OPENSSL=OFF (no HTTPS/downloads; the
# old LLAMA_CURL option is deprecated in this tree and curl is not used), no
# tests/examples/server/web UI, -j2.
# --cuda: CUDA build for sm_90 (H200) into third_party/llama.cpp-build-cuda/.
# Idempotent: skipped when both binaries exist and are newer than the source
# checkout (--force rebuilds). A build takes about 14 min of CPU time (~7 min on
# two idle cores).
#
# Usage: bench/build-llama-bench.sh [--cuda] [--force] [--jobs N]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CUDA=0
FORCE=0
JOBS=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cuda) CUDA=1 ;;
    --force) FORCE=1 ;;
    --jobs) JOBS="$2"; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "build-llama-bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

need() { command -v "$1" >/dev/null 2>&1 || { echo "build-llama-bench.sh: '$1' not found in PATH" >&2; exit 1; }; }
need cmake

# npm packages + source checkout (fast when already done).
"$ROOT/tools/llama-peer/setup.sh" --no-harness >/dev/null

SRC="$ROOT/third_party/llama.cpp-src"
if [[ $CUDA == 1 ]]; then
  BUILD="$ROOT/third_party/llama.cpp-build-cuda"
  extra=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
else
  BUILD="$ROOT/third_party/llama.cpp-build"
  extra=()
fi
BENCH="$BUILD/bin/llama-bench"
QUANT="$BUILD/bin/llama-quantize"

if [[ $FORCE == 0 && -x "$BENCH" && -x "$QUANT" && "$BENCH" -nt "$SRC/.git/HEAD" ]]; then
  echo "[build-llama-bench] up to date: $BENCH" >&2
else
  start=$(date +%s)
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
    "${extra[@]}" >&2
  cmake --build "$BUILD" --target llama-bench llama-quantize -j "$JOBS" >&2
  echo "[build-llama-bench] built in $(( $(date +%s) - start )) s" >&2
fi

echo "llama-bench:    $BENCH"
echo "llama-quantize: $QUANT"
