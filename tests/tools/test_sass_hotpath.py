#!/usr/bin/env python3
"""tools/sass_hotpath.py on a made-up disassembly (no CUDA needed): the loop
is the widest backward branch; an iteration counts the instructions on the
path the given branch directions take (taken and not taken give different,
hand-counted totals), by class and source line; an undecided branch on the
path, a kernel pattern matching none or two functions, a bad address, one
that is not a branch of the loop and a missing file are exit 2 naming the value, before any output."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "sass_hotpath.py")

SASS = """
//--------------------- .text._Z6kernelA --------------------------
_Z6kernelA:
	//## File "/src/k.cu", line 10
        /*0000*/                   MOV R0, RZ ;
.L_x_1:
	//## File "/src/k.cu", line 20
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   FFMA R0, R2, R2, R0 ;
	//## File "/src/k.cu", line 21
        /*0030*/                   ISETP.GE.AND P0, PT, R2, RZ, PT ;
        /*0040*/                   @P0 BRA `(.L_x_2) ;
	//## File "/src/k.cu", line 22
        /*0050*/                   DMUL R6, R6, R6 ;
        /*0060*/                   F2F.F64.F32 R8, R2 ;
        /*0070*/                   IADD3 R3, R3, 0x1, RZ ;
.L_x_2:
	//## File "/src/k.cu", line 23
        /*0080*/                   SHFL.BFLY PT, R9, R0, 0x1, 0x1f ;
        /*0090*/                   UIADD3 UR5, UR5, 0x1, URZ ;
        /*00a0*/                   @!P1 BRA `(.L_x_3) ;
        /*00b0*/                   BRA `(.L_x_4) ;
.L_x_3:
        /*00c0*/                   STG.E desc[UR4][R4.64], R0 ;
.L_x_4:
        /*00d0*/                   ISETP.NE.AND P2, PT, R3, 0x10, PT ;
        /*00e0*/                   @P2 BRA `(.L_x_1) ;
        /*00f0*/                   EXIT ;
.L_x_5:
        /*0100*/                   BRA `(.L_x_5) ;
//--------------------- .text._Z6kernelB --------------------------
_Z6kernelB:
        /*0000*/                   EXIT ;
"""


def run(*args, sass=SASS):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.sass")
        with open(p, "w") as f:
            f.write(sass)
        r = subprocess.run([sys.executable, TOOL, "--sass", p, *args], capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr


def main():
    fails = []

    def check(cond, what):
        if not cond:
            fails.append(what)

    # --list: the loop and its conditional branches (not the back edge's loop-closing one beyond it).
    rc, out, err = run("--kernel", "kernelA", "--list")
    check(rc == 0, f"--list rc {rc}: {err}")
    check("head .L_x_1 (00010), back edge 000e0" in out, f"--list loop: {out}")
    check("00040" in out and "000a0" in out and "000e0" not in out.split("back edge")[1].split("\n", 1)[1],
          f"--list branches: {out}")
    # Branch at 0040 taken (skip 0050-0070), 00a0 taken (store): 0010-0040 (4) + 0080-00a0 (3) + 00c0-00e0 (3) = 10.
    rc, out, err = run("--kernel", "kernelA", "--taken", "40,a0", "--elements", "2", "--json")
    check(rc == 0, f"taken rc {rc}: {err}")
    j = json.loads(out) if rc == 0 else {}
    check(j.get("instructions") == 10, f"taken path: {j.get('instructions')} instructions, want 10")
    check(j.get("per_element") == 5.0, f"per element {j.get('per_element')}")
    check(j.get("by_class", {}).get("fp64") == 0 and j.get("by_class", {}).get("memory") == 2,
          f"taken classes {j.get('by_class')}")
    check(j.get("by_line", {}).get("k.cu:23") == 6, f"taken by line {j.get('by_line')}")
    # 0040 not taken (DMUL, F2F, IADD3 counted), 00a0 not taken (the jump over the store): 4 + 3 + 4 + 2 = 13.
    rc, out, err = run("--kernel", "kernelA", "--not-taken", "0040,00a0", "--json")
    j = json.loads(out) if rc == 0 else {}
    check(j.get("instructions") == 13, f"not-taken path: {j.get('instructions')} instructions, want 13 ({err})")
    bc = j.get("by_class", {})
    check(bc.get("fp64") == 1 and bc.get("convert") == 1 and bc.get("control") == 4 and bc.get("uniform") == 1
          and bc.get("shuffle") == 1 and bc.get("fp32") == 1 and bc.get("memory") == 1 and bc.get("int/logic") == 3,
          f"not-taken classes {bc}")
    # Usage errors: exit 2, a message naming the value, nothing on stdout.
    for args, needle in [
        (("--kernel", "kernelA", "--taken", "40"), "000a0"),              # undecided branch on the path
        (("--kernel", "kernelA", "--taken", "40,a0,50"), "00050"),        # not a branch of the loop
        (("--kernel", "kernel"), "matches 2 functions"),
        (("--kernel", "nosuch"), "matches 0 functions"),
        (("--kernel", "kernelA", "--taken", "4g"), "'4g'"),
        (("--kernel", "kernelA", "--taken", "40", "--not-taken", "40,a0"), "00040"),
        (("--kernel", "kernelA", "--elements", "0"), "--elements 0"),
        (("--kernel", "kernelB"), "no loop"),
        (("--kernel", "kernelA", "--head", ".L_x_9"), ".L_x_9"),
    ]:
        rc, out, err = run(*args)
        check(rc == 2 and needle in err and out == "", f"{args}: rc {rc}, stdout {out!r}, stderr {err!r}")
    r = subprocess.run([sys.executable, TOOL, "--sass", "/nonexistent/k.sass", "--kernel", "x"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "/nonexistent/k.sass" in r.stderr, f"missing file: {r.returncode} {r.stderr}")
    for f in fails:
        print("FAIL:", f)
    print("ok" if not fails else f"{len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
