#!/usr/bin/env bash
# Builds the GGUF reader fuzzer (libFuzzer + AddressSanitizer + UBSan). Needs clang.
# Usage: fuzz/build.sh [output_dir]   (default: build-fuzz/ in the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-fuzz}

if ! clang++ --version 2>/dev/null | grep -q clang; then
  echo "fuzz/build.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
mkdir -p "$out"
clang++ -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I "$root/src" \
  "$root/fuzz/gguf_fuzz.cpp" \
  "$root/src/gguf/reader.cpp" "$root/src/gguf/getters.cpp" "$root/src/gguf/value.cpp" \
  "$root/src/util/mmap_file.cpp" "$root/src/quant/types.cpp" \
  -lfmt -o "$out/gguf_fuzz"
echo "built $out/gguf_fuzz"
