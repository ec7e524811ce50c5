#!/usr/bin/env python3
"""One Markdown row per kernel from Nsight Compute raw CSV exports.

Usage: tools/ncu_table.py RAW.csv [RAW.csv ...] > table.md

Each RAW.csv is `ncu -i REPORT --page raw --csv` of one profiled process
(tools/ncu_rows.sh writes them): a header row, a units row, then one row per
kernel launch. Columns: duration (us), DRAM throughput (% of peak), executed
instructions, registers a thread, block x grid, achieved and theoretical
occupancy, issue slots busy, cycles between a warp's instructions and of
them on long scoreboard (a load from memory outstanding), warps eligible a
scheduler. A metric the export lacks prints "-".
"""
import csv
import sys

COLS = [
    ("us", "gpu__time_duration.sum", "us"),
    ("DRAM %", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", None),
    ("instr (M)", "smsp__inst_executed.sum", "M"),
    ("regs", "launch__registers_per_thread", None),
    ("block", "launch__block_size", None),
    ("grid", "launch__grid_size", None),
    ("occ. achieved %", "sm__warps_active.avg.pct_of_peak_sustained_active", None),
    ("occ. theoretical %", "sm__maximum_warps_per_active_cycle_pct", None),
    ("issue busy %", "smsp__issue_active.avg.pct_of_peak_sustained_active", None),
    ("cycles/instr", "smsp__average_warp_latency_per_inst_issued.ratio", None),
    ("long scoreboard", "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", None),
    ("eligible warps", "smsp__warps_eligible.avg.per_cycle_active", None),
]

# Units ncu may print for a column, and the factor to the unit the table uses.
SCALE = {
    "us": {"usecond": 1.0, "us": 1.0, "nsecond": 1e-3, "ns": 1e-3, "msecond": 1e3, "ms": 1e3},
    "M": {"inst": 1e-6, "": 1e-6, "Kinst": 1e-3, "Minst": 1.0, "Ginst": 1e3},
}


def number(text):
    return float(text.replace(",", ""))


def cell(value, unit, want):
    if value == "":
        return "-"
    try:
        v = number(value)
    except ValueError:
        return value
    if want is not None:
        f = SCALE[want].get(unit)
        if f is None:
            return "%s %s" % (value, unit)
        v *= f
    if v == int(v) and abs(v) < 1e9:
        return str(int(v))
    return "%.2f" % v if abs(v) >= 1 else "%.3f" % v


def short_name(name):
    """The kernel's own name with its template arguments, without the return
    type, namespaces and parameter list: "void ns::k<float, 1>(ns::Args)" ->
    "k<float, 1>". Only '::', ' ' and '(' outside angle brackets split."""
    depth, cut, start = 0, len(name), 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and ch == "(":
            cut = i
            break
        elif depth == 0 and ch == " ":
            start = i + 1
        elif depth == 0 and name.startswith("::", i):
            start = i + 2
    return name[start:cut][:70]


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    if len(r) < 2:
        raise SystemExit("ncu_table: %s: no header and units rows (not an ncu --page raw --csv export?)" % path)
    head, units = r[0], r[1]
    if "Kernel Name" not in head:
        raise SystemExit("ncu_table: %s: no 'Kernel Name' column (not an ncu --page raw --csv export?)" % path)
    for row in r[2:]:
        if len(row) != len(head):
            continue
        get = dict(zip(head, row))
        unit = dict(zip(head, units))
        name = get["Kernel Name"]
        short = short_name(name)
        yield [short] + [cell(get.get(k, ""), unit.get(k, ""), want) if k in get else "-" for _, k, want in COLS]


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    print("| file | kernel | " + " | ".join(c for c, _, _ in COLS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in COLS) + " |")
    for p in argv:
        for row in rows(p):
            print("| %s | %s |" % (p.rsplit("/", 1)[-1], " | ".join(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
