#!/usr/bin/env python3
"""Side-by-side table of kernels_bench JSON runs of two builds, interleaved.

Usage: tools/ab_table.py A1.json B1.json [A2.json B2.json ...] [--ops REGEX]
Rows are matched on (shape, w, op); each build's value is the median over its
runs of the per-run median_us, and B/A is printed from the unrounded values.
Prints a Markdown table (A = old, B = new).
"""
import json, re, statistics, sys

args = [a for a in sys.argv[1:] if not a.startswith('--')]
ops = re.compile(sys.argv[sys.argv.index('--ops') + 1]) if '--ops' in sys.argv else None
if '--ops' in sys.argv:
    args.remove(sys.argv[sys.argv.index('--ops') + 1])
if len(args) < 2 or len(args) % 2:
    sys.exit('usage: ab_table.py A1.json B1.json [A2.json B2.json ...] [--ops REGEX]')
runs = {'A': [], 'B': []}
for i, f in enumerate(args):
    with open(f) as fh:
        runs['AB'[i % 2]].append(json.load(fh)['rows'])
keys = []
vals = {'A': {}, 'B': {}}
for side in 'AB':
    for rows in runs[side]:
        for r in rows:
            k = (r['shape'], r['w'], re.sub(r' d[0-9:]+$', '', r['op']))
            if ops and not ops.search(k[2]):
                continue
            if k not in keys:
                keys.append(k)
            vals[side].setdefault(k, []).append(r['median_us'])
print('| shape | w | op | A us (runs) | B us (runs) | B/A |')
print('| --- | --- | --- | --- | --- | --- |')
for k in keys:
    a, b = vals['A'].get(k), vals['B'].get(k)
    ma = statistics.median(a) if a else float('nan')
    mb = statistics.median(b) if b else float('nan')
    fa = '/'.join(f'{x:.1f}' for x in a) if a else '-'
    fb = '/'.join(f'{x:.1f}' for x in b) if b else '-'
    print(f'| {k[0]} | {k[1]} | {k[2]} | {ma:.1f} ({fa}) | {mb:.1f} ({fb}) | {mb / ma:.3f} |')
