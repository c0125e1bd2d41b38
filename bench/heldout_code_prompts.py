#!/usr/bin/env python3
"""Print held-out code prompts for the demo pair, one per line, in bench/prompts' escaped form.

The demo target and drafter were trained on Python packages of the GPU machine's image with a
few packages held out (train/README.md: functorch, stdlib.ctypes, botorch_community, numpyro,
narwhals, stdlib.collections), and the drafter's tau was measured on the starts of held-out
files. This script rebuilds prompts of that kind from whichever of those packages the running
Python has, so no third-party source is committed here: the start of each file (whole lines,
about 450 characters, roughly 128 tokens), files in a fixed pseudo-random order.

Output: one prompt per line, backslashes doubled and newlines as \\n (what bench/spec_demo.sh
expands with printf %b).
Usage: bench/heldout_code_prompts.py [--max N] [--chars C]
"""
import argparse
import hashlib
import importlib.util
import os
import sys
import sysconfig

HELD_OUT_STDLIB = ["ctypes", "collections"]
HELD_OUT_PACKAGES = ["functorch", "botorch_community", "numpyro", "narwhals"]


def package_dirs():
    stdlib = sysconfig.get_paths()["stdlib"]
    for name in HELD_OUT_STDLIB:
        d = os.path.join(stdlib, name)
        if os.path.isdir(d):
            yield name, d
    for name in HELD_OUT_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            yield name, list(spec.submodule_search_locations)[0]


def python_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "test", "tests"))
        for f in sorted(filenames):
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


def file_start(path, chars):
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        return None
    if len(text) < 4 * chars:  # small files are mostly imports: not what the drafter was measured on
        return None
    out = ""
    for line in text.splitlines(keepends=True):
        if len(out) + len(line) > chars:
            break
        out += line
    return out if len(out) >= chars // 2 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=24, help="number of prompts (default 24)")
    ap.add_argument("--chars", type=int, default=450, help="characters per prompt, whole lines (default 450)")
    args = ap.parse_args()
    files = []
    found = []
    for name, d in package_dirs():
        found.append(name)
        files += [(name + "/" + os.path.relpath(p, d), p) for p in python_files(d)]
    if not files:
        sys.exit("heldout_code_prompts.py: none of the held-out packages is installed here")
    files.sort(key=lambda f: hashlib.sha1(f[0].encode()).hexdigest())  # by package-relative name: the same order anywhere
    n = 0
    for _, path in files:
        start = file_start(path, args.chars)
        if start is None:
            continue
        print(start.replace("\\", "\\\\").replace("\n", "\\n"))
        n += 1
        if n == args.max:
            break
    print(f"heldout_code_prompts.py: {n} prompts from {', '.join(found)}", file=sys.stderr)


if __name__ == "__main__":
    main()
