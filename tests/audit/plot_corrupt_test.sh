#!/usr/bin/env bash
# plot_corrupt_test.sh NORMGATE: `normgate plot` refuses a damaged case file
# (exit 2, the file named) instead of drawing it: a small case is saved with
# repro --save (CPU model), every 997th byte of its second half flipped, and
# plotted. The plotting script itself is not needed (the check comes first).
# Exit 0 pass, 1 fail, 77 skip (no python3 for the byte flip).
set -u
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ $# -eq 1 ] || { echo "usage: $0 NORMGATE" >&2; exit 1; }
bin=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$bin" repro 'H=64,T=200,w=bf16,form=plain,family=normal,seed=1' --variant bwd_det_chunked --backend cpu --k 1 \
  --save "$d/case.h5" >"$d/repro.log" 2>&1 || { echo "FAIL: repro --save: $(tail -3 "$d/repro.log")"; exit 1; }
python3 - "$d/case.h5" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(len(b) // 2, len(b), 997):
    b[i] ^= 0x5A
open(p, "wb").write(bytes(b))
PY
"$bin" plot "$d/case.h5" -o "$d/png" >"$d/plot.log" 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "FAIL: plot of a damaged file: exit $rc, expected 2: $(tail -3 "$d/plot.log")"; exit 1; }
grep -q "case.h5" "$d/plot.log" || { echo "FAIL: the error does not name the file: $(cat "$d/plot.log")"; exit 1; }
if compgen -G "$d/png/*.png" >/dev/null; then echo "FAIL: PNGs written for a damaged file"; exit 1; fi
echo "PASS: plot refused the damaged file: $(head -1 "$d/plot.log")"
