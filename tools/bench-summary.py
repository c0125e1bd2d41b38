#!/usr/bin/env python3
"""Short summary of one `deltaflash bench --json-out` file (used by tools/gpu-check.sh)."""
import json
import sys


def top(profile, n):
    ops = sorted(profile["ops"], key=lambda o: -o["ms"])[:n]
    total = profile["ops_ms"] or 1.0
    out = []
    for o in ops:
        gbs = f" {o['weight_gb_s']:.0f} GB/s" if o["weight_gb_s"] > 0 else ""
        out.append(f"    {o['op']:<24} {o['calls']:>6.0f} calls {o['ms']:8.3f} ms {100 * o['ms'] / total:5.1f}%{gbs}")
    return out


def main():
    name, path = sys.argv[1], sys.argv[2]
    j = json.load(open(path))
    print(f"{name}: copy {j['copy_gb_s']:.0f} GB/s | decode {j['gen_tok_s']:.2f} tok/s, "
          f"{j['decode_weight_bytes'] / 1e9:.2f} GB/step -> {j['decode_weight_gb_s']:.0f} GB/s = "
          f"{j['decode_pct_of_copy_bw']:.1f}% of copy | prefill {j['n_prompt']}: {j['prompt_tok_s']:.1f} tok/s")
    print("  forward of R rows (ms): " + "  ".join(f"{v['rows']}: {v['ms']:.2f} ({v['vs_1_row']:.2f}x)" for v in j["verify"]))
    if "prompt_first_ms" in j:  # a new prompt shape in a warm process (a CUDA graph capture)
        print(f"  prefill {j['n_prompt']} as a new shape: {j['prompt_first_ms']:.2f} ms "
              f"(a run: {1e3 * j['n_prompt'] / j['prompt_tok_s']:.2f} ms)")
    if all("first_ms" in v for v in j["verify"]):  # the first forward of each shape (a CUDA graph capture)
        print("  first forward of each shape (ms): " + "  ".join(f"{v['rows']}: {v['first_ms']:.2f}" for v in j["verify"]))
    for p in j.get("profile", []):
        gap = p["plain_wall_ms"] - p["ops_ms"]
        print(f"  profile {p['what']}: ops {p['ops_ms']:.3f} ms, unprofiled wall {p['plain_wall_ms']:.3f} ms "
              f"(outside ops {gap:.3f} ms)")
        print("\n".join(top(p, 8)))


if __name__ == "__main__":
    main()
