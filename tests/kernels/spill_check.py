#!/usr/bin/env python3
"""Fail when a kernel of the library spills registers to local memory and
tests/data/kernel_spills.txt does not account for it.

The kernels build with ptxas -warn-spills, and cmake/ptxas_log.sh keeps each
compile's ptxas lines beside its object (OBJ.ptxas). This reads those files
for the given sources and compares every "Registers are spilled" warning with
the allowlist, whose lines are

    FILE | KERNEL | STORES | LOADS | why (where it is measured or explained)

(FILE a kernel source's name; KERNEL as demangled, without namespaces and
arguments, e.g. `fwd_rowwise_kernel<2, __nv_bfloat16, false, true>`; '#' starts a
comment line).

Exit 1, naming each: a spill not in the list; a spill of more bytes (stores or
loads) than its entry allows; an entry whose kernel no longer spills, or whose
FILE is not among the sources (stale: remove it); a ptxas line about spills
in another form than ptxas's (not read, so not passed); a source without a
log (an object built before the launcher: rebuild). Exit 2: usage, an
unreadable, non-UTF-8 or malformed allowlist, no c++filt. Exit 0 otherwise,
printing what was checked.

Usage: spill_check.py --objects DIR --allow FILE SOURCE.cu ...
  DIR: the kernels' object folder (CMakeFiles/normgate_kernels.dir/src);
  SOURCE.cu: the file names whose logs are DIR/SOURCE.cu.o.ptxas.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

SPILL = re.compile(r"^ptxas warning : Registers are spilled to local memory in function '([^']+)', "
                   r"(\d+) bytes spill stores, (\d+) bytes spill loads$")


def demangle(names):
    """Itanium names to C++ via c++filt (binutils); exit 2 without it."""
    if not names:
        return []
    if shutil.which("c++filt") is None:
        print("spill_check: c++filt (binutils) is not on PATH: the spilling kernels cannot be named", file=sys.stderr)
        sys.exit(2)
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    return [lines[i] if i < len(lines) and lines[i] else n for i, n in enumerate(names)]


def short_name(demangled):
    """`void ns::(anonymous namespace)::k<1, float, true>(args)` -> `k<1, float, true>`."""
    s = demangled.replace("(anonymous namespace)::", "")
    if s.startswith("void "):
        s = s[5:]
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    # Drop the namespaces (outside the template arguments).
    depth, last = 0, 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == ":" and depth == 0 and i + 1 < len(s) and s[i + 1] == ":":
            last = i + 2
    return s[last:]


def usage_error(msg):
    print("spill_check: " + msg, file=sys.stderr)
    sys.exit(2)


BYTES = re.compile(r"^[0-9]{1,9}$")


def read_allow(path):
    entries = {}
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8-sig")
    except OSError as e:
        usage_error(f"cannot read --allow {path}: {e.strerror}")
    except UnicodeDecodeError as e:
        usage_error(f"--allow {path} is not UTF-8 (byte {e.start})")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        # KERNEL may hold '|' (operator|): FILE is the first field, STORES,
        # LOADS and why the last three ('|' in why is not allowed).
        parts = [x.strip() for x in line.split("|")]
        f = [parts[0], "|".join(parts[1:-3]).strip()] + parts[-3:] if len(parts) >= 5 else parts
        if (len(f) != 5 or not f[0] or "/" in f[0] or not f[0].endswith(".cu") or not f[1]
                or not BYTES.match(f[2]) or not BYTES.match(f[3]) or not f[4]):
            usage_error(f"{path}:{n}: not 'FILE.cu | KERNEL | STORES | LOADS | why' (FILE a name without "
                        f"folders, bytes as digits): {line!r}")
        key = (f[0], f[1])
        if key in entries:
            usage_error(f"{path}:{n}: {f[0]} {f[1]} listed twice")
        entries[key] = (int(f[2]), int(f[3]))
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", required=True)
    ap.add_argument("--allow", required=True)
    ap.add_argument("sources", nargs="+")
    a = ap.parse_args()
    if not os.path.isdir(a.objects):
        print(f"spill_check: --objects {a.objects}: no such folder", file=sys.stderr)
        return 2
    allow = read_allow(a.allow)
    problems, found, raw = [], {}, []
    for src in a.sources:
        log = os.path.join(a.objects, os.path.basename(src) + ".o.ptxas")
        if not os.path.isfile(log):
            problems.append(f"{src}: no ptxas log {log} (an object built before cmake/ptxas_log.sh: rebuild it)")
            continue
        for line in open(log, encoding="utf-8", errors="replace").read().splitlines():
            m = SPILL.match(" ".join(line.split()))
            if m:
                raw.append((os.path.basename(src), m.group(1), int(m.group(2)), int(m.group(3))))
            elif "spill" in line.lower() and "0 bytes spill stores, 0 bytes spill loads" not in line:
                # A spill this script cannot read is not a spill it may pass.
                problems.append(f"{src}: a ptxas line about spills in a form this check does not know: {line!r}")
    names = demangle([r[1] for r in raw])
    for (src, _, st, ld), dn in zip(raw, names):
        key = (src, short_name(dn))
        if key in found:  # one kernel, two instantiations that print alike: the larger counts
            st, ld = max(st, found[key][0]), max(ld, found[key][1])
        found[key] = (st, ld)
    for key, (st, ld) in sorted(found.items()):
        if key not in allow:
            problems.append(f"{key[0]}: {key[1]} spills {st} bytes of stores, {ld} of loads, and "
                            f"{a.allow} does not list it (remove the spill, or list it with why)")
        elif st > allow[key][0] or ld > allow[key][1]:
            problems.append(f"{key[0]}: {key[1]} spills {st} / {ld} bytes (stores / loads), more than the "
                            f"{allow[key][0]} / {allow[key][1]} listed")
    checked = {os.path.basename(s) for s in a.sources}
    for key in sorted(allow):
        if key[0] not in checked:
            problems.append(f"{key[0]}: listed in {a.allow} ({key[1]}) but not a kernel source checked here "
                            f"(renamed or removed?): fix or remove its entry")
        elif key not in found:
            problems.append(f"{key[0]}: {key[1]} is listed in {a.allow} but no longer spills: remove its entry")
    for p in problems:
        print("spill_check: " + p)
    print(f"spill_check: {len(a.sources)} sources, {len(found)} spilling kernels, {len(allow)} listed, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
