#!/usr/bin/env bash
# Continues issue 8's peers matrix (bench/peers.py through tools/peers.sh)
# on a CUDA machine: the rows not yet in docs/results/peers/run-*.json
# (--done), as many as fit before the deadline, then a short summary last.
#
# Runs in its repository's root (from any folder), with the capi library
# built (`scripts/bootstrap && scripts/build`: build/capi/libnormgate_capi.so,
# build/tests/test_capi) and the peers' wheels in .whl/ (Liger-Kernel 0.8.5's;
# README, "Benchmark against the peers").
# The committed H200 matrix is complete (96 of 96 rows since 2026-12-01:
# docs/perf/peers.md#current-numbers): with the defaults `--plan` below finds
# 0 rows and the run measures nothing (re-measuring rows means removing their
# run JSONs). A new matrix (other peers, seeds or GPU) names its own folder
# with NG_MATRIX_DONE (docs/results/peers/matrix-h100/README.md).
# What is left, without a GPU: `python3 bench/peers.py --plan --forms
# plain,res,heads24,heads4 --peers eager,TC,TCd,F.rms_norm,Liger --done
# 'docs/results/peers/run-*.json'`.
#
# Usage: tools/peers_matrix.sh --out DIR [--deadline-s N]
#   --out DIR       the output folder (default: $OUT; one of them is needed)
#   --deadline-s N  seconds this run may take (default 590); peers.py gets
#                   what is left after the tests minus 25 s for packing, as
#                   tools/peers.sh's --deadline-s and peers.py's --end-s.
# Environment:
#   NG_ROW_MARGIN   peers.py's --deadline-s is that minus this (default 45;
#                   counted from peers.py's start, after tools/peers.sh's
#                   install and torch's import, so the real gap to the end is
#                   a little less). Before it, peers.py starts only rows
#                   predicted to finish by --end-s (docs/perf/peers.md, D7;
#                   under "Tried and rejected" there: a fixed margin of 130 s
#                   left ~140 s unused, and the rows left late were heavier
#                   than 100 s).
#   NG_MATRIX_ARGS  the rows (default: the whole matrix, every form, H, T
#                   and weight dtype; --done skips what is measured).
#   NG_MATRIX_PEERS the peers (default eager,TC,TCd,F.rms_norm,Liger; add Q
#                   for QuACK, with NG_PEERS_OVERLAY as tools/peers.sh says).
#   NG_MATRIX_SEEDS seeds a row (default 5).
#   NG_MATRIX_DONE  the --done pattern: the run JSONs of the matrix this run
#                   continues (default docs/results/peers/run-*.json, the
#                   committed matrix; a new matrix names its own folder).
#   NG_MATRIX_SHARDS  with two or more GPUs: "ARGS_1|ARGS_2|...", one
#                   peers.py per shard, shard k on GPU k mod the GPU count,
#                   with cores/shards OpenMP threads, each with
#                   NG_MATRIX_ARGS then its own ARGS (a later --forms or --H
#                   wins); unset, or one GPU: one peers.py on GPU 0.
#   NG_FIRST=1      test_capi and the Python tests first (NG_PYTEST_ARGS picks
#                   the tests; default python/tests and tests/bench).
#   NG_CUPTI=1      CUPTI spans beside the events (--cupti).
#   NG_DEFER=1      (only 1; unset, empty or 0: off) peers.py
#                   --defer-accuracy: the rows a warm-up batch warmed are
#                   timed back to back, their accuracy phases run beside the
#                   next batch's compiles (compile waits were 517 of 1575 s
#                   without it: docs/perf/peers.md, D7).
# Output under DIR: peers-1.tgz (peers/peers.json: the run's rows, with
# shards the merged table of the shards' peers-K.json; and the logs) and
# logs.tgz. Afterwards, in the repository: peers/peers.json (only it: the
# shards' rows are in it, and --merge refuses a row found twice) to
# docs/results/peers/ under a name of its own (run-*.json), then
# `python3 bench/peers.py --merge docs/results/peers/run-*.json --json
# docs/results/peers/peers.json --md docs/results/peers/peers.md`,
# and commit before the next run (--done reads the files in the tree).
set -u
OUT=${OUT:-}
limit=590
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "peers_matrix: --out needs a folder (not empty)" >&2; exit 2; }; OUT=$2; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "peers_matrix: --deadline-s needs seconds" >&2; exit 2; }; limit=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "peers_matrix: unknown argument '$1' (--out DIR, --deadline-s N)" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "peers_matrix: no output folder: --out DIR (or OUT)" >&2; exit 2; }
[[ "$limit" =~ ^[0-9]+$ ]] || { echo "peers_matrix: --deadline-s '$limit' is not a whole number of seconds" >&2; exit 2; }
case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac  # relative to the caller's folder
cd "$(dirname "$0")/.." || exit 2  # the repository root: every path below is relative to it
export PATH=/usr/local/cuda/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }  # tests with baked paths
P="$OUT"/p; mkdir -p "$P"
margin=${NG_ROW_MARGIN:-45}
export NORMGATE_LIB=$PWD/build/capi/libnormgate_capi.so
PEERS="--peers ${NG_MATRIX_PEERS:-eager,TC,TCd,F.rms_norm,Liger} --seeds ${NG_MATRIX_SEEDS:-5}${NG_CUPTI:+ --cupti}"
[ "${NG_DEFER:-0}" = 1 ] && PEERS="$PEERS --defer-accuracy"
ROWS=${NG_MATRIX_ARGS:---forms plain,res,heads24,heads4 --H 1536,2048,4096,5120,6144 --T 4097,65537,98304,131072 --w bf16,fp32}
DONE="--done ${NG_MATRIX_DONE:-docs/results/peers/run-*.json}"
set -f  # the --done pattern goes to peers.py unglobbed
# The settings are checked before any work (peers.py --plan: peers, seeds,
# rows; the --done folder must exist, so that a typo there does not measure
# the whole matrix again as a first run).
done_dir=$(dirname -- "${NG_MATRIX_DONE:-docs/results/peers/run-*.json}")
[ -d "$done_dir" ] || { echo "peers_matrix: NG_MATRIX_DONE '${NG_MATRIX_DONE:-}': no folder '$done_dir'" >&2; exit 2; }
# The plan counts only this GPU's results (as peers.py's run does; D11).
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if ! python3 bench/peers.py --plan $PEERS $ROWS $DONE ${gpu_name:+--gpu "$gpu_name"} >"$P"/plan.txt 2>"$P"/plan.err; then
  echo "peers_matrix: the settings do not make a plan (NG_MATRIX_PEERS, NG_MATRIX_SEEDS, NG_MATRIX_ARGS, NG_MATRIX_DONE):" >&2
  cat "$P"/plan.err >&2
  exit 2
fi
echo "== plan: $(tail -1 "$P"/plan.txt) [$(grep -h '^--done: .*files$' "$P"/plan.err | tr '\n' ' ')]"
set +f
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader >"$P"/gpu.txt 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${NG_FIRST:-0}" = 1 ]; then
  OMP_NUM_THREADS=4 timeout 120 build/tests/test_capi >"$P"/test_capi.txt 2>&1; echo "test_capi rc=$?" >>"$P"/test_capi.txt
  OMP_NUM_THREADS=4 timeout 180 python3 -m pytest -q ${NG_PYTEST_ARGS:-python/tests tests/bench} >"$P"/pytest.txt 2>&1; echo "pytest rc=$?" >>"$P"/pytest.txt
fi
left=$(( limit - 25 - SECONDS ))
set -f  # the --done pattern goes to peers.py unglobbed
if [ $left -lt $(( margin + 60 )) ]; then  # never a --deadline-s of 0 (none) or below (usage error)
  echo "peers_matrix: ${left} s left after the tests: no rows this run" >"$P"/peers-1.txt
elif tail -1 "$P"/plan.txt | grep -q '^0 rows'; then
  echo "peers_matrix: no row left in: $ROWS" >"$P"/peers-1.txt
else
  shards=""
  [ "${ngpu:-0}" -ge 2 ] && [ -n "${NG_MATRIX_SHARDS:-}" ] && shards=$NG_MATRIX_SHARDS
  NORMGATE_BUILD=$PWD/build NG_PEERS_SHARDS=$shards \
    NG_PEERS_ARGS="$PEERS $ROWS $DONE --deadline-s $(( left - margin ))" \
    tools/peers.sh --out "$P"/pk --deadline-s $left >"$P"/peers-1.txt 2>&1
  grep -h transparent_hugepage "$P"/pk/peers/env.txt >>"$P"/thp.txt 2>/dev/null
  [ -f "$P"/pk/peers.tgz ] && mv "$P"/pk/peers.tgz "$OUT"/peers-1.tgz
  rm -rf "$P"/pk
fi
set +f
tar czf "$OUT"/logs.tgz -C "$OUT" p
[ -s "$P"/thp.txt ] && { echo "== THP"; sort -u "$P"/thp.txt; }
[ -f "$P"/test_capi.txt ] && { echo "== test_capi"; grep -E "PASSED|FAILED|rc=" "$P"/test_capi.txt; }
[ -f "$P"/pytest.txt ] && { echo "== pytest"; grep -E "passed|failed|rc=" "$P"/pytest.txt | tail -3; }
echo "== peers-1.txt"
grep -E "peers_matrix|peers.py|host threads|CUPTI|cupti|: det |phases|unavailable|failed|accuracy deferred|end: row|not written" "$P"/peers-1.txt | tail -24 | cut -c1-300
rm -rf "$P"
