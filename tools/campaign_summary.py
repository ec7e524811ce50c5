#!/usr/bin/env python3
"""One table over the gate reports of a campaign (every slice's
`normgate gate --report-json`), for the campaign's summary in
docs/results/campaigns/ (summary.md).

Usage: tools/campaign_summary.py REPORT.json [REPORT.json ...] [--table TABLE.toml] [--md OUT.md]

Rows: one per window (by its name, e.g. "bwd det H=6144 w=bf16 form=res
T=1..131072"), in route-line order: route (file:line), variant and the first
12 hex digits of its source hash, cases, max err/tol of y, rstd, dx, dw (the
window's worst per output over grid and refinement), the worst output's case,
the verdict, and the report it comes from. A window in several reports (a
re-gate) is taken from the latest report by date; the others are listed as
superseded. The header gives every report's device, driver, CUDA runtime,
seeds, commit and date; the footer the totals and how close the worst element
came to its budget. With --table (the route table the campaign gates), every
route of the table that no report covers is a row too, verdict "not gated",
and the footer counts them: the summary of an unfinished campaign says what
is left. Exit 0 when every window passes (and, with --table, every route is
gated), 1 when one fails or a route is not gated, 2 for usage errors (a file
that is not a gate report, a table that is not TOML), 3 when OUT cannot be
written (nothing left at OUT). Writes OUT atomically. A window passes when
its report says pass and its verdict is pass. err/tol values the reports
spell "inf" or "nan" (docs/schemas.md) are shown so.
"""
import json
import math
import os
from collections import Counter
import sys

from out_file import check_out, write_text
from report_format import format_version

OUTS = ("y", "rstd", "dx", "dw")


def die(msg):
    print(f"campaign_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            r = json.load(f)
        format_version(r, ("normgate-gate-report",))
        if not isinstance(r, dict) or not isinstance(r.get("windows"), list) or "date" not in r:
            raise ValueError("no windows/date: not a normgate gate report")
        if not isinstance(r["date"], str):
            raise ValueError(f"date {r['date']!r} is not a string")
        if not isinstance(r.get("device") or {}, dict):
            raise ValueError(f"device {r.get('device')!r} is not an object")
        for k, w in enumerate(r["windows"]):
            if not isinstance(w, dict) or not isinstance(w.get("window"), str):
                raise ValueError(f"windows[{k}] has no window name: not a normgate gate report")
            outs = w.get("outputs") or {}
            if not isinstance(w.get("route", ""), str) or not isinstance(outs, dict) or \
                    not all(isinstance(v, dict) for v in outs.values()) or not isinstance(w.get("worst") or {}, dict):
                raise ValueError(f"windows[{k}] ({w['window']}): route, outputs or worst malformed")
            try:
                int(w.get("cases") or 0)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"windows[{k}] ({w['window']}): cases {w.get('cases')!r} is not a count") from None
    except (OSError, ValueError, RecursionError) as e:
        die(f"{path}: {e}")
    return r


def num(v):
    """A report's err/tol: a number, or the strings "inf" / "nan" (docs/schemas.md)."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def passed(w):
    """A window passes when the report says so twice: pass, and verdict pass."""
    return w.get("pass") is True and str(w.get("verdict", "pass")).lower() == "pass"


def route_key(route):
    """(file name, line) of 'path/to/table.toml:87', for ordering and display."""
    path, _, line = route.rpartition(":")
    try:
        return os.path.basename(path), int(line)
    except ValueError:
        return os.path.basename(route), 0


def summarize(paths):
    reports = [(p, load(p)) for p in paths]
    chosen, superseded = {}, []
    for p, r in reports:
        for w in r["windows"]:
            name = w["window"]
            prev = chosen.get(name)
            if prev is None or r["date"] > prev[1]["date"]:
                if prev is not None:
                    superseded.append((name, prev[0], prev[1]["date"]))
                chosen[name] = (p, r, w)
            else:
                superseded.append((name, p, r["date"]))
    rows = sorted(chosen.values(), key=lambda t: route_key(t[2].get("route", "")))
    return reports, rows, superseded


def table_windows(path):
    """[(route 'path:line', window name, variant)] of a route table, in file
    order; names as the gate's reports spell them ('bwd det H=2048 w=bf16
    form=plain T=1..65536'; fwd routes have no mode). Lines: the k-th line
    that opens a route entry ('{ op = ...'), the table's one-route-a-line
    layout (else the route's index)."""
    import re
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        die(f"--table needs Python 3.11 or later (tomllib); this is {sys.version.split()[0]}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        t = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        die(f"{path}: {e}")
    routes = t.get("route")
    if not isinstance(routes, list):
        die(f"{path}: no [[route]] list: not a route table")
    lines = [i + 1 for i, ln in enumerate(raw.decode("utf-8").splitlines()) if re.match(r"\s*\{\s*op\s*=", ln)]
    out = []
    for k, r in enumerate(routes):
        if not isinstance(r, dict):
            die(f"{path}: route {k + 1} is not a table ({r!r}); `normgate routes {path}` names the entry")
        try:
            mode = f" {r['mode']}" if r.get("op") == "bwd" else ""
            lo, hi = r["T"]
            name = f"{r['op']}{mode} H={r['H']} w={r['w']} form={r.get('form', 'plain')} T={lo}..{hi}"
        except (KeyError, TypeError, ValueError) as e:
            die(f"{path}: route {k + 1} is malformed ({e!r}); `normgate routes {path}` names the entry")
        line = lines[k] if len(lines) == len(routes) else k + 1
        out.append((f"{path}:{line}", name, r.get("variant")))
    return out


def fmt(v):
    v = num(v)
    return "—" if v is None else f"{v:.3g}"


def markdown(reports, rows, superseded, missing=(), n_table=0):
    L = ["# Campaign summary", ""]
    L.append(f"{len(rows)} windows from {len(reports)} gate reports "
             "(a window gated in several reports is taken from the latest):")
    L.append("")
    for p, r in reports:
        d = r.get("device") or {}
        L.append(f"- `{p}`: {r.get('backend')} on {d.get('name', '—')} (driver {d.get('driver', '—')}, CUDA "
                 f"runtime {d.get('cuda_runtime', '—')}), seeds {r.get('seeds')}, table sha256 "
                 f"{str(r.get('table_sha256', ''))[:12]}, normgate {r.get('normgate_commit')}, {r['date']}, "
                 f"{len(r['windows'])} windows, {'PASS' if r.get('pass') else 'FAIL'}")
    L.append("")
    L.append("| route | window | variant (source) | cases | y | rstd | dx | dw | worst (output: case) | verdict | report |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    worst_all, cases = None, 0
    body = []  # (route key, row): gated and not-gated routes in route-line order
    for p, r, w in rows:
        o = w.get("outputs") or {}
        vals = {k: (o.get(k) or {}).get("max_err_tol") for k in OUTS}
        wo = w.get("worst") or {}
        f, line = route_key(w.get("route", ""))
        cases += int(w.get("cases") or 0)
        we = num(wo.get("err_tol"))
        if we is not None and (worst_all is None or math.isnan(we) or
                               (not math.isnan(worst_all[0]) and we > worst_all[0])):  # NaN ranks worst
            worst_all = (we, wo.get("output"), wo.get("case"), w["window"])
        body.append(((f, line), f"| {f}:{line} | {w['window']} | {w.get('variant')} "
                     f"({str(w.get('source_sha256', ''))[:12]}) | {w.get('cases')} | "
                     + " | ".join(fmt(vals[k]) for k in OUTS) +
                     f" | {wo.get('output', '—')}: `{wo.get('case', '—')}` | {w.get('verdict')} | `{p}` |"))
    for route, name, variant in missing:
        f, line = route_key(route)
        body.append(((f, line), f"| {f}:{line} | {name} | {variant} | — | — | — | — | — | — | not gated | — |"))
    L.extend(text for _, text in sorted(body, key=lambda b: b[0]))
    npass = sum(1 for _, _, w in rows if passed(w))
    L.append("")
    L.append(f"Windows: {npass} of {len(rows)} pass; {cases} cases (a case shared by windows counts in each).")
    if missing:
        L.append(f"**Not gated**: {len(missing)} of the table's {n_table} routes have no report "
                 "yet (rows marked 'not gated').")
    if worst_all:
        e = worst_all[0]
        where = f"in `{worst_all[2]}`, window {worst_all[3]}."
        if math.isnan(e):
            L.append(f"Worst over a budget: {worst_all[1]} err/tol nan {where}")
        elif e == 0:
            L.append("Closest to a budget: every output exact.")
        elif e <= 1:
            L.append(f"Closest to a budget: {worst_all[1]} err/tol {e:.4g} ({1 / e:.2f}x below it) {where}")
        else:
            L.append(f"Worst over a budget: {worst_all[1]} err/tol {e:.4g} {where}")
    hashes = {}  # variant -> Counter of its source hashes over the windows
    for _, _, w in rows:
        hashes.setdefault(w.get("variant"), Counter())[str(w.get("source_sha256", ""))[:12]] += 1
    mixed = {v: h for v, h in hashes.items() if len(h) > 1}
    if mixed:
        L.append("**Mixed kernel versions**: " + "; ".join(
            f"{v} gated at " + ", ".join(f"{k} ({n} windows)" for k, n in h.items()) for v, h in mixed.items())
            + " (`normgate routes` says which approvals match the code now).")
    if superseded:
        L.append("")
        L.append("Superseded (an older report of a window taken from a later one): "
                 + "; ".join(f"{n} in `{p}` ({d})" for n, p, d in superseded) + ".")
    return "\n".join(L) + "\n", npass == len(rows) and not missing


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="One table over a campaign's gate reports (see the module docstring).")
    ap.add_argument("reports", nargs="+", metavar="REPORT.json", help="normgate gate --report-json files")
    ap.add_argument("--md", default="", help="also write the table here (atomically)")
    ap.add_argument("--table", default="", help="the route table: list its routes no report covers as 'not gated'")
    a = ap.parse_args(argv)  # usage errors: exit 2
    # --md before any work: exit 2 naming it ('-', a folder, a device, an input).
    md_out = check_out("campaign_summary", a.md, a.reports + ([a.table] if a.table else [])) if a.md else ""
    reports, rows, superseded = summarize(a.reports)
    missing, n_table = [], 0
    if a.table:
        have = {w["window"] for _, _, w in rows}
        listed = table_windows(a.table)
        n_table = len(listed)
        missing = [m for m in listed if m[1] not in have]
    md, ok = markdown(reports, rows, superseded, missing, n_table)
    if a.md:
        write_text("campaign_summary", md_out, md)  # exit 3 naming it when it fails
    print(md, end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
