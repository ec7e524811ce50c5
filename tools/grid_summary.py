#!/usr/bin/env python3
"""Summarize the progress lines of `normgate check --quiet` grid logs.

Each case line looks like
  [12/144 8.31s] H=2048,T=65537,...,family=normal,seed=0  bwd_det_chunked:pass(dw 0.155)  ...
This prints, per (implementation, family), the cases seen, how many failed,
the worst dw err/tol and its case: a table for runs that were cut short
before `normgate check` could write its own --md table.

Usage: tools/grid_summary.py LOG [LOG ...]
"""
import re
import sys

line_re = re.compile(r"^\[(\d+)/(\d+) ([0-9.]+)s\] (\S+)\s+(.*)$")
impl_re = re.compile(r"(\S+):(pass|FAIL)\(dw ([^)]+)\)")


def main(paths):
    agg = {}
    order = []
    seconds = 0.0
    for path in paths:
        with open(path) as f:
            for line in f:
                m = line_re.match(line.strip())
                if not m:
                    continue
                seconds += float(m.group(3))
                case = m.group(4)
                fam = dict(kv.split("=", 1) for kv in case.split(","))["family"]
                for impl, verdict, dw in impl_re.findall(m.group(5)):
                    key = (impl, fam)
                    if key not in agg:
                        agg[key] = {"cases": 0, "failed": 0, "dw": -1.0, "worst": ""}
                        order.append(key)
                    a = agg[key]
                    a["cases"] += 1
                    a["failed"] += verdict == "FAIL"
                    v = float(dw)
                    if v > a["dw"]:
                        a["dw"], a["worst"] = v, case
    print("| impl | family | cases | failed | max dw err/tol | worst dw case |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key in sorted(order, key=lambda k: order.index(k)):
        a = agg[key]
        print(f"| {key[0]} | {key[1]} | {a['cases']} | {a['failed']} | {a['dw']:.3g} | {a['worst']} |")
    print(f"\n{seconds:.0f} s of case time in {len(paths)} log(s)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
