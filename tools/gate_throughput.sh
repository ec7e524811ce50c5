#!/usr/bin/env bash
# The gate's throughput on this host, phase by phase (written for a CUDA
# machine; runs on the CPU models without one, where the GPU phases are 0):
#   1. finish_bench (one case's oracle + validation, what finish_check does
#      after the kernel) on NG_TP_BENCH_CASE at 1 thread and at every core:
#      the oracle half's cost per element on this CPU,
#   2. one `normgate gate` over NG_TP_WINDOWS of NG_TP_TABLE with
#      NG_TP_SEEDS and NG_TP_ARGS, --stats-json: elements/s per phase
#      (generation, kernels, downloads, reference, validation, journal), end
#      to end, and as a fraction of the host's copy bandwidth measured in the
#      same run (docs/schemas.md, normgate-pipeline-stats/1),
#   3. a short table last (also DIR/throughput.md).
#
#   tools/gate_throughput.sh [--out DIR] [--deadline-s N]
#
#   --out DIR       the output folder (default: $OUT if set, else
#                   out/gate-throughput/ in the repository, so that
#                   scripts/main's out/gate.json is never replaced):
#                   throughput.md, stats.json, gate.json, gate.md,
#                   finish_bench-*.txt, gate.log (earlier ones removed first)
#   --deadline-s N  seconds after the start by which the gate is stopped
#                   (default 0: none; at most 9 digits); a stopped gate
#                   writes no stats
# Exit 0 both phases ran (whatever the gate's verdict); 2 a bad argument or
# setting (before any run: the gate's settings are checked by `normgate gate
# --plan`); 3 a run failed, the gate was stopped by the deadline, or the
# output folder cannot be written. The folder's earlier results are removed
# first; a signal stops the running child and the spinners too (busy.sh).
# Environment: NORMGATE_BUILD (build), NG_TP_TABLE (routes/sm90a.toml),
# NG_TP_WINDOWS ("op=bwd,mode=det,H=6144,w=bf16,form=plain": a GPU's work,
# T up to 131072; on the CPU models take a small window, e.g.
# "op=bwd,mode=det,H=6144,w=bf16,form=plain,T=129..512"), NG_TP_SEEDS
# (3x1), NG_TP_ARGS ("--t-per-window 2 --dense-points 0 --fresh-factor 0"),
# NG_TP_BENCH_CASE (H=6144,T=16384,w=bf16,form=plain,family=cancel,seed=1),
# NG_TP_BENCH_REPS (3), NG_TP_BUSY (0: how many processes spin on the CPU
# beside the whole run, as another job on a shared host would; the table says
# how many); NORMGATE_OVERLAP=0 runs the gate's GPU and oracle
# halves one after the other (harness pipeline.h pipeline_overlap), and the
# table says which way it ran.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# glibc madvises its large chunks for transparent huge pages (THP "madvise"):
# the oracle's arrays fault in 512x fewer pages (the downloads' vectors ask
# for them in any case; docs/perf/oracle-and-gate-throughput.md, D17).
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
out="${OUT:-$root/out/gate-throughput}"
deadline=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "gate_throughput: --out needs a folder (not empty)" >&2; exit 2; }; out="$2"; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "gate_throughput: --deadline-s needs seconds" >&2; exit 2; }; deadline="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gate_throughput: unknown argument '$1' (--out DIR, --deadline-s N)" >&2; exit 2 ;;
  esac
done
[[ "$deadline" =~ ^[0-9]{1,9}$ ]] ||
  { echo "gate_throughput: --deadline-s '$deadline' is not a whole number of seconds (at most 9 digits)" >&2; exit 2; }
deadline=$((10#$deadline))  # 08 is eight, not a bad octal number
[ ! -e "$out" ] || [ -d "$out" ] || { echo "gate_throughput: --out '$out' exists and is not a folder" >&2; exit 2; }
build="${NORMGATE_BUILD:-$root/build}"
bin="$build/apps/normgate"
bench="$build/bench/finish_bench"
for f in "$bin" "$bench"; do
  [ -x "$f" ] || { echo "gate_throughput: $f is missing (build first, or set NORMGATE_BUILD)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "gate_throughput: python3 is needed for the table" >&2; exit 2; }
table="${NG_TP_TABLE:-$root/routes/sm90a.toml}"
windows="${NG_TP_WINDOWS:-op=bwd,mode=det,H=6144,w=bf16,form=plain}"
seeds="${NG_TP_SEEDS:-3x1}"
args="${NG_TP_ARGS:---t-per-window 2 --dense-points 0 --fresh-factor 0}"
bcase="${NG_TP_BENCH_CASE:-H=6144,T=16384,w=bf16,form=plain,family=cancel,seed=1}"
reps="${NG_TP_BENCH_REPS:-3}"
[[ "$reps" =~ ^[1-9][0-9]{0,5}$ ]] ||
  { echo "gate_throughput: NG_TP_BENCH_REPS '$reps' is not a count in 1..999999" >&2; exit 2; }
# shellcheck source=tools/busy.sh
. "$root/tools/busy.sh"
busy="${NG_TP_BUSY:-0}"
busy_count_ok gate_throughput NG_TP_BUSY "$busy" || exit 2
# The bench's case and the gate's settings, checked before any run (their
# own messages).
if ! case_err=$("$bin" case "$bcase" --no-digest 2>&1 >/dev/null); then
  echo "gate_throughput: NG_TP_BENCH_CASE '$bcase' is refused: $case_err" >&2
  exit 2
fi
# shellcheck disable=SC2206  # NG_TP_ARGS is a list of options
gate=("$bin" gate "$table" --windows "$windows" --seeds "$seeds" $args)  # checked here, run in step 2
if ! plan_err=$("${gate[@]}" --plan 2>&1 >/dev/null); then
  echo "gate_throughput: the gate's settings (NG_TP_TABLE, NG_TP_WINDOWS, NG_TP_SEEDS, NG_TP_ARGS) are refused:" >&2
  echo "$plan_err" | sed 's/^/  /' >&2
  exit 2
fi
mkdir -p "$out" || { echo "gate_throughput: cannot create $out" >&2; exit 3; }
[ -w "$out" ] || { echo "gate_throughput: cannot write into $out" >&2; exit 3; }
rm -f "$out"/env.txt "$out"/finish_bench-*.txt "$out"/stats.json "$out"/gate.json "$out"/gate.md \
  "$out"/gate.log "$out"/throughput.md
cores=$(nproc)
{
  echo "host: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $cores cores"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  "$bin" --version 2>&1 | head -2
  echo "beside: $busy spinning process(es)"
} >"$out/env.txt"

# The spinners (NG_TP_BUSY): stopped on any exit (busy.sh).
start_spinners "$busy"
failed=0

# 1. The oracle half per element at 1 thread and at every core.
for t in 1 "$cores"; do
  run_child "$bench" "$bcase" bwd_det_chunked "$reps" "$t" >"$out/finish_bench-$t.txt" 2>&1 ||
    { echo "gate_throughput: finish_bench at $t threads failed (see $out/finish_bench-$t.txt)" >&2; failed=1; }
done

# 2. One gate with its stats.
limit=$(( deadline > 0 ? deadline - SECONDS : 0 ))
if [ "$deadline" -gt 0 ] && [ "$limit" -le 0 ]; then
  echo "gate_throughput: no time left for the gate" >&2
  failed=1
else
  tcmd=()
  [ "$limit" -gt 0 ] && tcmd=(timeout --signal=KILL "$limit")
  grc=0
  run_child "${tcmd[@]}" "${gate[@]}" --quiet \
    --stats-json "$out/stats.json" --report-json "$out/gate.json" --report-md "$out/gate.md" >"$out/gate.log" 2>&1 ||
    grc=$?
  echo "gate_throughput: gate exit $grc" >>"$out/gate.log"
  # 0 and 1 are verdicts (pass; a window failed or was inconclusive): the gate ran.
  if [ "$grc" -gt 1 ]; then
    echo "gate_throughput: the gate exited $grc$([ "$grc" -eq 137 ] && echo ' (stopped by the deadline)') (see $out/gate.log)" >&2
    failed=1
  fi
fi

# 3. The table.
python3 - "$out" "$cores" <<'PY' | tee "$out/throughput.md"
import json, os, re, sys
out, cores = sys.argv[1], sys.argv[2]
print(open(os.path.join(out, "env.txt")).read().strip().replace("\n", "; "))
print()
print("| finish_bench | threads | text |")
print("| --- | --- | --- |")
for t in ("1", cores):
    p = os.path.join(out, f"finish_bench-{t}.txt")
    lines = [l.strip() for l in open(p)] if os.path.exists(p) else ["(missing)"]
    keep = [l for l in lines if re.search(r"ns/el|ns per el|CaseOracle|validation|total", l)] or lines[-3:]
    print(f"| | {t} | {'<br>'.join(keep)} |")
print()
p = os.path.join(out, "stats.json")
if not os.path.exists(p):
    print("gate: no stats (stopped or failed; see gate.log)")
    sys.exit(0)
s = json.load(open(p))
def rate(x):
    return "-" if x is None else f"{x:.3g}"
ov = "overlapped" if s.get("overlapped") else "not overlapped"
env_ov = os.environ.get("NORMGATE_OVERLAP")
print(f"gate: {s['cases']} cases, {s['elements']:.4g} elements, devices {s['devices']}, halves {ov}"
      + (f" (NORMGATE_OVERLAP={env_ov})" if env_ov is not None else ""))
print()
print("| phase | seconds | elements/s |")
print("| --- | --- | --- |")
for k, v in s["phases"].items():
    print(f"| {k} | {v['seconds']:.2f} | {rate(v['elements_per_second'])} |")
e = s["end_to_end"]
print(f"| end to end | {e['seconds']:.2f} | {rate(e['elements_per_second'])} |")
hc = s["host_copy"]
print()
print(f"host copy {hc['bytes_per_second'] / 1e9:.1f} GB/s ({hc['threads']} threads); end to end at "
      f"{s['bytes_per_element']} B/element = {rate(s['end_to_end_fraction_of_host_copy'])} of it")
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gate_throughput: the table failed" >&2; failed=1; }
exit $(( failed ? 3 : 0 ))
