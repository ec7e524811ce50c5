#!/usr/bin/env bash
# A gate campaign in slices, on a CUDA machine, resumable across runs (each
# run stops at its deadline): every slice is one `normgate gate` process, all
# slices at once, slice K on GPU (K-1) mod NGPU.
#
#   tools/campaign.sh [--out DIR] [--deadline-s N] CAMPAIGN_DIR SLICE_FILTER [SLICE_FILTER ...]
#
#   --out DIR       where campaign.tgz goes (default: $OUT if set, else out/
#                   in the repository)
#   --deadline-s N  seconds from the start after which a slice still running
#                   is killed (default: $NG_CAMPAIGN_DEADLINE, else 540)
#
# CAMPAIGN_DIR (in the repository, e.g. docs/results/campaigns/v3-plain) keeps one
# journal per slice, gzipped: slice-K.jsonl.gz, K = 1, 2, ... in argument
# order (slice K's window filter is its argument; the same slice must keep
# the same filter and number from run to run). Slice the table so that
# windows sharing cases (fwd, det and nondet of one H, w, form) are in the
# same slice, e.g. by H or form: split by op or mode, the shared cases run
# once per slice. Each run:
#   1. unpacks every slice's journal (if any) into a work folder,
#   2. runs the slices at once, cores/slices OpenMP threads each, `normgate
#      gate TABLE --seeds SEEDS --windows FILTER --journal ... --quiet
#      --report-md/json` and NG_CAMPAIGN_ARGS; a slice still running at the
#      deadline is killed (kill -9: the journal keeps every finished case;
#      the next run resumes),
#   3. gzips the journals back into CAMPAIGN_DIR (so a next run in the same
#      checkout resumes) and writes, per slice, its report when the gate
#      finished (slice-K.md/.json: the verdict covers grid and refinement) or
#      tools/journal_summary.py's partial summary,
#   4. packs everything into DIR/campaign.tgz (to unpack over CAMPAIGN_DIR in
#      another checkout, where this one is not kept) and prints a short table
#      last.
# Environment: NG_CAMPAIGN_DEMO (1: the loader and control demo first),
# NG_CAMPAIGN_APPROVE (1: a slice whose every window passed is run once more,
# sequentially, with --approve, writing TABLE's approvals file next to it and
# into the pack, under flock(1) on TABLE's .approvals.lock so that campaigns
# run side by side never write it at once; default 0), NG_CAMPAIGN_TABLE (routes/sm90a.toml),
# NG_CAMPAIGN_SEEDS (3x16), NORMGATE_BUILD (build), NG_CAMPAIGN_ARGS (more gate options),
# NG_CAMPAIGN_THREADS (OpenMP threads: one number for every slice, or a comma
# list, one per slice; default cores/slices), NG_CAMPAIGN_GPUS (GPU index: one
# for every slice, or a comma list, one per slice; default (K-1) mod NGPU).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# glibc madvises its large chunks for transparent huge pages (THP "madvise"):
# the oracle's arrays fault in 512x fewer pages (the downloads' vectors ask
# for them in any case; docs/perf/oracle-and-gate-throughput.md, D17).
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
final="${OUT:-$root/out}"
deadline="${NG_CAMPAIGN_DEADLINE:-540}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "campaign: --out needs a folder (not empty)" >&2; exit 2; }; final="$2"; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "campaign: --deadline-s needs seconds" >&2; exit 2; }; deadline="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "campaign: unknown option '$1' (--out DIR, --deadline-s N)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { usage >&2; exit 2; }
[[ "$deadline" =~ ^[0-9]+$ ]] && [ "$deadline" -gt 0 ] ||
  { echo "campaign: --deadline-s '$deadline' is not a positive whole number of seconds" >&2; exit 2; }
dir="$1"; shift
build="${NORMGATE_BUILD:-$root/build}"
bin="$build/apps/normgate"
table="${NG_CAMPAIGN_TABLE:-$root/routes/sm90a.toml}"
seeds="${NG_CAMPAIGN_SEEDS:-3x16}"
[ -x "$bin" ] || { echo "campaign: no normgate binary at $bin" >&2; exit 2; }
# The table's approvals: STEM.approvals.json, also for a per-GPU table
# STEM@SLUG.toml; the library's rule, asked (`normgate routes --files`).
files="$("$bin" routes --files -- "$table")" ||
  { echo "campaign: NG_CAMPAIGN_TABLE $table: refused by normgate routes --files (above)" >&2; exit 2; }
approvals="$(python3 -c 'import json,sys; sys.stdout.buffer.write(json.loads(sys.argv[1])["approvals"].encode())' "$files")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir" "$final"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
have_gpu=$([ "$ngpu" -ge 1 ] && echo 1 || echo 0)
[ "$ngpu" -ge 1 ] || ngpu=1
nslice=$#
cores=$(nproc)
threads=$(( cores / nslice > 0 ? cores / nslice : 1 ))
# per_slice NAME LIST K DEFAULT: LIST's K-th comma field (its only field when
# it has none; DEFAULT when LIST is empty); exit 2, naming NAME, on a list
# whose field count is not the slice count or a field that is not a number
# of at most 6 digits.
per_slice() {
  local name=$1 list=$2 k=$3 v
  if [ -z "$list" ]; then v=$4
  elif [[ "$list" == *,* ]]; then
    local n
    n=$(tr -cd , <<<"$list" | wc -c)
    [ $((n + 1)) -eq "$nslice" ] ||
      { echo "campaign: $name='$list' has $((n + 1)) fields for $nslice slices" >&2; exit 2; }
    v=$(cut -d, -f"$k" <<<"$list")
  else v=$list; fi
  [[ "$v" =~ ^[0-9]{1,6}$ ]] || { echo "campaign: $name='$list' gives slice $k no number ('$v')" >&2; exit 2; }
  echo "$v"
}
declare -a slice_threads slice_gpu
for k in $(seq 1 "$nslice"); do
  slice_threads[$k]=$(per_slice NG_CAMPAIGN_THREADS "${NG_CAMPAIGN_THREADS:-}" "$k" "$threads") || exit 2
  slice_gpu[$k]=$(per_slice NG_CAMPAIGN_GPUS "${NG_CAMPAIGN_GPUS:-}" "$k" $(( (k - 1) % ngpu ))) || exit 2
  [ "${slice_threads[$k]}" -ge 1 ] || { echo "campaign: slice $k: 0 threads" >&2; exit 2; }
  # A GPU index the host does not have would leave the slice on the CPU models.
  [ "$have_gpu" = 0 ] || [ "${slice_gpu[$k]}" -lt "$ngpu" ] ||
    { echo "campaign: slice $k: GPU ${slice_gpu[$k]}, but this host has $ngpu (0..$((ngpu - 1)))" >&2; exit 2; }
done
echo "campaign: $nslice slices on $ngpu GPUs, threads ${slice_threads[*]}, GPUs ${slice_gpu[*]}, deadline ${deadline}s, table $table, seeds $seeds" \
  | tee "$work/campaign.log"
# NG_CAMPAIGN_DEMO=1: first, in the same run, the two controls the gate
# issue asks for: the loader refuses a table routing a negative control
# (exit 2), and with the explicit override the gate runs it and fails it on
# `cancel` (exit 1). Output: demo.txt.
if [ "${NG_CAMPAIGN_DEMO:-0}" = 1 ]; then
  neg="$root/routes/negative/sm90a-ctl-fp32-seq.toml"
  {
    echo "\$ normgate gate $neg --plan"
    "$bin" gate "$neg" --plan 2>&1 | tail -3
    echo "rc=${PIPESTATUS[0]} (2 expected: the loader refuses a routed negative control)"
    echo
    echo "\$ normgate gate $neg --allow-controls --seeds cancel:0..1 --t-per-window 2 --dense-points 0 --fresh-factor 0 --quiet --report-md demo_ctl.md"
    "$bin" gate "$neg" --allow-controls --seeds cancel:0..1 --t-per-window 2 --dense-points 0 --fresh-factor 0 \
      --quiet --report-md "$work/demo_ctl.md" 2>&1 | tail -4
    echo "rc=${PIPESTATUS[0]} (1 expected: the control fails its dw budget on cancel)"
  } >"$work/demo.txt" 2>&1
  cat "$work/demo.txt"
fi
# Every slice's filter checked before any slice starts.
k=0
for filter in "$@"; do
  k=$((k + 1))
  echo "$filter" >"$work/slice-$k.filter"
  if [ -f "$dir/slice-$k.filter" ] && ! cmp -s "$dir/slice-$k.filter" "$work/slice-$k.filter"; then
    echo "campaign: slice $k's filter '$filter' differs from the one it started with: $(cat "$dir/slice-$k.filter")" >&2
    exit 2
  fi
done
# One slice's gate command (without the per-run options): set_slice_cmd K
# fills the array `cmd`.
set_slice_cmd() {
  # shellcheck disable=SC2206
  cmd=("$bin" gate "$table" --seeds "$seeds" --windows "$(cat "$work/slice-$1.filter")"
       --journal "$work/slice-$1.jsonl" --threads "${slice_threads[$1]}" --quiet ${NG_CAMPAIGN_ARGS:-})
}
declare -a pids cmd
for k in $(seq 1 "$nslice"); do
  [ -f "$dir/slice-$k.jsonl.gz" ] && gunzip -c "$dir/slice-$k.jsonl.gz" >"$work/slice-$k.jsonl"
  set_slice_cmd "$k"
  CUDA_VISIBLE_DEVICES=${slice_gpu[$k]} timeout --signal=KILL "$deadline" "${cmd[@]}" \
    --report-md "$work/slice-$k.md" --report-json "$work/slice-$k.json" >"$work/slice-$k.log" 2>&1 &
  pids[$k]=$!
done
declare -a rows
for k in $(seq 1 "$nslice"); do
  wait "${pids[$k]}"
  rc=$?
  j="$work/slice-$k.jsonl"
  lines=$( [ -f "$j" ] && wc -l <"$j" || echo 0)
  if [ -f "$work/slice-$k.json" ] && [ "$rc" -le 1 ]; then
    state="finished (rc=$rc: $([ $rc -eq 0 ] && echo all windows pass || echo some window FAILS))"
  elif [ "$rc" -eq 137 ]; then
    state="stopped at the deadline (resumes next run)"
    python3 "$root/tools/journal_summary.py" "$j" --md "$work/slice-$k.partial.md" >/dev/null 2>&1 || true
  else
    state="ERROR rc=$rc: $(grep -v '^ *$' "$work/slice-$k.log" | tail -4 | tr '\n' ' ' | cut -c1-600)"
  fi
  # A slice whose every window passed: once more, sequentially, with
  # --approve (resumes from the complete journal: runs no case), so that
  # concurrent slices never write the approvals file at the same time.
  if [ "$rc" -eq 0 ] && [ -f "$work/slice-$k.json" ] && [ "${NG_CAMPAIGN_APPROVE:-0}" = 1 ]; then
    set_slice_cmd "$k"
    # (flock: campaigns run side by side write the same approvals file; at
    # most 120 s waiting for it)
    if flock -w 120 "${approvals%.json}.lock" "${cmd[@]}" --approve >"$work/slice-$k.approve.log" 2>&1; then
      state="$state, approved"
    else
      state="$state, approve FAILED (slice-$k.approve.log)"
    fi
  fi
  [ -f "$j" ] && gzip -c "$j" >"$work/slice-$k.jsonl.gz" && rm -f "$j" && cp "$work/slice-$k.jsonl.gz" "$dir/"
  cp "$work/slice-$k.filter" "$dir/"
  for f in "$work/slice-$k.md" "$work/slice-$k.json" "$work/slice-$k.partial.md"; do [ -f "$f" ] && cp "$f" "$dir/"; done
  rows+=("| $k | \`$(cat "$work/slice-$k.filter")\` | $((lines > 0 ? lines - 1 : 0)) | $state |")
done
[ -f "$approvals" ] && cp "$approvals" "$work/"
tar czf "$final/campaign.tgz" -C "$work" .
echo
echo "| slice | windows | cases journalled | state |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
for k in $(seq 1 "$nslice"); do grep -E "^(pipeline|verdict) " "$work/slice-$k.log" | sed "s/^/slice $k: /"; done
