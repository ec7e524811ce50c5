#!/usr/bin/env bash
# The peer benchmark (bench/peers.py) on a CUDA machine, in one run:
#   1. install the peers' wheels from .whl/ (if present) into /tmp/site,
#   2. build libnormgate_capi.so if no usable build is there (NORMGATE_BUILD
#      may name a build made elsewhere),
#   3. python3 bench/peers.py $NG_PEERS_ARGS PEERS_ARGS, writing peers.md /
#      peers.json,
#   4. copy peers.json and peers.md into DIR, pack everything (logs
#      included) into DIR/peers.tgz, and print the Markdown table last.
# Usage: tools/peers.sh [--out DIR] [--deadline-s N] [-- PEERS_ARGS ...]
#   --out DIR       the output folder (default: $OUT if set, else out/ in the
#                   repository)
#   --deadline-s N  seconds from this script's start (install and build
#                   included) after which the run is stopped (default:
#                   $NG_PEERS_TIMEOUT, else 540); peers.py gets what is left
#                   as --end-s
#   PEERS_ARGS      bench/peers.py options, after those of NG_PEERS_ARGS
# e.g.   tools/peers.sh --out /tmp/peers -- --H 4096 --T 65537,131072 --w bf16,fp32 --seeds 2
#        NG_PEERS_SHARDS="--H 2048,6144|--H 4096,5120" tools/peers.sh -- --T 65537 --w bf16
#          (one peers.py per shard, on its own GPU; one merged table)
#        NG_PEERS_GPUS=0 NG_PEERS_THREADS=8 NG_PEERS_SHARDS=... (with shards only: every shard on
#          GPU 0, 8 OpenMP threads each)
#        NG_PEERS_OVERLAY=/tmp/cu13x tools/peers.sh -- --peers TC,Q ...
#          (a wheel unpacked into /tmp/cu13x beforehand, copied over the
#          installed wheels: QuACK's cu13 runtime, docs/perf/peers.md D3)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${NORMGATE_BUILD:-$root/build}"
final="${OUT:-$root/out}"
deadline="${NG_PEERS_TIMEOUT:-540}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] && [ -n "$2" ] || { echo "peers: --out needs a folder (not empty)" >&2; exit 2; }; final="$2"; shift 2 ;;
    --deadline-s) [ $# -ge 2 ] || { echo "peers: --deadline-s needs seconds" >&2; exit 2; }; deadline="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "peers: unknown argument '$1' (--out DIR, --deadline-s N, then -- and peers.py's options)" >&2; exit 2 ;;
  esac
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "peers: --deadline-s '$deadline' is not a whole number of seconds" >&2; exit 2; }
out="$final/peers"
mkdir -p "$out"
# A wheel may come split (a transfer with a file-size limit: QuACK's
# nvidia-cutlass-dsl-libs is 92 MB) as .whlparts/NAME.whl.partNN with
# NAME.whl.sha256 (tools/split_wheel): the parts are joined into .whl/ and
# checked.
if compgen -G "$root/.whlparts/*.part*" >/dev/null; then
  for w in $(ls "$root"/.whlparts/*.part* | sed 's/\.part[0-9]*$//' | sort -u); do
    n=$(basename "$w")
    want=$(cat "$w.sha256" 2>/dev/null | cut -d' ' -f1)
    cat "$w".part* >"$root/.whl/$n"
    got=$(sha256sum "$root/.whl/$n" | cut -d' ' -f1)
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
      echo "peers: assembled $n from $(ls "$w".part* | wc -l) parts" | tee -a "$out/steps.log"
    else
      echo "peers: $n: parts missing or corrupt (sha256 $got, want ${want:-none}): not installed" | tee -a "$out/steps.log"
      rm -f "$root/.whl/$n"
    fi
  done
fi
# NG_PEERS_OVERLAY=DIR: a folder of unpacked wheel contents copied over
# /tmp/site after the install, for a wheel over a transfer's size limit
# (QuACK's nvidia-cutlass-dsl-libs-cu13 4.7.0, 88 MB: unpacked elsewhere,
# e.g. from an xz tarball). Copied last because pip --upgrade replaces the
# shared nvidia_cutlass_dsl/ folder that every cutlass wheel writes into.
# Asked for and not usable (no such folder, no wheels to lay it over): exit 2
# before anything is installed.
overlay="${NG_PEERS_OVERLAY:-}"
if [ -n "$overlay" ]; then
  [ -d "$overlay" ] || { echo "peers: NG_PEERS_OVERLAY '$overlay' is not a folder" >&2; exit 2; }
  compgen -G "$root/.whl/*.whl" >/dev/null ||
    { echo "peers: NG_PEERS_OVERLAY '$overlay' given but no wheels in $root/.whl to lay it over" >&2; exit 2; }
  overlay="$(cd "$overlay" && pwd)"
fi
if compgen -G "$root/.whl/*.whl" >/dev/null; then
  # /tmp/site stays between runs on one machine: the same wheels (by content)
  # and the same overlay (by its file list and sizes) are not installed
  # twice; anything else starts from an empty /tmp/site, so that no earlier
  # overlay's files outlive the run that asked for them.
  wheels=$(cd "$root/.whl" && sha256sum ./*.whl | sha256sum | cut -c1-16)
  ovl=none
  [ -n "$overlay" ] && ovl="$overlay:$(cd "$overlay" && find . -type f -printf '%P %s\n' | sort | sha256sum | cut -c1-16)"
  stamp="$wheels $ovl"
  if [ "$(cat /tmp/site/.normgate-wheels 2>/dev/null)" = "$stamp" ]; then
    echo "peers: wheels $wheels (overlay: $ovl) already installed in /tmp/site" | tee -a "$out/steps.log"
  else
    rm -rf /tmp/site
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$root"/.whl/*.whl >"$out/pip.log" 2>&1; then
      echo "peers: wheel install failed (see pip.log)" | tee -a "$out/steps.log"
    elif [ -n "$overlay" ] && ! cp -a -- "$overlay"/. /tmp/site/ 2>>"$out/steps.log"; then
      # A partial copy: no stamp, so the next run starts again from an empty /tmp/site.
      echo "peers: NG_PEERS_OVERLAY '$overlay': copy over /tmp/site failed part way (steps.log)" >&2
      exit 2
    else
      [ -n "$overlay" ] && echo "peers: $overlay copied over /tmp/site" | tee -a "$out/steps.log"
      echo "$stamp" >/tmp/site/.normgate-wheels
    fi
  fi
  # pip --target does not run .pth files: add what nvidia_cutlass_dsl's .pth adds (QuACK needs it).
  export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
fi
lib="$build/capi/libnormgate_capi.so"
if [ ! -f "$lib" ]; then
  echo "peers: no $lib: building" | tee -a "$out/steps.log"
  "$root/scripts/build" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
fi
export NORMGATE_LIB="$lib"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >"$out/env.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$out/env.txt" 2>&1
# Large host buffers (inputs' and outputs' host copies, the oracle's arrays)
# on transparent huge pages where the kernel offers them on request (THP
# "madvise"): glibc then madvises its mmap'd chunks, and a 1 GB buffer costs
# 512 page faults instead of 262144. Measured on a 2-core machine: the
# oracle's open at [16384, 5120] res 1.2-1.5 s -> 0.72-0.85 s, minor faults
# 206k -> 3k (docs/perf/peers.md, D6). No effect on any result's bits.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
echo "transparent_hugepage: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown); GLIBC_TUNABLES=$GLIBC_TUNABLES" >>"$out/env.txt"
# shellcheck disable=SC2086
# --deadline-s counts from the script's start (install and build included);
# peers.py gets what is left as --end-s, so that it starts no row predicted to
# outlast it (a later --end-s in NG_PEERS_ARGS or PEERS_ARGS wins).
budget=$(( deadline - SECONDS ))
[ "$budget" -gt 30 ] || { echo "peers: no time left after install/build (${SECONDS}s)"; budget=30; }
# The args are split on blanks but never globbed: a --done pattern reaches
# peers.py as written (bash would expand run-*.json into several words).
set -f
if [ -z "${NG_PEERS_SHARDS:-}" ]; then
  timeout "$budget" python3 "$root/bench/peers.py" --end-s "$budget" ${NG_PEERS_ARGS:-} "$@" \
    --json "$out/peers.json" --md "$out/peers.md" >"$out/peers.stdout" 2>"$out/peers.log"
  rc=$?
  tail -40 "$out/peers.log" | grep -v "^ *$" | tail -25
  echo "peers.py rc=$rc"
else
  # NG_PEERS_SHARDS="ARGS_1|ARGS_2|...": one peers.py per shard, shard k on
  # GPU k-1 (mod the GPU count), each with NG_PEERS_ARGS, PEERS_ARGS and its own ARGS_k
  # and cores/shards OpenMP threads for its accuracy runs; then one table
  # (peers.py --merge). Each process times its own GPU: its ratios compare
  # implementations measured side by side on that GPU.
  IFS='|' read -r -a shards <<<"$NG_PEERS_SHARDS"
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$ngpu" -ge 1 ] || ngpu=1
  nthr=$(( $(nproc) / ${#shards[@]} > 0 ? $(nproc) / ${#shards[@]} : 1 ))
  # NG_PEERS_GPUS="0" puts every shard on the GPUs listed (shard k on entry k
  # mod the list), e.g. to leave GPU 1 to a campaign; NG_PEERS_THREADS sets
  # each shard's OpenMP threads (default: the cores over the shards).
  IFS=',' read -r -a gpus <<<"${NG_PEERS_GPUS:-}"
  if [ -n "${NG_PEERS_THREADS:-}" ]; then
    [[ "$NG_PEERS_THREADS" =~ ^[1-9][0-9]*$ ]] || { echo "peers: NG_PEERS_THREADS='$NG_PEERS_THREADS' is not a positive integer" >&2; exit 2; }
    nthr=$NG_PEERS_THREADS
  fi
  for g in "${gpus[@]}"; do
    [[ "$g" =~ ^[0-9]+$ ]] && [ "$g" -lt "$ngpu" ] || { echo "peers: NG_PEERS_GPUS entry '$g' is not a GPU index below $ngpu" >&2; exit 2; }
  done
  pids=()
  for k in "${!shards[@]}"; do
    gpu=$(( k % ngpu ))
    [ "${#gpus[@]}" -gt 0 ] && gpu=${gpus[$(( k % ${#gpus[@]} ))]}
    CUDA_VISIBLE_DEVICES=$gpu OMP_NUM_THREADS=$nthr timeout "$budget" python3 "$root/bench/peers.py" \
      --end-s "$budget" ${NG_PEERS_ARGS:-} "$@" ${shards[$k]} --json "$out/peers-$((k + 1)).json" --md "$out/peers-$((k + 1)).md" \
      >"$out/peers-$((k + 1)).stdout" 2>"$out/peers-$((k + 1)).log" &
    pids+=($!)
  done
  rc=0
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}" || rc=$?
    echo "shard $((k + 1)) (${shards[$k]}): $(grep -cE ' (fwd|bwd|2xfwd\+bwd): det ' "$out/peers-$((k + 1)).log") op rows"
    tail -5 "$out/peers-$((k + 1)).log"
  done
  jsons=()
  for k in "${!shards[@]}"; do [ -f "$out/peers-$((k + 1)).json" ] && jsons+=("$out/peers-$((k + 1)).json"); done
  if [ "${#jsons[@]}" -gt 0 ]; then
    python3 "$root/bench/peers.py" --merge "${jsons[@]}" --json "$out/peers.json" --md "$out/peers.md" >/dev/null \
      2>"$out/merge.log" || { echo "peers: merge failed:"; cat "$out/merge.log"; }
  fi
  echo "peers.py (${#shards[@]} shards) rc=$rc"
fi
set +f
[ -f "$out/peers.md" ] && cat "$out/peers.md"
# The tables themselves stay beside the archive (DIR/peers.json, DIR/peers.md):
# a caller that looks for them need not unpack the logs.
for f in peers.json peers.md; do [ -f "$out/$f" ] && cp "$out/$f" "$final/$f"; done
tar -czf "$final/peers.tgz" -C "$final" peers && rm -rf "$out"
