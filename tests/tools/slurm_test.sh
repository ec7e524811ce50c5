#!/usr/bin/env bash
# slurm_test.sh NORMGATE TABLE: a sharded gate on a real one-node Slurm
# (tools/slurm/), on the CPU models:
#   1. starts munged, slurmctld and slurmd of its own (config, keys, state
#      and spool under a temporary folder, ports 16817/16818 or free ones
#      when taken, munge on its own socket), and stops them on exit, failure
#      included;
#   2. tools/slurm/submit.sh: a 3-shard job array and the dependent merge and
#      refinement; the merged gate.json and gate.md equal an unsharded run's
#      (but the date);
#   3. shards 1 and 3 of a second campaign and their merge: INCOMPLETE
#      (exit 1) naming shard 2; shard 2 killed mid-run (its file-size limit
#      cuts the journal in the middle of a line: SIGXFSZ, a torn line): the
#      merge that follows it says INCOMPLETE (exit 1), never PASS; shard 2
#      resubmitted alone resumes its journal (only the missing cases run),
#      the merge resubmitted gives the unsharded reports again.
# Exit 0 pass, 1 fail, 77 skip (no Slurm or munge installed, or not root:
# slurmd runs jobs as their users and needs root; with NG_REQUIRE_SLURM=1
# those are failures). NORMGATE_SLURM_KEEP=1
# keeps the temporary folder (configuration, logs, journals, reports).
set -u
[ $# -eq 2 ] || { echo "usage: $0 NORMGATE TABLE" >&2; exit 1; }
# NG_REQUIRE_SLURM=1 (.ci/run sets it once it has installed Slurm): what
# would be a skip is a failure, so CI cannot pass without running this test.
skip=77
[ "${NG_REQUIRE_SLURM:-0}" = 1 ] && skip=1
for c in sbatch squeue scontrol sinfo slurmctld slurmd munged; do
  command -v "$c" >/dev/null || { echo "SKIP: $c not installed (Debian: apt-get install slurm-wlm munge)"; exit $skip; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: not root (slurmd must run as root)"; exit $skip; }
bin=$(realpath "$1") table=$(realpath "$2")
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
d=$(mktemp -d /tmp/normgate-slurm.XXXXXX)
chmod 755 "$d"
export SLURM_CONF="$d/slurm.conf"
stop() {
  # Only the daemons this test started, by the pids they wrote.
  for p in slurmd slurmctld munged; do
    [ -s "$d/run/$p.pid" ] || continue
    pid=$(cat "$d/run/$p.pid")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  if [ -n "${NORMGATE_SLURM_KEEP:-}" ]; then echo "kept $d"; else rm -rf "$d"; fi
}
trap stop EXIT
fail() {
  echo "FAIL: $*"
  for f in "$d"/log/*.log; do echo "--- $f"; tail -15 "$f"; done
  exit 1
}

# --- 1. a one-node cluster of our own
mkdir -p "$d"/{state,spool,log,run,munge,a,b}
host=$(hostname -s)
# Ports 16817/16818 unless taken (another run of this test): then others.
port=16817
while ss -ltn 2>/dev/null | grep -q -E ":($port|$((port + 1))) "; do port=$((20000 + RANDOM % 20000)); done
cpus=$(nproc)
mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
cat >"$SLURM_CONF" <<CONF
ClusterName=normgate-ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=2
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:4
CONF
dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$d/munge/munge.key"
munged --key-file="$d/munge/munge.key" --socket="$d/munge/munge.socket" --pid-file="$d/run/munged.pid" \
  --log-file="$d/log/munged.log" --seed-file="$d/munge/munged.seed" -f ||
  fail "munged did not start"
slurmctld -i || fail "slurmctld did not start"
slurmd || fail "slurmd did not start"
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -1)
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || fail "the node is not idle after 30 s (state '$state')"

# Wait for job $1 to leave the queue (at most $2 seconds); prints its state and exit code.
wait_job() {
  local t=0
  while [ -n "$(squeue -h -j "$1" 2>/dev/null)" ]; do
    sleep 0.2
    t=$((t + 1))
    [ $t -lt $(($2 * 5)) ] || fail "job $1 still queued or running after $2 s"
  done
  local line
  line=$(scontrol show job -o "$1" 2>/dev/null | head -1)
  echo "$(grep -o 'JobState=[A-Z_]*' <<<"$line") $(grep -o ' ExitCode=[0-9:]*' <<<"$line" | tr -d ' ')"
}
without_dates() { grep -v -e '^- date: ' -e '"date":' "$1"; }
same_reports() {  # DIR WHAT: DIR/gate.{json,md} equal the unsharded run's but the date
  diff <(without_dates "$d/full.json") <(without_dates "$1/gate.json") >"$d/diff.txt" ||
    fail "$2: gate.json differs from the unsharded run's: $(head -20 "$d/diff.txt")"
  diff <(without_dates "$d/full.md") <(without_dates "$1/gate.md") >"$d/diff.txt" ||
    fail "$2: gate.md differs from the unsharded run's: $(head -20 "$d/diff.txt")"
}

# --- 2. the unsharded run, then 3 shards and the merge on Slurm
opts=(--backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --fresh-factor 1 --windows w=bf16)
"$bin" gate "$table" "${opts[@]}" --quiet --report-json "$d/full.json" --report-md "$d/full.md" >"$d/full.log" 2>&1 ||
  fail "unsharded gate: $(tail -3 "$d/full.log")"
export NORMGATE="$bin"
# Bad array indices are refused before OUTDIR is made (they failed every job).
for bad in 5 0 1-4 2,x; do
  NORMGATE_ARRAY=$bad "$src/tools/slurm/submit.sh" "$table" "$d/bad" 3 "${opts[@]}" >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] && [ ! -e "$d/bad" ] || fail "submit.sh took NORMGATE_ARRAY=$bad for 3 shards (exit $rc)"
done
# A --dependency of the user's (here singleton) must not replace the merge's
# afterany on the array: the merge started at once and found no journal.
# An sbatch option after -- whose value has spaces reaches the jobs whole.
ids=$(NORMGATE_SBATCH_ARGS="--dependency=singleton" "$src/tools/slurm/submit.sh" "$table" "$d/a" 3 "${opts[@]}" \
  -- --comment="normgate slurm test") || fail "submit.sh: $ids"
array=$(awk '$1 == "array" {print $2}' <<<"$ids") merge=$(awk '$1 == "merge" {print $2}' <<<"$ids")
[ -n "$array" ] && [ -n "$merge" ] || fail "submit.sh printed no job ids: $ids"
st=$(wait_job "$merge" 120)
[[ "$st" == "JobState=COMPLETED ExitCode=0:0" ]] || fail "merge job $merge: $st: $(cat "$d"/a/slurm-normgate-merge-*.out)"
scontrol show job -o "$merge" | grep -q "Comment=normgate slurm test" ||
  fail "the merge job's comment is not 'normgate slurm test': $(scontrol show job -o "$merge" | grep -o 'Comment=[^=]*')"
for k in 1 2 3; do
  [ -s "$d/a/shard-$k-of-3.jsonl" ] || fail "shard $k/3 wrote no journal"
done
same_reports "$d/a" "3 shards merged"
grep -q '^verdict  PASS' "$d"/a/slurm-normgate-merge-*.out || fail "the merge did not say PASS"

# --- 3. shard 2 killed mid-run, the merge INCOMPLETE; shard 2 resumed, the merge again
cp "$d/a/shard-2-of-3.jsonl" "$d/shard2-full.jsonl"
n2=$(($(wc -l <"$d/shard2-full.jsonl") - 1))
[ "$n2" -ge 6 ] || fail "shard 2/3 has only $n2 cases: too few to kill it in the middle"
# The journal's file-size limit (KiB, propagated to the job) ends in the middle of its 4th case line.
cut=$(head -n 4 "$d/shard2-full.jsonl" | wc -c)
line5=$(sed -n 5p "$d/shard2-full.jsonl" | wc -c)
limit=$(((cut + line5 / 2) / 1024))
[ $((limit * 1024)) -gt "$cut" ] || limit=$((limit + 1))
[ $((limit * 1024)) -gt "$((cut + 1))" ] && [ $((limit * 1024)) -lt "$((cut + line5))" ] ||
  fail "cannot place a size limit inside line 5 ($cut + $line5 bytes)"
NORMGATE_ARRAY=1,3 "$src/tools/slurm/submit.sh" "$table" "$d/b" 3 "${opts[@]}" >"$d/ids1" || fail "submit.sh 1,3"
merge1=$(awk '$1 == "merge" {print $2}' "$d/ids1")
st=$(wait_job "$merge1" 120)
# Shard 2 never ran: its merge fails with INCOMPLETE windows, naming the shard.
[[ "$st" == "JobState=FAILED ExitCode=1:0" ]] || fail "merge without shard 2: $st, expected FAILED with exit 1"
grep -q '^verdict  INCOMPLETE: .*(shards not given: 2/3)' "$d/b/slurm-normgate-merge-$merge1.out" ||
  fail "the merge without shard 2 did not say INCOMPLETE naming it: $(tail -2 "$d/b/slurm-normgate-merge-$merge1.out")"
# shellcheck disable=SC2016
killed=$(bash -c 'ulimit -c 0; ulimit -f '"$limit"'; exec sbatch --parsable --propagate=FSIZE,CORE --chdir="$1" --array=2 "$2" "$3" "$1" 3 "${@:4}"' \
  _ "$d/b" "$src/tools/slurm/gate-array.sbatch" "$table" "${opts[@]}") || fail "sbatch of the killed shard"
st=$(wait_job "${killed%%;*}" 120)
[[ "$st" != "JobState=COMPLETED ExitCode=0:0" ]] || fail "shard 2 was not killed: $st"
lines=$(wc -l <"$d/b/shard-2-of-3.jsonl")
[ "$lines" -eq 4 ] || fail "the killed shard's journal has $lines whole lines, expected 4 (header + 3 cases)"
[ "$(tail -c 1 "$d/b/shard-2-of-3.jsonl" | od -An -c | tr -d ' ')" != '\n' ] ||
  fail "the killed shard's journal ends in a whole line: it was not cut mid-write"
# The merge after the failed shard (what the afterany dependency runs): INCOMPLETE, exit 1.
sbatch --parsable --chdir="$d/b" "$src/tools/slurm/gate-merge.sbatch" "$table" "$d/b" 3 "${opts[@]}" >"$d/m2" ||
  fail "sbatch merge"
st=$(wait_job "$(cut -d';' -f1 "$d/m2")" 120)
[[ "$st" == "JobState=FAILED ExitCode=1:0" ]] || fail "merge after the killed shard: $st, expected FAILED with exit 1"
grep -q '"verdict": "incomplete"' "$d/b/gate.json" || fail "no INCOMPLETE window in the merge after the killed shard"
grep -q '^  "pass": false,$' "$d/b/gate.json" || fail "the report of an incomplete merge does not say pass false"
grep -q '^verdict  INCOMPLETE' "$d"/b/slurm-normgate-merge-*.out || fail "the merge did not say INCOMPLETE"
# Shard 2 resubmitted alone, and its merge: resumes, runs only its missing cases.
NORMGATE_ARRAY=2 "$src/tools/slurm/submit.sh" "$table" "$d/b" 3 "${opts[@]}" >"$d/ids2" || fail "submit.sh 2"
merge3=$(awk '$1 == "merge" {print $2}' "$d/ids2")
st=$(wait_job "$merge3" 120)
[[ "$st" == "JobState=COMPLETED ExitCode=0:0" ]] || fail "merge after the resumed shard: $st"
grep -q "3 finished cases resumed, $((n2 - 3)) run now, a torn last record" "$d"/b/slurm-normgate-*_2.out ||
  fail "shard 2 did not resume its 3 cases: $(grep journal "$d"/b/slurm-normgate-*_2.out)"
same_reports "$d/b" "a killed shard resumed and merged"
echo "PASS: 3 shards on Slurm merged to the unsharded reports; a shard killed mid-write made the merge INCOMPLETE, resumed and merged to the same reports"
