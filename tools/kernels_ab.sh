#!/usr/bin/env bash
# An A/B (or A/B/C...) of kernels_bench between builds, on one GPU:
# `--rounds` rounds, each running every build's kernels_bench once with the
# same options (the order reversed on even rounds), one JSON a run; then one
# table a later build against the first (tools/ab_table.py: each build's
# median over its runs of the per-run median, and the ratio).
# Usage: tools/kernels_ab.sh --build NAME=KERNELS_BENCH [--build NAME=...]
#          [--rounds N] [--out DIR] [--deadline-s N] -- KERNELS_BENCH_ARGS ...
#   --build NAME=FILE  a kernels_bench executable (two or more; the first is
#                      the baseline); NAME: letters, digits, '-', '_'
#   --rounds N         rounds (default 2)
#   --out DIR          output folder (default: $OUT if set, else out/kernels-ab)
#   --deadline-s N     seconds from the start after which no further run
#                      starts and the running one is stopped (default 540);
#                      the tables then cover the runs that finished
# Writes DIR/NAME-ROUND.json, DIR/NAME-ROUND.txt and DIR/ab.md (printed last).
# Exit 2 on a usage error (nothing run), 1 when a run failed.
# e.g. tools/kernels_ab.sh --build main=b0/kernels_bench --build new=b1/kernels_bench \
#        --out /tmp/ab -- --reps 100 --no-controls --res --only fwd 4097,1536 65537,4096
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/out}/kernels-ab"
[ -n "${OUT:-}" ] && out="$OUT"
deadline=540
rounds=2
names=()
bins=()
usage() { echo "kernels_ab: $1 (tools/kernels_ab.sh --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build)
      [ $# -ge 2 ] || usage "--build needs NAME=FILE"
      [[ "$2" =~ ^([A-Za-z0-9_-]+)=(.+)$ ]] || usage "--build '$2' is not NAME=FILE"
      n="${BASH_REMATCH[1]}"; f="${BASH_REMATCH[2]}"
      for m in "${names[@]}"; do [ "$m" != "$n" ] || usage "--build name '$n' given twice"; done
      [ -f "$f" ] && [ -x "$f" ] || usage "--build $n: '$f' is not an executable file"
      names+=("$n"); bins+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); shift 2 ;;
    --rounds)
      [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]?$ ]] || usage "--rounds '${2:-}' is not a whole number from 1 to 99"
      rounds="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] && [ -n "$2" ] || usage "--out needs a folder"; out="$2"; shift 2 ;;
    --deadline-s)
      [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]{0,8}$ ]] ||
        usage "--deadline-s '${2:-}' is not a positive whole number of seconds (at most 9 digits)"
      deadline="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
[ "${#names[@]}" -ge 2 ] || usage "two or more --build NAME=FILE are needed (got ${#names[@]})"
for a in "$@"; do
  case "$a" in --json|--help|-h) usage "'$a' is set by this script, not a kernels_bench argument to pass" ;; esac
done
mkdir -p "$out" || usage "cannot create --out '$out'"
rc=0
for ((r = 1; r <= rounds; ++r)); do
  order=("${!names[@]}")
  if (( r % 2 == 0 )); then order=(); for ((i = ${#names[@]} - 1; i >= 0; --i)); do order+=("$i"); done; fi
  for i in "${order[@]}"; do
    left=$(( deadline - SECONDS ))
    if [ "$left" -le 5 ]; then echo "kernels_ab: deadline reached before ${names[$i]} round $r" >&2; rc=1; break 2; fi
    timeout "$left" "${bins[$i]}" "$@" --json "$out/${names[$i]}-$r.json" >"$out/${names[$i]}-$r.txt" 2>&1 ||
      { echo "kernels_ab: ${names[$i]} round $r failed (rc $?; $out/${names[$i]}-$r.txt)" >&2; rm -f "$out/${names[$i]}-$r.json"; rc=1; }
  done
done
{
  echo "# kernels_bench A/B: ${names[*]} ($rounds rounds)"
  echo
  echo "kernels_bench $*"
  for ((i = 1; i < ${#names[@]}; ++i)); do
    files=()
    for ((r = 1; r <= rounds; ++r)); do
      [ -f "$out/${names[0]}-$r.json" ] && [ -f "$out/${names[$i]}-$r.json" ] &&
        files+=("$out/${names[0]}-$r.json" "$out/${names[$i]}-$r.json")
    done
    echo
    echo "## A = ${names[0]}, B = ${names[$i]} (${#files[@]} files)"
    echo
    [ "${#files[@]}" -gt 0 ] && python3 "$root/tools/ab_table.py" "${files[@]}"
  done
} >"$out/ab.md.tmp" && mv "$out/ab.md.tmp" "$out/ab.md"
cat "$out/ab.md"
exit "$rc"
