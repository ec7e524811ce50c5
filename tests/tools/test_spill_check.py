#!/usr/bin/env python3
"""tests/kernels/spill_check.py on made-up ptxas logs: a listed spill within
its bytes passes; an unlisted one, a larger one, a stale entry (kernel or
file), a spill line it cannot read and a missing log each fail naming the
kernel or file; a malformed, non-UTF-8 or missing allowlist is exit 2."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "..", "kernels", "spill_check.py")

# Real names from an nvcc 13.0 build (the anonymous namespace's hash varies by build).
SIMPLE = ("_ZN8normgate7kernels3dev47_GLOBAL__N__085afa34_14_fwd_rowwise_cu_be4db35217fwd_simple_kernelILi1E13"
          "__nv_bfloat16Lb1EEEvNS2_7FwdRowsIT0_Lb0EEE")
WIDE = "_ZN8normgate7kernels3dev44_GLOBAL__N__df0b180f_11_fwd_wide_cu_7c8186c915fwd_wide_kernelILi4EfLb1EEEvNS2_8WideArgsIT0_EE"


def line(name, st, ld):
    return (f"ptxas warning : Registers are spilled to local memory in function '{name}', "
            f"{st} bytes spill stores, {ld} bytes spill loads\n")


def run(d, logs, allow, sources):
    for src, text in logs.items():
        with open(os.path.join(d, src + ".o.ptxas"), "w") as f:
            f.write(text)
    with open(os.path.join(d, "allow.txt"), "w") as f:
        f.write(allow)
    r = subprocess.run([sys.executable, CHECK, "--objects", d, "--allow", os.path.join(d, "allow.txt")] + sources,
                       capture_output=True, text=True)
    for src in logs:
        os.remove(os.path.join(d, src + ".o.ptxas"))
    return r


failures = []


def expect(cond, what, r):
    if not cond:
        failures.append(f"{what}\nrc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")


with tempfile.TemporaryDirectory() as d:
    allow = ("# comment\n"
             "fwd_rowwise.cu | fwd_simple_kernel<1, __nv_bfloat16, true> | 20 | 24 | why\n"
             "fwd_wide.cu | fwd_wide_kernel<4, float, true> | 8 | 8 | why\n")
    ok_logs = {"fwd_rowwise.cu": "ptxas info : something\n" + line(SIMPLE, 20, 24),
               "fwd_wide.cu": line(WIDE, 4, 8), "bwd_det_wide.cu": ""}
    r = run(d, ok_logs, allow, ["src/fwd_rowwise.cu", "src/fwd_wide.cu", "src/bwd_det_wide.cu"])
    expect(r.returncode == 0 and "3 sources, 2 spilling kernels, 2 listed, 0 problems" in r.stdout,
           "listed spills within their bytes pass", r)

    r = run(d, {"fwd_rowwise.cu": line(SIMPLE, 20, 28), "fwd_wide.cu": line(WIDE, 8, 8)}, allow,
            ["fwd_rowwise.cu", "fwd_wide.cu"])
    expect(r.returncode == 1 and "fwd_simple_kernel<1, __nv_bfloat16, true> spills 20 / 28 bytes (stores / loads), "
           "more than the 20 / 24 listed" in r.stdout, "more bytes than listed fails", r)

    r = run(d, {"fwd_rowwise.cu": line(SIMPLE, 20, 24), "fwd_wide.cu": line(WIDE, 8, 8),
                "bwd_det_wide.cu": line(WIDE.replace("fwd_wide_kernelILi4", "fwd_wide_kernelILi2"), 4, 4)},
            allow, ["fwd_rowwise.cu", "fwd_wide.cu", "bwd_det_wide.cu"])
    expect(r.returncode == 1 and "bwd_det_wide.cu: fwd_wide_kernel<2, float, true> spills 4 bytes of stores, 4 of "
           "loads, and" in r.stdout, "an unlisted spill fails", r)

    r = run(d, {"fwd_rowwise.cu": "", "fwd_wide.cu": line(WIDE, 8, 8)}, allow, ["fwd_rowwise.cu", "fwd_wide.cu"])
    expect(r.returncode == 1 and "fwd_rowwise.cu: fwd_simple_kernel<1, __nv_bfloat16, true> is listed" in r.stdout
           and "no longer spills: remove its entry" in r.stdout, "a stale entry fails", r)

    r = run(d, {"fwd_wide.cu": line(WIDE, 8, 8)}, allow, ["fwd_rowwise.cu", "fwd_wide.cu"])
    expect(r.returncode == 1 and "fwd_rowwise.cu: no ptxas log" in r.stdout, "a missing log fails", r)

    r = run(d, {"fwd_wide.cu": line(WIDE, 8, 8)}, "fwd_wide.cu | fwd_wide_kernel<4, float, true> | 8 | 8\n",
            ["fwd_wide.cu"])
    expect(r.returncode == 2 and "allow.txt:1: not 'FILE.cu | KERNEL | STORES | LOADS | why'" in r.stderr,
           "an entry without why is a malformed allowlist", r)

    r = run(d, {"fwd_wide.cu": line(WIDE, 8, 8)},
            "fwd_wide.cu | fwd_wide_kernel<4, float, true> | 8 | 8 | why\ngone.cu | k<1> | 4 | 4 | why\n",
            ["fwd_wide.cu"])
    expect(r.returncode == 1 and "gone.cu: listed in" in r.stdout and "not a kernel source checked here" in r.stdout,
           "an entry for a file not checked is stale", r)

    r = run(d, {"fwd_wide.cu": line(WIDE, 8, 8) + "ptxas Warning: Registers spilled, 4 bytes\n"},
            "fwd_wide.cu | fwd_wide_kernel<4, float, true> | 8 | 8 | why\n", ["fwd_wide.cu"])
    expect(r.returncode == 1 and "a ptxas line about spills in a form this check does not know" in r.stdout,
           "a spill line in another form is not passed", r)

    with open(os.path.join(d, "bad.txt"), "wb") as f:
        f.write(b"fwd_wide.cu | k | 8 | 8 | caf\xe9\n")
    r = subprocess.run([sys.executable, CHECK, "--objects", d, "--allow", os.path.join(d, "bad.txt"), "fwd_wide.cu"],
                       capture_output=True, text=True)
    expect(r.returncode == 2 and "is not UTF-8" in r.stderr, "a non-UTF-8 allowlist is exit 2", r)
    r = subprocess.run([sys.executable, CHECK, "--objects", d, "--allow", os.path.join(d, "none.txt"), "fwd_wide.cu"],
                       capture_output=True, text=True)
    expect(r.returncode == 2 and "cannot read --allow" in r.stderr, "a missing allowlist is exit 2", r)

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("spill_check: 10 cases as expected")
