#!/usr/bin/env python3
"""What tools/h200.sh's audit step reproduces, picked from a gate report.

Usage: tools/audit_pick.py GATE.json

Prints one line, three fields separated by tabs:
  1. the 0-based index of the window with the highest worst err/tol (the
     largest max_err_tol over its outputs; "inf"/"nan" rank highest; ties: the
     first window), for `normgate repro --from-report GATE.json --window N`;
  2. a cancel case of that window, for the negative control
     (`normgate repro CASE --variant ctl_fp32_seq`): of the cases the report
     records for the window (its outputs' and refinement phases' worst cases)
     the cancel one with the highest err/tol (ties: the larger T), else the
     window's worst case with family=cancel (same H, T, w, form, seed);
  3. the window's label.
Exit 2 with one line on stderr when the file is not a gate report or no
window names a case.
"""
import json
import math
import sys

from report_format import format_version

OUTPUTS = ("y", "rstd", "dx", "dw")


def ratio(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return math.inf if isinstance(v, str) else 0.0  # reports spell non-finite ratios "inf" / "nan"


def fields(case_id):
    return dict(p.split("=", 1) for p in case_id.split(",") if "=" in p)


def window_worst(w):
    """(err/tol, case) of the window's worst output; (-1, "") when it names none."""
    best = (-1.0, "")
    outs = w.get("outputs") or {}
    for name in list(OUTPUTS) + sorted(k for k in outs if k not in OUTPUTS):
        o = outs.get(name)
        if isinstance(o, dict) and o.get("worst_case") and ratio(o.get("max_err_tol")) > best[0]:
            best = (ratio(o.get("max_err_tol")), o["worst_case"])
    return best


def cancel_case(w, worst_case):
    recorded = [(ratio(o.get("max_err_tol")), o.get("worst_case") or "")
                for o in (w.get("outputs") or {}).values() if isinstance(o, dict)]
    recorded += [(ratio(p.get("worst")), p.get("worst_case") or "")
                 for p in (w.get(k) for k in ("grid", "dense", "fresh")) if isinstance(p, dict)]
    cancel = [(r, int(fields(c).get("T", 0)), c) for r, c in recorded if fields(c).get("family") == "cancel"]
    if cancel:
        return max(cancel, key=lambda x: (x[0], x[1]))[2]
    parts = [p for p in worst_case.split(",") if not p.startswith("kappa=")]
    return ",".join("family=cancel" if p.startswith("family=") else p for p in parts)


def main(argv):
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path = argv[0]
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        print(f"audit_pick.py: cannot read gate report '{path}': {e}", file=sys.stderr)
        return 2
    try:
        format_version(rep, ("normgate-gate-report",))
    except ValueError as e:
        print(f"audit_pick.py: '{path}': {e}", file=sys.stderr)
        return 2
    if not isinstance(rep, dict) or not isinstance(rep.get("windows"), list):
        print(f"audit_pick.py: '{path}' is not a gate report (no 'windows' array)", file=sys.stderr)
        return 2
    best = None
    for i, w in enumerate(rep["windows"]):
        r, c = window_worst(w)
        if c and (best is None or r > best[0]):
            best = (r, i, c, w)
    if best is None:
        print(f"audit_pick.py: gate report '{path}' names no cases", file=sys.stderr)
        return 2
    _, i, worst_case, w = best
    print(f"{i}\t{cancel_case(w, worst_case)}\t{w.get('window', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
