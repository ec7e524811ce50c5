#!/usr/bin/env bash
# tools/slurm/submit.sh TABLE OUTDIR N [gate options] [-- sbatch options]:
# a gate campaign on Slurm: a job array of N shards (gate-array.sbatch: `normgate gate TABLE
# --shard K/N`), then the merge and refinement (gate-merge.sbatch) as a job
# that starts when every array task has ended (--dependency=afterany: a
# failed shard must show up as INCOMPLETE windows in the merge's report, not
# as a merge that never starts). Prints "array JOBID" and "merge JOBID".
# The gate options go to every job (the same campaign): e.g. --seeds 3x120
# --threads 16. Results in OUTDIR: shard-K-of-N.jsonl, merged.jsonl,
# gate.md, gate.json, slurm-*.out. Arguments after -- go to both sbatch
# calls as they are, one argument each (a value with spaces stays one:
# -- --comment="nightly run" --job-name "gate x"), after NORMGATE_SBATCH_ARGS.
#
# Site settings come from the environment, never from this file:
#   NORMGATE                  the normgate binary (default: `normgate` on PATH)
#   NORMGATE_SBATCH_ARGS      sbatch options for every job (e.g. "--partition=gpu --account=proj --time=2:00:00"),
#                             split at blanks: a value with spaces goes after -- on the command line
#   NORMGATE_SBATCH_SHARD_ARGS  more for the shards (e.g. "--gres=gpu:1 --cpus-per-task=16")
#   NORMGATE_SBATCH_MERGE_ARGS  more for the merge (its refinement runs cases too)
#   NORMGATE_JOURNAL_KEY_FILE a secret key file every job seals its journal lines with (HMAC-SHA256), so the
#                             merge refuses a shard line rewritten by anyone without the key (docs/schemas.md,
#                             "Journal keys"); passed on as sbatch passes the environment
#   NORMGATE_ARRAY            the array indices to submit (default 1-N; e.g. "2" reruns shard 2, resuming its
#                             journal; indices and ranges in 1..N, comma-separated, an optional %LIMIT)
# The jobs run in the folder submit.sh was called from (relative paths in the
# gate options mean what they meant to the check below); NORMGATE is made an
# absolute path; the jobs' Slurm logs go to OUTDIR. The merge's dependency is
# always afterany on the array: a --dependency in NORMGATE_SBATCH_ARGS or
# after -- applies to the array only. Exit 2 on bad arguments, 3 when sbatch fails.
set -euo pipefail
usage() { echo "usage: $0 TABLE OUTDIR N [gate options] [-- sbatch options]" >&2; exit 2; }
[ $# -ge 3 ] || usage
table=$1 out=$2 n=$3
shift 3
gate=() extra=()  # the gate options; the sbatch options after --
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then
    shift
    extra=("$@")
    break
  fi
  gate+=("$1")
  shift
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit: N '$n' is not a positive integer" >&2; exit 2; }
[ "${#n}" -le 5 ] && [ "$n" -le 65536 ] || { echo "submit: N '$n' is too large (at most 65536 shards)" >&2; exit 2; }
spec="${NORMGATE_ARRAY:-1-$n}"
[[ "$spec" =~ ^[0-9,-]+(%[1-9][0-9]*)?$ ]] ||
  { echo "submit: NORMGATE_ARRAY '$spec' is not a list of indices and ranges (e.g. 1-$n, 2, 1,3)" >&2; exit 2; }
IFS=, read -r -a parts <<<"${spec%%%*}"
for part in "${parts[@]}"; do
  [[ "$part" =~ ^([0-9]+)(-([0-9]+))?$ ]] ||
    { echo "submit: NORMGATE_ARRAY '$spec': '$part' is not an index or a range A-B" >&2; exit 2; }
  lo=$((10#${BASH_REMATCH[1]})) hi=$((10#${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}))
  [ "$lo" -ge 1 ] && [ "$hi" -le "$n" ] && [ "$lo" -le "$hi" ] ||
    { echo "submit: NORMGATE_ARRAY '$spec': '$part' is outside the shards 1..$n" >&2; exit 2; }
done
[ -r "$table" ] || { echo "submit: TABLE '$table' is not a readable file" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "submit: sbatch not found: is this a Slurm login node?" >&2; exit 3; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ng=$(command -v "${NORMGATE:-normgate}") && ng=$(realpath "$ng") ||
  { echo "submit: normgate binary '${NORMGATE:-normgate}' not found (set NORMGATE)" >&2; exit 2; }
export NORMGATE="$ng"  # the jobs get the environment: the same binary, by an absolute path
# Checked here, not in a job: bad options fail now, not N times later.
"$NORMGATE" gate "$table" --plan ${gate[@]+"${gate[@]}"} >/dev/null ||
  { echo "submit: '$NORMGATE gate $table --plan' refuses these options (or does not run)" >&2; exit 2; }
mkdir -p "$out" || exit 3
table=$(realpath "$table") out=$(realpath "$out")
read -r -a common <<<"${NORMGATE_SBATCH_ARGS:-}"
read -r -a shard_args <<<"${NORMGATE_SBATCH_SHARD_ARGS:-}"
read -r -a merge_args <<<"${NORMGATE_SBATCH_MERGE_ARGS:-}"
# ${a[@]+"${a[@]}"}: an empty array under set -u on bash older than 4.4.
array=$(sbatch --parsable --chdir="$PWD" --output="$out/slurm-normgate-%A_%a.out" --array="$spec" \
  ${common[@]+"${common[@]}"} ${extra[@]+"${extra[@]}"} ${shard_args[@]+"${shard_args[@]}"} \
  "$here/gate-array.sbatch" "$table" "$out" "$n" ${gate[@]+"${gate[@]}"}) || { echo "submit: sbatch of the shard array failed" >&2; exit 3; }
array=${array%%;*}  # --parsable: "JOBID[;CLUSTER]"
# The dependency last: an option of the user's cannot replace it.
merge=$(sbatch --parsable --chdir="$PWD" --output="$out/slurm-normgate-merge-%j.out" \
  ${common[@]+"${common[@]}"} ${extra[@]+"${extra[@]}"} ${merge_args[@]+"${merge_args[@]}"} \
  --dependency="afterany:$array" "$here/gate-merge.sbatch" "$table" "$out" "$n" ${gate[@]+"${gate[@]}"}) || { echo "submit: sbatch of the merge failed (array $array submitted)" >&2; exit 3; }
merge=${merge%%;*}
echo "array $array"
echo "merge $merge"
