#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel, on the GPU machine: Nsight Compute times
# every kernel of a few 1-row forwards (one metric, so one pass and no replay; caches and clocks
# left as they run), then tools/ncu_step_table.py tabulates the last complete forward.
# Run after tools/gpu-check.sh has built build-cuda.
#
#   tools/ncu-step.sh MODEL.gguf OUT_DIR
#     writes OUT_DIR/ncu_step.csv and OUT_DIR/ncu_step.md
set -euo pipefail
MODEL=$1
OUT=$2
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$NCU" ] || { echo "ncu-step: Nsight Compute (ncu) not found" >&2; exit 1; }
mkdir -p "$OUT"
# bench -p 1 -n 6: every forward is one row (a 1-token prompt, then decode steps).
"$NCU" --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none --launch-count 9000 \
  build-cuda/deltaflash bench -m "$MODEL" -p 1 -n 6 -r 1 --device cuda >"$OUT/ncu_step.csv"
python3 tools/ncu_step_table.py "$OUT/ncu_step.csv" >"$OUT/ncu_step.md"
head -40 "$OUT/ncu_step.md"
