#!/usr/bin/env bash
# tools/chunk_cap_sweep.sh: time backward variants at several chunk caps with a
# kernels_bench built with the experiment-only NG_EXP_CHUNK_CAP knob
# (docs/results/kernels/chunk-cap-2026-12-04/exp-chunk-cap.patch, applied for
# the build and reverted; never committed applied).
#
#   tools/chunk_cap_sweep.sh --kb KERNELS_BENCH --shapes "T,H ..." --caps "0 660 ..." \
#     --out DIR --deadline-s S [--rows REGEX] [--rounds N] [--reps N] [-- KB_ARGS...]
#
# Cap 0 is the built plan (plan.h); --caps must hold it and at least one other
# cap. Every (round, cap) runs kernels_bench once over all shapes
# (--no-controls --w both, plus KB_ARGS, e.g. --res) and keeps the rows whose
# "op variant" matches the extended regex REGEX (default: the det and nondet
# chunk variants, plain and res). DIR/sweep.txt gets one line a row: "CAP-ROUND
# [T,H] w op... median_us"; DIR/table.md the mean over rounds of each cell over
# the built plan's. Exit 0: done; 1: stopped by --deadline-s before a new
# (round, cap) (what ran is kept and tabled); 2: usage error (nothing run);
# 3: kernels_bench failed, or no row matched REGEX.
set -euo pipefail
set -f  # no globbing of the shape and cap lists
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "chunk_cap_sweep: $*" >&2; exit 2; }
fail() { echo "chunk_cap_sweep: $*" >&2; exit 3; }
KB="" SHAPES="" CAPS="" OUT_DIR="" DEADLINE="" ROWS='bwd (res )?(bwd_det_chunked|bwd_det_wreg|bwd_nondet_atomic) '
ROUNDS=2 REPS=50
while [ $# -gt 0 ]; do
  case "$1" in
    --kb|--shapes|--caps|--out|--deadline-s|--rows|--rounds|--reps)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)"
      case "$1" in
        --kb) KB=$2 ;; --shapes) SHAPES=$2 ;; --caps) CAPS=$2 ;; --out) OUT_DIR=$2 ;;
        --deadline-s) DEADLINE=$2 ;; --rows) ROWS=$2 ;; --rounds) ROUNDS=$2 ;; --reps) REPS=$2 ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$KB" ] && [ -f "$KB" ] && [ -x "$KB" ] || die "--kb '$KB' is not an executable file (a kernels_bench)"
KB=$(realpath -- "$KB")  # run that file, never a namesake on PATH
read -r -a SHAPE_LIST <<< "$SHAPES" || true
read -r -a CAP_LIST <<< "$CAPS" || true
[ "${#SHAPE_LIST[@]}" -gt 0 ] || die "--shapes is required (e.g. \"65537,1536 131072,1536\")"
[ "${#CAP_LIST[@]}" -gt 1 ] || die "--caps needs 0 (the built plan) and at least one cap (e.g. \"0 660 1320\")"
[ -n "$OUT_DIR" ] || die "--out DIR is required"
[[ "$OUT_DIR" != -* ]] || die "--out '$OUT_DIR' looks like an option"
[[ "$DEADLINE" =~ ^[0-9]{1,9}$ ]] || die "--deadline-s '$DEADLINE' is not a whole number of seconds below 10^9"
[[ "$ROUNDS" =~ ^[0-9]{1,4}$ ]] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 1000 ] ||
  die "--rounds '$ROUNDS' is not a whole number in 1..1000"
[[ "$REPS" =~ ^[0-9]{1,6}$ ]] && [ "$REPS" -ge 50 ] || die "--reps '$REPS' must be a whole number >= 50"
[ -n "$ROWS" ] || die "--rows must not be empty"
rc=0; printf '' | grep -E -- "$ROWS" >/dev/null 2>&1 || rc=$?
[ "$rc" -le 1 ] || die "--rows '$ROWS' is not an extended regular expression"
has0=0
for c in "${CAP_LIST[@]}"; do
  [[ "$c" =~ ^[0-9]{1,9}$ ]] || die "--caps: '$c' is not a whole number"
  [ "$c" != 0 ] || has0=1
done
[ "$has0" = 1 ] || die "--caps must hold 0 (the built plan: every cell is over its time)"
for s in "${SHAPE_LIST[@]}"; do [[ "$s" =~ ^[0-9]{1,10},[0-9]{1,5}$ ]] || die "--shapes: '$s' is not T,H"; done
mkdir -p -- "$OUT_DIR"
: > "$OUT_DIR/sweep.txt"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
stopped=0
for ((r = 1; r <= ROUNDS; r++)); do
  for cap in "${CAP_LIST[@]}"; do
    if [ "$SECONDS" -ge "$DEADLINE" ]; then stopped=1; break 2; fi
    if [ "$cap" = 0 ]; then unset NG_EXP_CHUNK_CAP; else export NG_EXP_CHUNK_CAP=$cap; fi
    krc=0
    "$KB" --reps "$REPS" --no-controls --w both "$@" "${SHAPE_LIST[@]}" > "$raw" 2>&1 || krc=$?
    if [ "$krc" != 0 ]; then
      tail -5 "$raw" >&2
      fail "kernels_bench exited $krc at cap $cap, round $r (rows so far in $OUT_DIR/sweep.txt)"
    fi
    { grep -E -- "$ROWS" "$raw" || true; } |
      awk -v c="$cap" -v r="$r" -F'|' 'NF >= 6 {gsub(/ /,"",$2); gsub(/ /,"",$3); gsub(/^ +| +$/,"",$4);
                                                gsub(/ /,"",$5); print c"-"r, $2, $3, $4, $5}' >> "$OUT_DIR/sweep.txt"
    echo "cap $cap round $r done at $SECONDS s"
  done
done
unset NG_EXP_CHUNK_CAP
if [ ! -s "$OUT_DIR/sweep.txt" ]; then
  [ "$stopped" = 0 ] || { echo "chunk_cap_sweep: stopped by --deadline-s $DEADLINE before any run" >&2; exit 1; }
  fail "no kernels_bench row matched --rows '$ROWS'"
fi
python3 - "$OUT_DIR/sweep.txt" > "$OUT_DIR/table.md" <<'PY' || fail "could not table $OUT_DIR/sweep.txt"
import collections, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 5:
        continue
    try:
        cap, us = int(p[0].split("-")[0]), float(p[-1])
    except ValueError:
        continue  # not a timed row
    rows[(p[1], p[2], " ".join(p[3:-1]))].setdefault(cap, []).append(us)
caps = sorted({c for v in rows.values() for c in v if c})
print("| row | w | op variant | built us | " + " | ".join(str(c) for c in caps) + " |")
print("| --- | --- | --- | --- | " + " | ".join("---" for _ in caps) + " |")
def order(k):
    try:
        t, h = k[0].strip("[]").split(",")
        return (int(h), int(t), k[1], k[2])
    except ValueError:
        return (0, 0, k[1], k[2])
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
