#!/usr/bin/env python3
"""Counts the PTX instructions of each loop of the kernels whose name contains a pattern.

Usage: ptx_loop_count.py FILE.ptx PATTERN [--ops]

A loop is a label and the last branch back to it inside the same .entry; its instruction count
is every instruction from the label to that branch (inline-asm comments, labels and braces are
not instructions). --ops also prints the opcodes of the innermost loop with an mma, most
frequent first.
Why: without a disassembler on the build machine, the PTX of a kernel's hot loop is the closest
view of what each iteration issues (64-bit arithmetic and some conversions become two or more
SASS instructions and movs mostly none: sass_estimate says how it guesses).
"""
import collections
import re
import sys


def entries(lines):
    name, body = None, []
    for line in lines:
        m = re.match(r"^\.(?:visible\s+)?entry\s+(\S+)\(", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        yield name, body


def instructions(body):
    out = []  # (index in body, text) of instructions and labels
    for i, raw in enumerate(body):
        s = raw.split("//")[0].strip().strip("{}").strip()  # inline asm wraps some in braces
        if not s or s.startswith("."):
            continue
        out.append((i, s))
    return out


def loops(body):
    ins = instructions(body)
    labels = {s[:-1]: k for k, (_, s) in enumerate(ins) if s.endswith(":")}
    found = {}
    for k, (_, s) in enumerate(ins):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$\S+);", s)
        if m and m.group(1) in labels and labels[m.group(1)] < k:
            found[m.group(1)] = (labels[m.group(1)], k)
    result = []
    for label, (a, b) in found.items():
        body_ins = [s for _, s in ins[a : b + 1] if not s.endswith(":")]
        result.append((label, body_ins))
    return result


def opcode(s):
    tok = s.split()
    return tok[1] if tok[0].startswith("@") else tok[0]


def is_wide(s):
    op = opcode(s)
    return bool(re.search(r"\.(s64|u64|b64)\b", op)) or op.startswith("mul.wide")


def sass_estimate(ins):
    """A rough SASS count: movs, constant address offsets (folded into the load), negations and
    16-bit extractions (operand modifiers) cost nothing; 64-bit arithmetic other than a wide
    multiply-add costs two."""
    n = 0
    for s in ins:
        op = opcode(s)
        if op.startswith("mov.") or op in ("neg.f32", "cvt.u16.u32"):
            continue
        if op == "add.s64" and re.search(r",\s*-?\d+;$", s):
            continue
        n += 2 if is_wide(s) and not op.startswith("mad.wide") else 1
    return n


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    lines = open(sys.argv[1]).read().splitlines()
    for name, body in entries(lines):
        if sys.argv[2] not in name:
            continue
        print(name)
        found = loops(body)
        for label, ins in found:
            print(f"  loop {label}: {len(ins)} PTX instructions, SASS estimate {sass_estimate(ins)}")
        mma_loops = [t for t in found if any(s.startswith("mma.") for s in t[1])]
        if "--ops" in sys.argv and mma_loops:
            innermost = min(mma_loops, key=lambda t: len(t[1]))[1]
            ops = collections.Counter()
            for s in innermost:
                ops[opcode(s)] += 1
            for op, n in ops.most_common():
                print(f"    {n:4d} {op}")


if __name__ == "__main__":
    main()
