#!/usr/bin/env python3
"""Summarize the progress lines of `normgate check --quiet` grid logs.

Each case line looks like
  [12/144 8.31s] H=2048,T=65537,...,family=normal,seed=0  bwd_det_chunked:pass(dw 0.155)  ...
This prints, per (implementation, family), the cases seen, how many failed,
the worst dw err/tol and its case: a table for runs that were cut short
before `normgate check` could write its own --md table.

Usage: tools/grid_summary.py LOG [LOG ...]
Exit 0; 2 for a usage error or a log that cannot be read (named). Lines that
are not case lines are skipped; a case line without family=, or with a dw
or time that is not a number, is skipped and counted on stderr. A NaN dw
ranks worst.
"""
import argparse
import math
import re
import sys

line_re = re.compile(r"^\[(\d+)/(\d+) ([0-9.]+)s\] (\S+)\s+(.*)$")
impl_re = re.compile(r"(\S+):(pass|FAIL)\(dw ([^)]+)\)")


def main(paths):
    agg = {}
    order = []
    seconds = 0.0
    bad = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            print(f"grid_summary: cannot read {path!r}: {e.strerror or e}", file=sys.stderr)
            return 2
        for line in lines:
            m = line_re.match(line.strip())
            if not m:
                continue
            case = m.group(4)
            try:
                fam = dict(kv.split("=", 1) for kv in case.split(","))["family"]
                found = [(impl, verdict, float(dw)) for impl, verdict, dw in impl_re.findall(m.group(5))]
                secs = float(m.group(3))
            except (KeyError, ValueError):
                bad += 1
                continue
            seconds += secs
            for impl, verdict, v in found:
                key = (impl, fam)
                if key not in agg:
                    agg[key] = {"cases": 0, "failed": 0, "dw": None, "worst": ""}
                    order.append(key)
                a = agg[key]
                a["cases"] += 1
                a["failed"] += verdict == "FAIL"
                if a["dw"] is None or math.isnan(v) or (not math.isnan(a["dw"]) and v > a["dw"]):
                    a["dw"], a["worst"] = v, case
    if bad:
        print(f"grid_summary: {bad} malformed case line(s) skipped (no family=, or a dw or time that is not a number)",
              file=sys.stderr)
    print("| impl | family | cases | failed | max dw err/tol | worst dw case |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key in order:
        a = agg[key]
        print(f"| {key[0]} | {key[1]} | {a['cases']} | {a['failed']} | {a['dw']:.3g} | {a['worst']} |")
    print(f"\n{seconds:.0f} s of case time in {len(paths)} log(s)")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="grid_summary.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", metavar="LOG", help="normgate check --quiet logs")
    sys.exit(main(ap.parse_args().logs))
