#!/usr/bin/env python3
"""Per-kernel time of one forward from an Nsight Compute CSV (tools/ncu-step.sh writes it).

Nsight Compute times each kernel alone (serialized: no overlap between neighbours), so the sum is
an upper bound on the step; the table says where a step's time goes, kernel by kernel.
Forwards are cut at each embedding gather (embed_k: the first kernel of a forward). The forward
tabulated (grouped by kernel and launch shape) is the last complete one of the most common kernel
count: the bench's plain decode steps, not the step it runs once through the byte-counting wrapper
(which launches each product of a shared-input group apart, with its own quantizer).

  tools/ncu_step_table.py ncu_step.csv [--top N]
"""
import argparse
import collections
import csv
import re


def short_name(name):
    name = re.sub(r"df::cuda::|\(anonymous namespace\)::|unnamed>::|void ", "", name)
    return re.sub(r"\(.*", "", name)[:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    header, launches = None, []
    with open(a.csv, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                header = row
            elif header and len(row) == len(header):
                d = dict(zip(header, row))
                if d["Metric Name"] != "gpu__time_duration.sum":
                    continue
                scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3}.get(d["Metric Unit"], 1e-3)
                us = float(d["Metric Value"].replace(",", "")) * scale
                launches.append((short_name(d["Kernel Name"]), d["Grid Size"], d["Block Size"], us))
    starts = [i for i, l in enumerate(launches) if l[0].startswith("embed_k")]
    if len(starts) < 2:
        raise SystemExit("fewer than two forwards (embed_k launches) in the CSV")
    forwards = [launches[a:b] for a, b in zip(starts, starts[1:])]
    common = collections.Counter(len(f) for f in forwards).most_common(1)[0][0]
    forward = [f for f in forwards if len(f) == common][-1]
    total = sum(l[3] for l in forward)
    groups = collections.defaultdict(lambda: [0, 0.0])
    for name, grid, block, us in forward:
        g = groups[(name, grid, block)]
        g[0] += 1
        g[1] += us
    print(f"{len(starts) - 1} complete forwards; the last of the {common}-kernel ones: {len(forward)} kernels, {total / 1e3:.3f} ms "
          "(each kernel timed alone)\n")
    print("| kernel | grid | block | calls | us a call | us in the forward | share |")
    print("|---|---|---|---|---|---|---|")
    for (name, grid, block), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"| {name} | {grid} | {block} | {n} | {us / n:.2f} | {us:.1f} | {100 * us / total:.1f}% |")


if __name__ == "__main__":
    main()
