#!/usr/bin/env bash
# Chunk-cap sweep at H = 1024, 3072, 4096 (kernels_bench with the experiment-only
# NG_EXP_CHUNK_CAP knob; docs/results/kernels/chunk-cap-2026-12-04/exp-chunk-cap.patch).
set -u
O=$OUT
mkdir -p /tmp/ngcap && tar -C /tmp/ngcap -xJf .caches/kbcap.tar.xz
KB=/tmp/ngcap/kernels_bench
SH="16385,1024 65537,1024 131072,1024 65537,3072 131072,3072 65537,4096 131072,4096"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for r in 1 2; do
  for cap in 0 264 528 1056 2112 3168; do
    if [ $cap = 0 ]; then unset NG_EXP_CHUNK_CAP; else export NG_EXP_CHUNK_CAP=$cap; fi
    $KB --reps 50 --no-controls --w both $SH 2>&1 | grep -E "bwd (bwd_det_chunked|bwd_det_wreg) " | \
      awk -v c=$cap -v r=$r -F'|' '{gsub(/ /,"",$2); gsub(/ /,"",$3); gsub(/^ +| +$/,"",$4); gsub(/ /,"",$5); print c"-"r, $2, $3, $4, $5}' >> $O/sweep.txt
    echo "cap $cap round $r done at $SECONDS s"
  done
done
unset NG_EXP_CHUNK_CAP
python3 - "$O/sweep.txt" <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p = l.split()
    if len(p) < 6: continue
    cap, rnd = p[0].split("-")
    key = (p[1], p[2], p[4])
    rows[key].setdefault(int(cap), []).append(float(p[5]))
caps = sorted({c for v in rows.values() for c in v})
print("| row | w | variant | built us | " + " | ".join(str(c) for c in caps if c) + " |")
for k in sorted(rows, key=lambda k: (int(k[0].split(',')[1].rstrip(']')), int(k[0].split(',')[0].lstrip('[')), k[1], k[2])):
    v = rows[k]; b = sum(v[0]) / len(v[0])
    print("| %s | %s | %s | %.1f | " % (k[0], k[1], k[2], b) + " | ".join("%.3f" % (sum(v[c]) / len(v[c]) / b) for c in caps if c) + " |")
PY
