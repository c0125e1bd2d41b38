#!/usr/bin/env python3
"""Counts the SASS instructions of a cubin's kernels by stretch between branches, without a
disassembler (none is installed on the build machines).

Usage: sass_regions.py FILE.cubin PATTERN [--all] [--ops A B]

For each kernel whose section name contains PATTERN: its instruction count, its local-memory
loads and stores (spills), and each stretch between two branches (BRA or EXIT) that holds an
mma (IMMA), with its counts of IMMA, global loads and spill loads / stores; --all prints every
stretch. --ops A B prints the opcode histogram of instructions A..B-1 of the kernel.
A super-block loop's step is one or a few consecutive stretches, so this gives its exact SASS
size, and shows whether the spills ptxas -v reports sit in the loop or around it.

Make the cubin with the build's nvcc flags plus `-cubin -arch=sm_90a` (see ptx_loop_count.py).
How: Volta and later encode each instruction in 128 bits, the opcode in the low 12 bits of the
first word. The opcode values below were read off sm_90a cubins by matching ptxas -v spill
counts and the PTX's mma / load counts; others print as hex.
"""
import collections
import struct
import sys

NAMES = {0x237: "IMMA", 0x981: "LDG", 0x983: "LDL", 0x387: "STL", 0x947: "BRA", 0x94D: "EXIT",
         0x984: "LDS", 0x388: "STS", 0x224: "IMAD", 0x824: "IMAD.imm", 0x212: "LOP3", 0x812: "LOP3.imm",
         0x216: "PRMT", 0x816: "PRMT.imm", 0x219: "SHF", 0x819: "SHF.imm", 0x210: "IADD3", 0x810: "IADD3.imm",
         0x223: "FFMA", 0x220: "FMUL", 0x221: "FADD", 0x245: "I2F"}


def kernels(path, pattern):
    data = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    for name, _, _, _, offset, size in secs:
        raw = data[strtab + name:]
        n = raw[: raw.index(b"\0")].decode()
        if n.startswith(".text.") and pattern in n:
            yield n[len(".text."):], [struct.unpack_from("<Q", data, offset + k)[0] & 0xFFF for k in range(0, size, 16)]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for name, ops in kernels(sys.argv[1], sys.argv[2]):
        print(f"{name}: {len(ops)} instructions, {ops.count(0x983)} LDL, {ops.count(0x387)} STL")
        if "--ops" in sys.argv:
            k = sys.argv.index("--ops")
            a, b = int(sys.argv[k + 1]), int(sys.argv[k + 2])
            hist = collections.Counter(ops[a:b]).most_common()
            print(f"  [{a},{b}): " + " ".join(f"{NAMES.get(o, hex(o))}:{c}" for o, c in hist))
            continue
        start = 0
        for end in [i + 1 for i, o in enumerate(ops) if o in (0x947, 0x94D)] + [len(ops)]:
            seg = ops[start:end]
            if seg and ("--all" in sys.argv or 0x237 in seg):
                print(f"  [{start},{end}) {len(seg)}: IMMA {seg.count(0x237)}, LDG {seg.count(0x981)}, "
                      f"LDL {seg.count(0x983)}, STL {seg.count(0x387)}")
            start = end


if __name__ == "__main__":
    main()
