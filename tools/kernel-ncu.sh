#!/usr/bin/env bash
# Nsight Compute's full profile of one kernel launch, with its per-instruction (SASS) stall
# samples: where a kernel's warps wait, instruction by instruction. Run on the GPU machine.
#
#   tools/kernel-ncu.sh OUT_PREFIX KERNEL_REGEX SKIP -- COMMAND...
#     profiles launch SKIP + 1 of the kernels whose name matches KERNEL_REGEX in COMMAND
#     (e.g. build-cuda/matmul_kernels --type q4_K --matrix gate --rows 512 --kernel "tile layout"
#     --reps 3) and writes OUT_PREFIX.txt (the details page: speed of light, occupancy, warp
#     state statistics, source hot spots) and OUT_PREFIX_sass.csv (the source page, SASS with
#     its metrics per instruction).
set -euo pipefail
[ $# -ge 5 ] && [ "$4" = "--" ] || { sed -n '2,11p' "$0"; exit 2; }
out=$1 regex=$2 skip=$3
shift 4
ncu --set full --import-source no --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 \
  -f -o "$out" "$@" >"$out.run.log" 2>&1 || { tail -20 "$out.run.log"; exit 1; }
ncu --import "$out.ncu-rep" --page details >"$out.txt" 2>&1 || true
ncu --import "$out.ncu-rep" --page source --csv --print-source sass >"${out}_sass.csv" 2>/dev/null ||
  ncu --import "$out.ncu-rep" --page source --csv >"${out}_sass.csv" 2>&1 || true
