#!/usr/bin/env bash
# tools/slurm/submit.sh TABLE OUTDIR N [gate options]: a gate campaign on
# Slurm: a job array of N shards (gate-array.sbatch: `normgate gate TABLE
# --shard K/N`), then the merge and refinement (gate-merge.sbatch) as a job
# that starts when every array task has ended (--dependency=afterany: a
# failed shard must show up as INCOMPLETE windows in the merge's report, not
# as a merge that never starts). Prints "array JOBID" and "merge JOBID".
# The gate options go to every job (the same campaign): e.g. --seeds 3x120
# --threads 16. Results in OUTDIR: shard-K-of-N.jsonl, merged.jsonl,
# gate.md, gate.json, slurm-*.out.
#
# Site settings come from the environment, never from this file:
#   NORMGATE                  the normgate binary (default: `normgate` on PATH)
#   NORMGATE_SBATCH_ARGS      sbatch options for every job (e.g. "--partition=gpu --account=proj --time=2:00:00")
#   NORMGATE_SBATCH_SHARD_ARGS  more for the shards (e.g. "--gres=gpu:1 --cpus-per-task=16")
#   NORMGATE_SBATCH_MERGE_ARGS  more for the merge (its refinement runs cases too)
#   NORMGATE_ARRAY            the array indices to submit (default 1-N; e.g. "2" reruns shard 2, resuming its journal)
# Exit 2 on bad arguments, 3 when sbatch fails.
set -euo pipefail
usage() { echo "usage: $0 TABLE OUTDIR N [gate options]" >&2; exit 2; }
[ $# -ge 3 ] || usage
table=$1 out=$2 n=$3
shift 3
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit: N '$n' is not a positive integer" >&2; exit 2; }
[ -r "$table" ] || { echo "submit: TABLE '$table' is not a readable file" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "submit: sbatch not found: is this a Slurm login node?" >&2; exit 3; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Checked here, not in a job: bad options fail now, not N times later.
"${NORMGATE:-normgate}" gate "$table" --plan "$@" >/dev/null ||
  { echo "submit: '${NORMGATE:-normgate} gate $table --plan' refuses these options (or does not run)" >&2; exit 2; }
mkdir -p "$out" || exit 3
table=$(realpath "$table") out=$(realpath "$out")
read -r -a common <<<"${NORMGATE_SBATCH_ARGS:-}"
read -r -a shard_args <<<"${NORMGATE_SBATCH_SHARD_ARGS:-}"
read -r -a merge_args <<<"${NORMGATE_SBATCH_MERGE_ARGS:-}"
array=$(sbatch --parsable --chdir="$out" --array="${NORMGATE_ARRAY:-1-$n}" "${common[@]}" "${shard_args[@]}" \
  "$here/gate-array.sbatch" "$table" "$out" "$n" "$@") || { echo "submit: sbatch of the shard array failed" >&2; exit 3; }
array=${array%%;*}  # --parsable: "JOBID[;CLUSTER]"
merge=$(sbatch --parsable --chdir="$out" --dependency="afterany:$array" "${common[@]}" "${merge_args[@]}" \
  "$here/gate-merge.sbatch" "$table" "$out" "$n" "$@") || { echo "submit: sbatch of the merge failed (array $array submitted)" >&2; exit 3; }
merge=${merge%%;*}
echo "array $array"
echo "merge $merge"
