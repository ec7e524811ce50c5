#!/usr/bin/env python3
"""Static instruction count of a kernel's hot loop, by class and source line.

Reads one kernel's SASS (nvdisasm -g -c output, or a cubin it disassembles),
finds its main loop (the backward branch spanning the most instructions, or
--head), and walks one iteration from the loop head to the back edge along
the branch directions given with --taken / --not-taken (unconditional
branches are followed). Every instruction on that path counts once: the
instructions one warp issues for one iteration when the branches go that way
(predicated-off instructions still issue). Divided by --elements (elements a
thread handles per iteration), it is the per-element issue count Nsight
Compute's "instructions executed" gives for a kernel whose time is in that
loop (docs/perf/backward.md, D16, compares both).

  tools/sass_hotpath.py --cubin k.cubin --kernel 'bwd_lean_kernelILb1E' --list
  tools/sass_hotpath.py --cubin k.cubin --kernel 'bwd_lean_kernelILb1E' \\
      --taken 00ef0,01ed0,02ef0 --not-taken 01010,01920 --elements 8

A cubin: nvcc -cubin -arch=sm_90a -lineinfo ... (the build's flags). nvdisasm
is looked up on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin, then in the
triton package (which bundles one). Exit 2 for usage errors (a kernel pattern
matching no function or several, an undecided branch on the path, an address
that is not one of the loop's conditional branches, an unreadable file),
before any output."""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys

CLASSES = ("int/logic", "fp32", "fp64", "convert", "memory", "shuffle", "uniform", "control")


class UsageError(Exception):
    pass


def nvdisasm_path():
    found = shutil.which("nvdisasm")
    if found:
        return found
    for d in (os.path.join(os.environ.get("CUDA_HOME", ""), "bin"), "/usr/local/cuda/bin"):
        p = os.path.join(d, "nvdisasm")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    try:
        import triton  # noqa: F401  (bundles nvdisasm with its NVIDIA backend)
        p = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
        if os.path.isfile(p):
            return p
    except ImportError:
        pass
    raise UsageError("nvdisasm not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, triton); pass --sass instead")


def read_sass(args):
    if args.sass:
        try:
            with open(args.sass, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError as e:
            raise UsageError(f"--sass {args.sass}: {e.strerror}")
    if not os.path.isfile(args.cubin):
        raise UsageError(f"--cubin {args.cubin}: no such file")
    r = subprocess.run([nvdisasm_path(), "-g", "-c", args.cubin], capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"nvdisasm failed on {args.cubin}: {r.stderr.strip()[:300]}")
    return r.stdout


def functions(text):
    """name -> (instructions [(addr, 'file:line', text)], labels {label: index})."""
    out = {}
    name = None
    src = None
    for line in text.split("\n"):
        m = re.match(r"//-+ \.text\.(\S+) -+", line)
        if m:
            name = m.group(1)
            out[name] = ([], {})
            src = None
            continue
        if name is None:
            continue
        ins, labels = out[name]
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            src = os.path.basename(m.group(1)) + ":" + m.group(2)
            continue
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), src or "?", m.group(2)))
    return out


BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+`\((\.L_x_\d+)\)")


def classify(text):
    op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
    base = op.split(".")[0]
    if base in ("BRA", "BSSY", "BSYNC", "BAR", "DEPBAR", "EXIT", "CALL", "RET", "NOP", "WARPSYNC", "VOTEU", "VOTE",
                "LDGDEPBAR", "YIELD"):
        return "control", base
    if base.startswith("U") or base in ("R2UR", "S2UR"):
        return "uniform", base
    if base.startswith("D"):
        return "fp64", base
    if base in ("F2F", "F2FP", "I2F", "F2I", "I2FP", "F2IP"):
        return "convert", base
    if base in ("FADD", "FMUL", "FFMA", "FSETP", "FSEL", "FMNMX", "MUFU", "FCHK", "FSWZADD"):
        return "fp32", base
    if base in ("LDG", "STG", "LDS", "STS", "LDGSTS", "LDC", "LD", "ST", "LDL", "STL", "LDSM", "ATOM", "ATOMS",
                "RED", "UBLKPF"):
        return "memory", base
    if base == "SHFL":
        return "shuffle", base
    return "int/logic", base


def find_loop(ins, labels, head):
    if head:
        if head not in labels:
            raise UsageError(f"--head {head}: no such label in the kernel")
        backs = [i for i, (_, _, t) in enumerate(ins)
                 if (m := BRANCH.match(t)) and m.group(2) == head and i >= labels[head]]
        if not backs:
            raise UsageError(f"--head {head}: no backward branch to it")
        return head, ins[max(backs)][0]
    best = None
    for i, (a, _, t) in enumerate(ins):
        m = BRANCH.match(t)
        if m and m.group(2) in labels and labels[m.group(2)] <= i:
            span = i - labels[m.group(2)]
            if best is None or span > best[0]:
                best = (span, m.group(2), a)
    if best is None:
        raise UsageError("the kernel has no loop (no backward branch)")
    return best[1], best[2]


def walk(ins, labels, head, back, decide):
    i = labels[head]
    path = []
    while True:
        a, src, t = ins[i]
        path.append(i)
        if a == back:
            return path
        m = BRANCH.match(t)
        if m:
            taken = True if not m.group(1) else decide.get(a)
            if taken is None:
                raise UsageError(f"branch {a:05x} ({src}: {t}) is on the path and undecided: "
                                 f"add it to --taken or --not-taken")
            if taken:
                i = labels[m.group(2)]
                continue
        i += 1
        if i >= len(ins) or len(path) > 100000:
            raise UsageError("the walk left the loop without reaching its back edge (check the branch directions)")


def addrs(s, flag):
    out = []
    for tok in filter(None, (s or "").split(",")):
        try:
            out.append(int(tok, 16))
        except ValueError:
            raise UsageError(f"{flag}: {tok!r} is not a hexadecimal address")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--cubin", help="a cubin to disassemble (nvdisasm -g -c)")
    src.add_argument("--sass", help="nvdisasm -g -c output already written")
    ap.add_argument("--kernel", required=True, help="regular expression matching exactly one function name")
    ap.add_argument("--head", help="the loop head label (.L_x_N); default: the widest backward branch")
    ap.add_argument("--list", action="store_true", help="list the loop's conditional branches and stop")
    ap.add_argument("--taken", help="comma-separated hex addresses of conditional branches taken")
    ap.add_argument("--not-taken", help="comma-separated hex addresses of conditional branches not taken")
    ap.add_argument("--elements", type=int, default=1, help="elements a thread handles per iteration (>= 1)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args()
    try:
        if args.elements < 1:
            raise UsageError(f"--elements {args.elements}: must be >= 1")
        try:
            pat = re.compile(args.kernel)
        except re.error as e:
            raise UsageError(f"--kernel {args.kernel!r}: {e}")
        taken, not_taken = addrs(args.taken, "--taken"), addrs(args.not_taken, "--not-taken")
        both = set(taken) & set(not_taken)
        if both:
            raise UsageError("both --taken and --not-taken: " + ", ".join(f"{a:05x}" for a in sorted(both)))
        funcs = functions(read_sass(args))
        names = [n for n in funcs if pat.search(n)]
        if len(names) != 1:
            raise UsageError(f"--kernel {args.kernel!r} matches {len(names)} functions"
                             + (": " + ", ".join(names[:5]) if names else f" of {len(funcs)}"))
        ins, labels = funcs[names[0]]
        head, back = find_loop(ins, labels, args.head)
        lo = ins[labels[head]][0]
        if args.list:
            print(f"{names[0]}\nloop: head {head} ({lo:05x}), back edge {back:05x}")
            for a, s, t in ins:
                if lo <= a < back and BRANCH.match(t) and BRANCH.match(t).group(1):
                    print(f"  {a:05x}  {s:32s} {t}")
            return 0
        decide = {a: True for a in taken}
        decide.update({a: False for a in not_taken})
        branches = {a for a, _, t in ins if lo <= a < back and BRANCH.match(t) and BRANCH.match(t).group(1)}
        unknown = sorted(set(decide) - branches)
        if unknown:
            raise UsageError("not a conditional branch of the loop: " + ", ".join(f"{a:05x}" for a in unknown) +
                             " (--list shows them)")
        path = walk(ins, labels, head, back, decide)
    except UsageError as e:
        print(f"sass_hotpath: {e}", file=sys.stderr)
        return 2
    by_class = collections.Counter()
    by_line = collections.Counter()
    by_op = collections.Counter()
    for i in path:
        c, op = classify(ins[i][2])
        by_class[c] += 1
        by_line[ins[i][1]] += 1
        by_op[op] += 1
    n = len(path)
    if args.json:
        print(json.dumps({"kernel": names[0], "head": head, "back_edge": f"{back:05x}", "instructions": n,
                          "elements": args.elements, "per_element": n / args.elements,
                          "by_class": {c: by_class[c] for c in CLASSES},
                          "by_line": dict(by_line.most_common()), "by_opcode": dict(by_op.most_common())}, indent=1))
        return 0
    print(f"{names[0]}\nloop {head} .. {back:05x}: {n} instructions an iteration, "
          f"{n / args.elements:.1f} an element ({args.elements} elements a thread)")
    for c in CLASSES:
        print(f"  {c:10s} {by_class[c]:5d}  {by_class[c] / args.elements:5.1f} an element")
    print("source lines (most first):")
    for s, k in by_line.most_common(15):
        print(f"  {s:36s} {k:5d}")
    print("opcodes: " + ", ".join(f"{o} {k}" for o, k in by_op.most_common(20)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
