#!/usr/bin/env bash
# Server throughput under concurrent clients, three settings of one `deltaflash serve`:
# one request at a time (--parallel 1), continuous batching (--parallel N), and batching with
# speculation (--parallel N --draft DRAFT: every request verifies its drafted block in the
# shared step). Each run: CLIENTS greedy /v1/completions clients of up to TOKENS tokens at once
# (bench/concurrent_clients.py); prints every run and the median per setting.
#
#   bench/serve_concurrency.sh TARGET DRAFT [--bin PATH] [--device cpu|cuda] [--threads T]
#                              [--parallel N] [--clients C] [--tokens M] [--runs R] [--port P]
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:?usage: bench/serve_concurrency.sh TARGET DRAFT [options]}
DRAFT=${2:?usage: bench/serve_concurrency.sh TARGET DRAFT [options]}
shift 2
BIN=build/deltaflash
DEVICE=auto
THREADS=0
PARALLEL=4
CLIENTS=8
TOKENS=128
RUNS=3
PORT=18097
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift ;;
    --device) DEVICE=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --parallel) PARALLEL=$2; shift ;;
    --clients) CLIENTS=$2; shift ;;
    --tokens) TOKENS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --port) PORT=$2; shift ;;
    *) echo "serve_concurrency: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

# Waits until the server answers /health (python3: curl may be missing on a GPU machine).
wait_ready() {
  python3 - "$PORT" <<'EOF'
import sys, time, urllib.request
port = sys.argv[1]
for _ in range(600):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
        sys.exit(0)
    except Exception:
        time.sleep(0.2)
sys.exit(1)
EOF
}

setting() {  # label, then serve flags
  local label=$1
  shift
  "$BIN" serve -m "$TARGET" --port "$PORT" --device "$DEVICE" --threads "$THREADS" "$@" >/tmp/serve_concurrency.log 2>&1 &
  local pid=$!
  if ! wait_ready; then
    echo "$label: the server did not start"; tail -5 /tmp/serve_concurrency.log; kill "$pid" 2>/dev/null || true
    return 1
  fi
  local rates=()
  for _ in $(seq "$RUNS"); do
    local line
    line=$(python3 bench/concurrent_clients.py "$PORT" "$CLIENTS" "$TOKENS")
    echo "  $label: $line"
    rates+=("$(echo "$line" | sed -E 's/.*= ([0-9.]+) tok\/s.*/\1/')")
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  local median
  median=$(printf '%s\n' "${rates[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}')
  printf '%-34s median %s tok/s\n' "$label" "$median"
}

echo "$CLIENTS clients x $TOKENS tokens, $RUNS runs, device $DEVICE, target $TARGET"
setting "--parallel 1" --parallel 1
setting "--parallel $PARALLEL" --parallel "$PARALLEL"
setting "--parallel $PARALLEL --draft" --parallel "$PARALLEL" --draft "$DRAFT"
