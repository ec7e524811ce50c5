#!/usr/bin/env bash
# tools/chunk_cap_sweep.sh: time backward variants at several chunk caps with a
# kernels_bench built with the experiment-only NG_EXP_CHUNK_CAP knob
# (docs/results/kernels/chunk-cap-2026-12-04/exp-chunk-cap.patch, applied for
# the build and reverted; never committed applied).
#
#   tools/chunk_cap_sweep.sh --kb KERNELS_BENCH --shapes "T,H ..." --caps "0 660 ..." \
#     --out DIR --deadline-s S [--rows REGEX] [--rounds N] [--reps N] [-- KB_ARGS...]
#
# Cap 0 is the built plan (plan.h). Every (round, cap) runs kernels_bench once
# over all shapes (--no-controls --w both, plus KB_ARGS, e.g. --res) and keeps
# the rows whose "op variant" matches REGEX (default: the det and nondet chunk
# variants, plain and res). DIR/sweep.txt gets one line a row: "CAP-ROUND
# [T,H] w op... median_us"; DIR/table.md the mean over rounds of each cell over
# the built plan's. Stops before a new (round, cap) once --deadline-s seconds
# have passed (what ran is kept; exit 1). Exit 2: usage error.
set -euo pipefail
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "chunk_cap_sweep: $*" >&2; exit 2; }
KB="" SHAPES="" CAPS="" OUT_DIR="" DEADLINE="" ROWS='bwd (res )?(bwd_det_chunked|bwd_det_wreg|bwd_nondet_atomic) '
ROUNDS=2 REPS=50
while [ $# -gt 0 ]; do
  case "$1" in
    --kb) KB=${2-}; shift 2 ;;
    --shapes) SHAPES=${2-}; shift 2 ;;
    --caps) CAPS=${2-}; shift 2 ;;
    --out) OUT_DIR=${2-}; shift 2 ;;
    --deadline-s) DEADLINE=${2-}; shift 2 ;;
    --rows) ROWS=${2-}; shift 2 ;;
    --rounds) ROUNDS=${2-}; shift 2 ;;
    --reps) REPS=${2-}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$KB" ] && [ -x "$KB" ] || die "--kb '$KB' is not an executable kernels_bench"
[ -n "$SHAPES" ] || die "--shapes is required (e.g. \"65537,1536 131072,1536\")"
[ -n "$CAPS" ] || die "--caps is required (e.g. \"0 660 1320\"; 0 = the built plan)"
[ -n "$OUT_DIR" ] || die "--out DIR is required"
[[ "$DEADLINE" =~ ^[0-9]+$ ]] || die "--deadline-s '$DEADLINE' is not a whole number of seconds"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds '$ROUNDS' is not a positive whole number"
[[ "$REPS" =~ ^[0-9]+$ ]] && [ "$REPS" -ge 50 ] || die "--reps '$REPS' must be a whole number >= 50"
for c in $CAPS; do [[ "$c" =~ ^[0-9]+$ ]] || die "--caps: '$c' is not a whole number"; done
for s in $SHAPES; do [[ "$s" =~ ^[0-9]+,[0-9]+$ ]] || die "--shapes: '$s' is not T,H"; done
mkdir -p "$OUT_DIR"
: > "$OUT_DIR/sweep.txt"
stopped=0
for r in $(seq 1 "$ROUNDS"); do
  for cap in $CAPS; do
    if [ "$SECONDS" -ge "$DEADLINE" ]; then stopped=1; break 2; fi
    if [ "$cap" = 0 ]; then unset NG_EXP_CHUNK_CAP; else export NG_EXP_CHUNK_CAP=$cap; fi
    # shellcheck disable=SC2086
    "$KB" --reps "$REPS" --no-controls --w both "$@" $SHAPES 2>&1 | grep -E "$ROWS" |
      awk -v c="$cap" -v r="$r" -F'|' '{gsub(/ /,"",$2); gsub(/ /,"",$3); gsub(/^ +| +$/,"",$4); gsub(/ /,"",$5);
                                        print c"-"r, $2, $3, $4, $5}' >> "$OUT_DIR/sweep.txt"
    echo "cap $cap round $r done at $SECONDS s"
  done
done
unset NG_EXP_CHUNK_CAP
python3 - "$OUT_DIR/sweep.txt" > "$OUT_DIR/table.md" <<'PY'
import collections, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 5:
        continue
    cap, _ = p[0].split("-")
    key = (p[1], p[2], " ".join(p[3:-1]))
    rows[key].setdefault(int(cap), []).append(float(p[-1]))
caps = sorted({c for v in rows.values() for c in v if c})
print("| row | w | op variant | built us | " + " | ".join(str(c) for c in caps) + " |")
print("| --- | --- | --- | --- | " + " | ".join("---" for _ in caps) + " |")
def order(k):
    t, h = k[0].strip("[]").split(",")
    return (int(h), int(t), k[1], k[2])
for k in sorted(rows, key=order):
    v = rows[k]
    if 0 not in v:
        continue
    b = sum(v[0]) / len(v[0])
    cells = ["%.3f" % (sum(v[c]) / len(v[c]) / b) if c in v else "-" for c in caps]
    print("| %s | %s | %s | %.1f | " % (k[0], k[1], k[2], b) + " | ".join(cells) + " |")
PY
cat "$OUT_DIR/table.md"
[ "$stopped" = 0 ] || { echo "chunk_cap_sweep: stopped by --deadline-s $DEADLINE" >&2; exit 1; }
