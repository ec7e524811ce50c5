#!/usr/bin/env python3
"""One main-job table from several `normgate check --json` grid files.

`tools/h200.sh` runs the grid one (T, H[, w]) at a time, so a grid that
spans several runs leaves one JSON file per piece. This reads
them all (plain or .gz) and prints, per (T, implementation, family), what
`normgate check --md` prints per file: cases, failed, inconclusive, max
err/tol of y, rstd, dx and dw, the forced share of y, dx and dw (the
FP32-rstd/BF16 interface's own err/tol at the worst element, i.e. the ideal
kernel's, over the worst err/tol; 1.00 = the whole error is forced; it can
exceed 1 where our rounding happened to land closer than the ideal one), the
worst "dw vs FP32" ratio and the worst dw case.

Usage: tools/grid_table.py FILE.json[.gz] [...]   (Markdown on stdout)
Non-finite err/tol ("inf", "nan" in the JSON) count as the worst. Exit 2
naming the file when one cannot be read or is not a grid report, or when a
(case, implementation) appears in two files.
"""
import gzip
import json
import math
import re
import sys

from report_format import format_version

OUTPUTS = ("y", "rstd", "dx", "dw")


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(2)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"grid_table: cannot read {path}: {e}")
    if not isinstance(data, list) or not all(isinstance(c, dict) and "case" in c and "impls" in c for c in data):
        fail(f"grid_table: {path} is not a `normgate check --json` grid report (a list of cases)")
    for i, c in enumerate(data):
        try:
            format_version(c, ("normgate-check-report",))
        except ValueError as e:
            fail(f"grid_table: {path}: case {i}: {e}")
    return data


def num(v):
    """A JSON number, or normgate's "inf"/"-inf"/"nan" strings for non-finite values."""
    if isinstance(v, str):
        return float(v)  # "inf", "-inf", "nan"
    return float(v)


def worse(a, b):
    """Whether err/tol a is worse than b (NaN, a non-finite comparison, counts as worst)."""
    if math.isnan(a):
        return not math.isnan(b)
    return not math.isnan(b) and a > b


def case_T(case):
    m = re.search(r"(?:^|,)T=(\d+)", case)
    return int(m.group(1)) if m else -1


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    agg = {}  # (T, impl, family) -> dict
    order = []
    seen = {}  # (case, impl) -> file that had it: a case counts once
    for p in paths:
        for c in load(p):
            fam = re.search(r"family=(\w+)", c["case"]).group(1)
            for ir in c["impls"]:
                if (c["case"], ir["impl"]) in seen:
                    fail(f"grid_table: {c['case']} {ir['impl']} is in both {seen[(c['case'], ir['impl'])]} and {p}")
                seen[(c["case"], ir["impl"])] = p
                key = (case_T(c["case"]), ir["impl"], fam)
                if key not in agg:
                    agg[key] = {"cases": 0, "failed": 0, "inconclusive": 0, "ratio": {o: -1.0 for o in OUTPUTS},
                                "forced": {o: 0.0 for o in OUTPUTS}, "worst_dw_case": "", "vs_fp32": 0.0}
                    order.append(key)
                a = agg[key]
                a["cases"] += 1
                verdict = ir.get("verdict", "pass" if ir.get("pass") else "fail")
                a["failed"] += verdict == "fail"
                a["inconclusive"] += verdict == "inconclusive"
                for o in OUTPUTS:
                    s = ir["outputs"].get(o)
                    if s is None:
                        continue
                    if worse(num(s["max_ratio"]), a["ratio"][o]):
                        a["ratio"][o] = num(s["max_ratio"])
                        a["forced"][o] = num(s.get("forced", 0.0))
                        if o == "dw":
                            a["worst_dw_case"] = c["case"]
                v = ir.get("dw_vs_fp32_worst")
                if v is not None and worse(num(v), a["vs_fp32"]):
                    a["vs_fp32"] = num(v)
    print("| T | impl | family | cases | failed | inconclusive | y | rstd | dx | dw | forced share y / dx / dw "
          "| dw vs FP32 | worst dw case |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    impl_rank = {}
    for _, impl, _ in order:
        impl_rank.setdefault(impl, len(impl_rank))
    fam_rank = {"normal": 0, "llm": 1, "cancel": 2}
    for key in sorted(order, key=lambda k: (k[0], impl_rank[k[1]], fam_rank.get(k[2], 9))):
        T, impl, fam = key
        a = agg[key]
        r = a["ratio"]
        share = " / ".join("%.2f" % (a["forced"][o] / r[o]) if 0 < r[o] < math.inf else "-" for o in ("y", "dx", "dw"))
        cells = [str(T), impl, fam, str(a["cases"]), str(a["failed"]), str(a["inconclusive"])]
        cells += ["%.3g" % r[o] if (math.isnan(r[o]) or r[o] >= 0) else "-" for o in OUTPUTS]
        cells += [share, "%.3g" % a["vs_fp32"], a["worst_dw_case"]]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
