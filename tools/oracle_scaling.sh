#!/usr/bin/env bash
# How the oracle half's cost per element grows with threads on this host, and
# whether the reference pass's row-block shape is why (no GPU needed):
# finish_bench (one case's CaseOracle and validation, bench/finish_bench.cpp)
# at each thread count of NG_OS_THREADS and each row block of NG_OS_BLOCKS
# (NORMGATE_ORACLE_BLOCK_ROWS, oracle/src/row_blocks.h: the shape schedules
# the work and changes no bit), then a table: wall ns per element of the
# CaseOracle and of validation, and the CPU ns per element of the reference
# and of validation (CPU seconds of every thread over the elements: flat in
# the thread count when threads scale, growing when each gets slower). Then,
# where the build has bench/clock_probe, the core clock each of that many
# busy threads gets while on a CPU and the fraction of the time it was on
# one (scalar code and 512-bit FMAs, beside the same spinning processes):
# how much of the growth is the all-core clock, how much sharing a core.
#
#   tools/oracle_scaling.sh [--out DIR] [--deadline-s N]
#
#   --out DIR       the output folder (default: $OUT if set, else
#                   out/oracle-scaling/ in the repository): scaling.md,
#                   env.txt, fb-T-B.txt per run, clock.md (earlier ones
#                   removed first)
#   --deadline-s N  seconds after the start after which no further run starts
#                   (default 0: none); the table holds the runs that finished
# Exit 0 every run done; 2 a bad argument (before any run); 3 a run failed.
# Environment: NORMGATE_BUILD (build), NG_OS_CASE
# (H=6144,T=16384,w=bf16,form=plain,family=cancel,seed=1), NG_OS_THREADS
# ("1 8 N", N = every core), NG_OS_BLOCKS ("auto 32 170 1024 all": rows per
# block; auto is the 4 MiB rule, 170 rows at H = 6144; all is every row in
# one block), NG_OS_REPS (3), NG_OS_BUSY (0: how many processes spin on the
# CPU beside each run, as the gate's prepare workers and copies take cores
# beside the oracle; the table says how many).
set -uo pipefail
set -f  # the lists below are words, never file patterns
root="$(cd "$(dirname "$0")/.." && pwd)"
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"  # as the gate runs (D17)
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
out="${OUT:-$root/out/oracle-scaling}"
deadline=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "oracle_scaling: --out needs a folder (not empty)" >&2; exit 2; }; out="$2"; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "oracle_scaling: --deadline-s needs seconds" >&2; exit 2; }; deadline="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "oracle_scaling: unknown argument '$1' (--out DIR, --deadline-s N)" >&2; exit 2 ;;
  esac
done
[[ "$deadline" =~ ^[0-9]{1,9}$ ]] ||
  { echo "oracle_scaling: --deadline-s '$deadline' is not a whole number of seconds (at most 9 digits)" >&2; exit 2; }
[ ! -e "$out" ] || [ -d "$out" ] || { echo "oracle_scaling: --out '$out' exists and is not a folder" >&2; exit 2; }
build="${NORMGATE_BUILD:-$root/build}"
bench="$build/bench/finish_bench"
[ -x "$bench" ] || { echo "oracle_scaling: $bench is missing (build first, or set NORMGATE_BUILD)" >&2; exit 2; }
cores=$(nproc)
bcase="${NG_OS_CASE:-H=6144,T=16384,w=bf16,form=plain,family=cancel,seed=1}"
threads="${NG_OS_THREADS:-1 8 $cores}"
blocks="${NG_OS_BLOCKS:-auto 32 170 1024 all}"
reps="${NG_OS_REPS:-3}"
# Each list: at least one entry, each once (a repeat would overwrite its
# run's file and list its row twice).
check_list() {  # NAME VALUE
  local seen=" " e
  [ -n "${2// /}" ] || { echo "oracle_scaling: $1 is empty" >&2; exit 2; }
  for e in $2; do
    case "$seen" in *" $e "*) echo "oracle_scaling: $1 lists '$e' twice" >&2; exit 2 ;; esac
    seen+="$e "
  done
}
check_list NG_OS_THREADS "$threads"
check_list NG_OS_BLOCKS "$blocks"
for t in $threads; do
  [[ "$t" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "oracle_scaling: NG_OS_THREADS entry '$t' is not a thread count (1..9999)" >&2; exit 2; }
done
for b in $blocks; do
  [[ "$b" =~ ^(auto|all|[1-9][0-9]{0,9})$ ]] && { [[ "$b" =~ ^(auto|all)$ ]] || [ "$b" -le 2147483648 ]; } ||
    { echo "oracle_scaling: NG_OS_BLOCKS entry '$b' is not auto, all or a row count in 1..2^31" >&2; exit 2; }
done
[[ "$reps" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "oracle_scaling: NG_OS_REPS '$reps' is not a count in 1..999999" >&2; exit 2; }
# The case, checked before any run where the build has the CLI (its message).
if [ -x "$build/apps/normgate" ] && ! case_err=$("$build/apps/normgate" case "$bcase" --no-digest 2>&1 >/dev/null); then
  echo "oracle_scaling: NG_OS_CASE '$bcase' is refused: $case_err" >&2
  exit 2
fi
# shellcheck source=tools/busy.sh
. "$root/tools/busy.sh"
busy="${NG_OS_BUSY:-0}"
busy_count_ok oracle_scaling NG_OS_BUSY "$busy" || exit 2
mkdir -p "$out" || { echo "oracle_scaling: cannot create $out" >&2; exit 3; }
[ -w "$out" ] || { echo "oracle_scaling: cannot write into $out" >&2; exit 3; }
rm -f "$out"/env.txt "$out"/fb-*.txt "$out"/clock.md "$out"/scaling.md  # no earlier run's files in this one's table
{
  echo "host: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $cores cores"
  echo "case: $bcase, reps $reps, $busy spinning process(es) beside each run"
  git -C "$root" rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
} >"$out/env.txt"

# The spinners (NG_OS_BUSY): stopped on any exit, with the running child
# (busy.sh).
start_spinners "$busy"
rows=()
failed=0
for t in $threads; do
  for b in $blocks; do
    if [ "$deadline" -gt 0 ] && [ "$SECONDS" -ge "$deadline" ]; then
      echo "oracle_scaling: deadline reached; $t threads, block $b and later runs not started" >&2
      break 2
    fi
    f="$out/fb-$t-$b.txt"
    env_b=""
    case "$b" in auto) env_b="" ;; all) env_b=2147483648 ;; *) env_b="$b" ;; esac
    if ! NORMGATE_ORACLE_BLOCK_ROWS="$env_b" run_child "$bench" "$bcase" bwd_det_chunked "$reps" "$t" >"$f" 2>&1; then
      echo "oracle_scaling: finish_bench at $t threads, block $b failed (see $f)" >&2
      failed=$((failed + 1))
      continue
    fi
    rows+=("$t $b $f")
  done
done

# The clock each busy thread gets at these thread counts (same spinners).
probe="$build/bench/clock_probe"
clock_ok=0
if [ -x "$probe" ] && { [ "$deadline" -eq 0 ] || [ "$SECONDS" -lt "$deadline" ]; }; then
  if run_child "$probe" "$(echo $threads | tr ' ' ',')" 1 scalar,avx512 >"$out/clock.md" 2>&1; then
    clock_ok=1
  else
    echo "oracle_scaling: clock_probe failed (see $out/clock.md)" >&2
    failed=$((failed + 1))
  fi
fi

# The table, from each run's lines: "CaseOracle S s (...) | validation V s |
# ...", "ns per element: CaseOracle N = ..." (so elements = S / N ns) and
# "<phase> CPU C s, B cores busy, X CPU ns per element".
{
  echo "# Oracle half against threads and row blocks"
  echo
  sed 's/^/    /' "$out/env.txt"
  [ ${#rows[@]} -eq 0 ] || { read -r _ _ f1 <<<"${rows[0]}"; grep -m1 '^host code:' "$f1" | sed 's/^/    /'; }
  echo
  echo "| threads | block rows | CaseOracle wall ns/elt | validation wall ns/elt | reference CPU ns/elt | validation CPU ns/elt |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for r in "${rows[@]}"; do
    read -r t b f <<<"$r"
    awk -v t="$t" -v b="$b" '
      /^CaseOracle [0-9.]+ s/ { ctime = $2; for (i = 1; i < NF; ++i) if ($i == "validation") vs = $(i + 1) }
      /^ns per element: CaseOracle/ { con = $5 }
      /^validation CPU/ { vc = $(NF - 4) }
      /^reference CPU/ { rc = $(NF - 4) }
      END {
        vn = (ctime > 0 && con > 0) ? sprintf("%.2f", vs * con / ctime) : "?"
        printf "| %s | %s | %s | %s | %s | %s |\n", t, b, con, vn, rc, vc
      }' "$f"
  done
  if [ "$clock_ok" -eq 1 ]; then
    echo
    echo "Core clock per busy thread while on a CPU, and its on-CPU fraction (bench/clock_probe: dependent adds beside scalar code or 512-bit FMAs, $busy spinning process(es) beside):"
    echo
    cat "$out/clock.md"
  fi
} >"$out/scaling.md"
cat "$out/scaling.md"
# Exit 3 when a run failed (the table lacks its row), 0 otherwise.
if [ "$failed" -gt 0 ]; then
  echo "oracle_scaling: $failed run(s) failed: their rows are missing from $out/scaling.md" >&2
  exit 3
fi
