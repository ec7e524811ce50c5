#!/usr/bin/env bash
# Nsight Compute counters of our kernels beside a peer's on chosen cases:
# the profile a trailing row of the peers matrix needs before its gap is
# explained (docs/perf/peers.md, Open leads). For each case, one process runs
# bench/kernel_shapes.py --ncu-window (one forward and one backward of each
# implementation inside the profiler window; compilation, autotuning and
# warm-up outside) under `ncu --set full`, clocks as the GPU sets them. Then
# every report is exported (--page raw --csv, --page details) and
# tools/ncu_table.py puts one row per kernel into DIR/table.md, printed last.
# Usage: tools/ncu_rows.sh [--out DIR] [--deadline-s N] [--impls ours,TC] CASE ...
#   --out DIR       output folder (default: $OUT if set, else out/ncu in the
#                   repository); per case K (1, 2, ...): K.ncu-rep, K.raw.csv,
#                   K.details.txt, K.log; table.md; steps.log
#   --deadline-s N  seconds from this script's start after which no case
#                   starts and a running one is stopped (default 540); a case
#                   starts only with at least 150 s left (a max-autotune
#                   compile and 38 replays of each kernel)
#   --impls LIST    bench/peers/impls.py names (default ours,TC)
#   CASE            a case id, e.g. H=1536,T=131072,w=bf16,form=res,family=normal,seed=0
# Needs ncu on PATH (or /usr/local/cuda/bin), python3 with torch, and
# libnormgate_capi.so (NORMGATE_LIB, else NORMGATE_BUILD/capi, else build/capi).
# The routes: NORMGATE_ROUTES if set, else this GPU's own table in routes/
# (sm90a@<gpu>.toml, e.g. sm90a@nvidia-h100-80gb-hbm3.toml) where the
# repository has one, else routes/sm90a.toml (a library copied out of its
# build folder finds no installed table of its own).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/out}/ncu"
[ -n "${OUT:-}" ] && out="$OUT"
deadline=540
impls="ours,TC"
cases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "ncu_rows: --out needs a folder (not empty)" >&2; exit 2; }; out="$2"; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "ncu_rows: --deadline-s needs seconds" >&2; exit 2; }; deadline="$2"; shift 2 ;;
    --impls) [ $# -ge 2 ] && [ -n "$2" ] || { echo "ncu_rows: --impls needs a list, e.g. ours,TC" >&2; exit 2; }; impls="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "ncu_rows: unknown option '$1' (--out DIR, --deadline-s N, --impls LIST, then case ids)" >&2; exit 2 ;;
    *) cases+=("$1"); shift ;;
  esac
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "ncu_rows: --deadline-s '$deadline' is not a whole number of seconds" >&2; exit 2; }
[ ${#cases[@]} -gt 0 ] || { echo "ncu_rows: no case given (e.g. H=1536,T=131072,w=bf16,form=res,family=normal,seed=0)" >&2; exit 2; }
for c in "${cases[@]}"; do
  [[ "$c" =~ ^H=[0-9]+,T=[0-9]+,w=(bf16|fp32),form=[a-z0-9]+(,[a-z_]+=[^,]+)*$ ]] ||
    { echo "ncu_rows: '$c' is not a case id (H=...,T=...,w=bf16|fp32,form=...,family=...,seed=...)" >&2; exit 2; }
done
command -v ncu >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
command -v ncu >/dev/null || { echo "ncu_rows: ncu (Nsight Compute) is not on PATH nor in /usr/local/cuda/bin" >&2; exit 2; }
if [ -z "${NORMGATE_LIB:-}" ]; then
  NORMGATE_LIB="${NORMGATE_BUILD:-$root/build}/capi/libnormgate_capi.so"
fi
[ -f "$NORMGATE_LIB" ] || { echo "ncu_rows: no C library at $NORMGATE_LIB (set NORMGATE_LIB or NORMGATE_BUILD)" >&2; exit 2; }
if [ -z "${NORMGATE_ROUTES:-}" ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-')
  NORMGATE_ROUTES="$root/routes/sm90a.toml"
  [ -n "$gpu" ] && [ -f "$root/routes/sm90a@$gpu.toml" ] && NORMGATE_ROUTES="$root/routes/sm90a@$gpu.toml"
fi
[ -f "$NORMGATE_ROUTES" ] || { echo "ncu_rows: no route table at $NORMGATE_ROUTES (set NORMGATE_ROUTES)" >&2; exit 2; }
export NORMGATE_LIB NORMGATE_ROUTES PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out" || { echo "ncu_rows: cannot create $out" >&2; exit 2; }
t0=$SECONDS
left() { echo $((deadline - (SECONDS - t0))); }
log() { echo "$*" | tee -a "$out/steps.log"; }
log "ncu_rows: $(date -u +%FT%TZ) commit $(git -C "$root" log -1 --format=%h 2>/dev/null || echo '?')" \
  "routes $NORMGATE_ROUTES" \
  "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)" \
  "$(ncu --version 2>/dev/null | tail -1)"
k=0
raws=()
for c in "${cases[@]}"; do
  k=$((k + 1))
  if [ "$(left)" -lt 150 ]; then log "case $k ($c): not started, $(left) s left"; continue; fi
  log "case $k: $c ($(left) s left)"
  timeout "$(( $(left) - 10 ))" ncu --clock-control none --profile-from-start off --set full --import-source no \
    -f -o "$out/$k" python3 "$root/bench/kernel_shapes.py" --impls "$impls" --ncu-window --case "$c" \
    >"$out/$k.log" 2>&1
  rc=$?
  log "case $k: ncu rc=$rc ($(( SECONDS - t0 )) s)"
  [ -f "$out/$k.ncu-rep" ] || { tail -5 "$out/$k.log"; continue; }
  ncu -i "$out/$k.ncu-rep" --page raw --csv >"$out/$k.raw.csv" 2>>"$out/steps.log" && raws+=("$out/$k.raw.csv")
  ncu -i "$out/$k.ncu-rep" --page details --print-units base >"$out/$k.details.txt" 2>>"$out/steps.log"
done
[ ${#raws[@]} -gt 0 ] || { log "ncu_rows: no report"; exit 1; }
python3 "$root/tools/ncu_table.py" "${raws[@]}" >"$out/table.md"
cat "$out/table.md"
