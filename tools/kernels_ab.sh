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
#   --out DIR          output folder (default: $OUT if set, else
#                      out/kernels-ab in the repository)
#   --deadline-s N     seconds from the start after which no further run
#                      starts and the running one is stopped (30 to
#                      999999999, default 540); the tables then cover the
#                      runs that finished
# Writes DIR/NAME-ROUND.json, DIR/NAME-ROUND.txt and DIR/ab.md (printed last),
# first removing those names' files of an earlier run there. Exit 2 on a
# usage error (nothing run), 1 when a run failed, wrote no JSON, or was
# stopped or skipped by the deadline, or a table could not be made.
# e.g. tools/kernels_ab.sh --build main=b0/kernels_bench --build new=b1/kernels_bench \
#        --out /tmp/ab -- --reps 100 --no-controls --res --only fwd 4097,1536 65537,4096
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/lib/shq.sh"
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
      [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]{0,8}$ ]] && [ "$2" -ge 30 ] ||
        usage "--deadline-s '${2:-}' is not a whole number of seconds from 30 to 999999999"
      deadline="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
[ "${#names[@]}" -ge 2 ] || usage "two or more --build NAME=FILE are needed (got ${#names[@]})"
for a in "$@"; do
  case "$a" in --json|--json=*|--help|-h) usage "'$a' is set by this script, not a kernels_bench argument to pass" ;; esac
done
mkdir -p -- "$out" 2>/dev/null && [ -w "$out" ] || usage "--out '$out' is not a folder this script can write"
# This run's files only: an earlier run's JSON, log or table in the folder
# must not stand in for a run that was skipped or wrote nothing.
for n in "${names[@]}"; do rm -f -- "$out/$n"-[0-9]*.json "$out/$n"-[0-9]*.txt; done
rm -f -- "$out/ab.md" "$out/ab.md.tmp"
rc=0
done_rounds=0
for ((r = 1; r <= rounds; ++r)); do
  order=("${!names[@]}")
  if (( r % 2 == 0 )); then order=(); for ((i = ${#names[@]} - 1; i >= 0; --i)); do order+=("$i"); done; fi
  for i in "${order[@]}"; do
    left=$(( deadline - SECONDS ))
    if [ "$left" -le 5 ]; then echo "kernels_ab: deadline reached before ${names[$i]} round $r" >&2; rc=1; break 2; fi
    timeout -k 10 "$left" "${bins[$i]}" "$@" --json "$out/${names[$i]}-$r.json" >"$out/${names[$i]}-$r.txt" 2>&1
    brc=$?
    if [ "$brc" -ne 0 ] || [ ! -s "$out/${names[$i]}-$r.json" ]; then
      echo "kernels_ab: ${names[$i]} round $r failed (rc $brc$([ "$brc" -eq 0 ] && echo ', no JSON'); $out/${names[$i]}-$r.txt)" >&2
      rm -f "$out/${names[$i]}-$r.json"
      rc=1
    fi
  done
  done_rounds=$r
done
tables_ok=1
{
  echo "# kernels_bench A/B: ${names[*]} ($done_rounds of $rounds rounds run)"
  echo
  echo "kernels_bench $(shq "$@")"
  for ((i = 1; i < ${#names[@]}; ++i)); do
    files=()
    for ((r = 1; r <= rounds; ++r)); do
      [ -f "$out/${names[0]}-$r.json" ] && [ -f "$out/${names[$i]}-$r.json" ] &&
        files+=("$out/${names[0]}-$r.json" "$out/${names[$i]}-$r.json")
    done
    echo
    echo "## A = ${names[0]}, B = ${names[$i]} (${#files[@]} files)"
    echo
    if [ "${#files[@]}" -gt 0 ]; then
      python3 "$root/tools/ab_table.py" "${files[@]}" || { tables_ok=0; echo "(the table failed: see stderr)"; }
    else
      echo "(no round where both ran)"
    fi
  done
} >"$out/ab.md.tmp"
mv -f "$out/ab.md.tmp" "$out/ab.md"
cat "$out/ab.md"
[ "$tables_ok" = 1 ] || { echo "kernels_ab: a table could not be made (a JSON unreadable?)" >&2; rc=1; }
exit "$rc"
