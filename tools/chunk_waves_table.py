#!/usr/bin/env python3
"""Table of backward times against the chunk plan's wave count, from
kernels_bench JSON files named ...w<W>.json (W = --chunk-waves; 0 = the plan's
own). Usage: tools/chunk_waves_table.py FILE... (the experiment of branch
wip/bwd-rowptr: docs/perf/backward.md, D10; the script that ran it,
next-s11-wip.sh, left the tree after commit 0877dcd: docs/results/README.md)."""
import json
import re
import sys

cells, shapes, waves = {}, [], []
for path in sys.argv[1:]:
    m = re.search(r"w(\d+)\.json$", path)
    if not m:
        sys.exit(f"chunk_waves_table: {path}: name does not end in w<W>.json")
    w = int(m.group(1))
    waves.append(w) if w not in waves else None
    for row in json.load(open(path))["rows"]:
        if row["op"].startswith("bwd "):
            key = (row["shape"], row["w"], row["op"])
            shapes.append(key) if key not in shapes else None
            cells[(key, w)] = row["median_us"]
waves.sort()
print("| shape | w | op | " + " | ".join(f"waves {w or 'plan'} us" for w in waves) + " |")
print("| --- | --- | --- | " + " | ".join("---" for _ in waves) + " |")
for key in shapes:
    base = cells.get((key, 0))
    vals = []
    for w in waves:
        v = cells.get((key, w))
        vals.append("-" if v is None else (f"{v:.1f}" if base is None or w == 0 else f"{v:.1f} ({v / base:.3f})"))
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(vals) + " |")
