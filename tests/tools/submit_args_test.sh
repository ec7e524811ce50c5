#!/usr/bin/env bash
# tests/tools/submit_args_test.sh NORMGATE TABLE: the arguments
# tools/slurm/submit.sh gives sbatch, without Slurm: a stub sbatch first on
# PATH records each call's argv (one NUL-ended argument each) and answers a
# job id. sbatch options after -- arrive one argument each (a value with
# spaces whole), in both calls, before the batch script; the gate options
# alone follow it; NORMGATE_SBATCH_ARGS is still split at blanks; the
# merge's own --dependency comes after the user's; bad gate options before
# -- submit nothing (exit 2). The real normgate checks the gate options
# (--plan). Exit 0 pass, 1 fail.
set -euo pipefail
ng=$(realpath "$1") table=$(realpath "$2")
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir "$d/bin"
cat >"$d/bin/sbatch" <<'STUB'
#!/usr/bin/env bash
n=$(( $(find "$STUB_LOG" -type f | wc -l) + 1 ))
printf '%s\0' "$@" >"$STUB_LOG/$n"
echo "$((100 + n));cluster"
STUB
chmod +x "$d/bin/sbatch"
submit() {  # LOGDIR ARGS...: submit.sh with the stub sbatch; its stdout in LOGDIR.out
  local log=$1
  shift
  mkdir "$log"
  STUB_LOG=$log PATH="$d/bin:$PATH" NORMGATE=$ng "$src/tools/slurm/submit.sh" "$@" >"$log.out"
}
# The arguments of call $2 in log $1 before the batch script ($3), and after it.
before() { mapfile -d '' -t call <"$1/$2"; local a; for a in "${call[@]}"; do [[ "$a" == */"$3" ]] && break; printf '%s\n' "$a"; done; :; }
after() { mapfile -d '' -t call <"$1/$2"; local a seen=0; for a in "${call[@]}"; do [ $seen = 1 ] && printf '%s\n' "$a"; [[ "$a" == */"$3" ]] && seen=1; done; :; }
has() { grep -qxF -- "$2" <<<"$1"; }  # TEXT LINE: LINE is one of TEXT's lines

gate_opts=(--seeds 3x1 --windows 'op=bwd,H=2048')
NORMGATE_SBATCH_ARGS="--partition=p --time=1:00:00" \
  submit "$d/a" "$table" "$d/out" 3 "${gate_opts[@]}" -- --comment="two words" --job-name "x y" --dependency=singleton ||
  fail "submit.sh with sbatch options after -- exited $?: $(cat "$d/a.out")"
[ "$(cat "$d/a.out")" = $'array 101\nmerge 102' ] || fail "printed $(cat "$d/a.out")"
[ "$(find "$d/a" -type f | wc -l)" = 2 ] || fail "sbatch called $(find "$d/a" -type f | wc -l) times, not 2"
for call in "1 gate-array.sbatch" "2 gate-merge.sbatch"; do
  set -- $call
  b=$(before "$d/a" "$1" "$2") a=$(after "$d/a" "$1" "$2")
  for want in "--comment=two words" "--job-name" "x y" "--partition=p" "--time=1:00:00" "--dependency=singleton"; do
    has "$b" "$want" || fail "call $1 ($2): '$want' is not one argument before the script:"$'\n'"$b"
  done
  has "$b" "x" && fail "call $1 ($2): a value with spaces was split:"$'\n'"$b"
  [ "$(grep -nxF -- "--job-name" <<<"$b" | cut -d: -f1)" -eq "$(( $(grep -nxF -- "x y" <<<"$b" | cut -d: -f1) - 1 ))" ] ||
    fail "call $1: --job-name is not followed by its value 'x y'"
  [ "$a" = "$(printf '%s\n' "$table" "$d/out" 3 "${gate_opts[@]}")" ] ||
    fail "call $1 ($2): the script's arguments are not TABLE OUTDIR N and the gate options:"$'\n'"$a"
done
# The merge's dependency on the array is the last before its script, after the user's.
[ "$(before "$d/a" 2 gate-merge.sbatch | tail -n 1)" = "--dependency=afterany:101" ] ||
  fail "the merge's last option is not --dependency=afterany:101: $(before "$d/a" 2 gate-merge.sbatch | tail -n 1)"

# No --: every argument after N is a gate option, as before.
submit "$d/b" "$table" "$d/out" 2 "${gate_opts[@]}" || fail "submit.sh without -- exited $?"
[ "$(after "$d/b" 1 gate-array.sbatch)" = "$(printf '%s\n' "$table" "$d/out" 2 "${gate_opts[@]}")" ] ||
  fail "without --: the array's script arguments: $(after "$d/b" 1 gate-array.sbatch)"

# A bad gate option before --: refused by the plan check, nothing submitted.
rc=0
submit "$d/c" "$table" "$d/out" 2 --seeds bogus -- --comment="x y" 2>"$d/c.err" || rc=$?
[ "$rc" = 2 ] || fail "a bad gate option: exit $rc, not 2"
[ "$(find "$d/c" -type f | wc -l)" = 0 ] || fail "a bad gate option: sbatch was called"
echo "submit_args: sbatch options after -- arrive whole; gate options unchanged; bad options submit nothing"
