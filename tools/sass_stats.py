#!/usr/bin/env python3
"""Summarise tools/kernel-ncu.sh's per-instruction CSV (OUT_sass.csv) by SASS opcode: instructions
executed and warp stall samples, largest first, so a kernel's instruction mix and where its warps
wait fit in a dozen lines.

  tools/sass_stats.py OUT_sass.csv [TOP]
"""
import csv
import sys
from collections import defaultdict


def column(header, *needles):
    for i, name in enumerate(header):
        if all(n.lower() in name.lower() for n in needles):
            return i
    return None


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    start = next((i for i, r in enumerate(rows) if column(r, "Source") is not None), None)
    if start is None:
        sys.exit("sass_stats: no header with a Source column in " + path)
    header, body = rows[start], rows[start + 1:]
    src = column(header, "Source")
    executed = column(header, "Instructions Executed")
    stalls = column(header, "Warp Stall Sampling (All")
    per_op = defaultdict(lambda: [0.0, 0.0])
    for r in body:
        if len(r) <= src or not r[src].strip():
            continue
        op = r[src].strip().split()[0]
        if op.startswith("@"):  # predicate guard
            op = r[src].strip().split()[1]
        op = op.split(".")[0]

        def num(i):
            try:
                return float(r[i].replace(",", "")) if i is not None and i < len(r) else 0.0
            except ValueError:
                return 0.0

        per_op[op][0] += num(executed)
        per_op[op][1] += num(stalls)
    total_i = sum(v[0] for v in per_op.values()) or 1.0
    total_s = sum(v[1] for v in per_op.values()) or 1.0
    print(f"{'opcode':<12}{'executed':>14}{'share':>8}{'stall samples':>16}{'share':>8}")
    for op, (i, s) in sorted(per_op.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{op:<12}{i:>14.0f}{100 * i / total_i:>7.1f}%{s:>16.0f}{100 * s / total_s:>7.1f}%")
    print(f"{'total':<12}{total_i:>14.0f}{'':>8}{total_s:>16.0f}")


if __name__ == "__main__":
    main()
